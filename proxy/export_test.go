package proxy

import "time"

// SetClock makes the ACL's date checks read f instead of time.Now until
// the returned func restores it (tests of the skew window).
func SetClock(f func() time.Time) (restore func()) {
	clockFunc.Store(&f)
	return func() { clockFunc.Store(nil) }
}
