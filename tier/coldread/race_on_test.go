//go:build race

package coldread_test

// raceEnabled: the test binary was built with -race.
const raceEnabled = true
