package sysmon

import (
	"os"
	"runtime"
	"syscall"
)

// init re-executes this process in place (same PID, arguments and open
// standard streams) with the environment AwakeEnv gives, before the rest of
// the binary initializes. When there is nothing to do, or the exec fails,
// the process goes on with the runtime's defaults.
func init() {
	env := AwakeEnv(os.Args, os.Environ(), runtime.GOMAXPROCS(0))
	if env == nil {
		return
	}
	// /proc/self/exe is this very binary even when its file has since
	// been replaced or removed (an upgrade in place).
	_ = syscall.Exec("/proc/self/exe", os.Args, env)
}
