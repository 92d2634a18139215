//go:build unix

package main

import (
	"log/slog"
	"syscall"
)

// raiseFDLimit raises the soft RLIMIT_NOFILE to the hard limit and logs
// both (issue 9 item 7): consumequeue files, segments and connections all
// take descriptors. The Go runtime already raises the soft limit at start
// (syscall's init since Go 1.19; Go 1.26 sets it to hard-1, and processes
// started through os/exec get the original soft limit back), so this
// usually moves it by one; calling Setrlimit also stops that restore for
// children, which the broker does not start. It returns the soft limit
// the process runs with (ok false when it is unknown).
func raiseFDLimit(log *slog.Logger) (soft uint64, ok bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("open file limit: getrlimit failed", "err", err)
		return 0, false
	}
	before := lim.Cur
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			log.Warn("open file limit: could not raise the soft limit to the hard limit", "soft", lim.Cur, "hard", lim.Max, "err", err)
		} else {
			lim = raised
		}
	}
	log.Info("open file limit", "soft", lim.Cur, "hard", lim.Max, "soft_before", before)
	return uint64(lim.Cur), true
}
