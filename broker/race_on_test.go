//go:build race

package broker

// raceEnabled: the test binary was built with -race (allocation counts
// differ under it).
const raceEnabled = true
