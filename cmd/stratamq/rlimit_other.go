//go:build !unix

package main

import "log/slog"

// raiseFDLimit: no RLIMIT_NOFILE here.
func raiseFDLimit(*slog.Logger) (uint64, bool) { return 0, false }
