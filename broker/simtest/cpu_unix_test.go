//go:build unix

package simtest

import (
	"syscall"
	"time"
)

// cpuSeconds is the CPU time (user and system) the process used so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
