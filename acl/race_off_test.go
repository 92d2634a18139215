//go:build !race

package acl

// raceEnabled: the test binary was built with -race.
const raceEnabled = false
