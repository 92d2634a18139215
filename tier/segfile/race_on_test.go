//go:build race

package segfile

// raceEnabled: the test binary was built with -race (sync.Pool drops
// items at random under it, so allocation counts differ).
const raceEnabled = true
