package main

import (
	"os"
	"runtime"
	"syscall"
)

// keepSysmonAwake re-executes this process in place (same PID, arguments
// and open standard streams) with the environment sysmonAwakeEnv gives,
// before anything else has started. It returns when there is nothing to do
// or the exec fails; the process then runs with the runtime's defaults.
func keepSysmonAwake() {
	env := sysmonAwakeEnv(os.Args, os.Environ(), runtime.GOMAXPROCS(0))
	if env == nil {
		return
	}
	// /proc/self/exe is this very binary even when its file has since
	// been replaced or removed (an upgrade in place).
	_ = syscall.Exec("/proc/self/exe", os.Args, env)
}
