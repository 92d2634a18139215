//go:build race

package simtest

// raceEnabled: the test binary was built with -race. The race detector's
// runtime has aborted a long schedule run ("ThreadSanitizer: CHECK failed:
// tsan_rtl.cpp:346", an internal limit of the detector, not a race it
// found), so the schedule runs are left to the test command's pass
// without -race; the broker code under them is race-tested in its own
// packages.
const raceEnabled = true
