//go:build !race

package segfile

// raceEnabled: the test binary was built with -race.
const raceEnabled = false
