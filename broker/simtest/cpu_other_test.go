//go:build !unix

package simtest

// cpuSeconds is 0 where getrusage is not there.
func cpuSeconds() float64 { return 0 }
