package main

import (
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"testing"
)

// TestTuneGCDefaultsAndOverrides: without GOGC/GOMEMLIMIT the broker's
// defaults apply; an operator's setting is left alone.
func TestTuneGCDefaultsAndOverrides(t *testing.T) {
	prevPct := debug.SetGCPercent(100)
	prevLim := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(prevPct)
		debug.SetMemoryLimit(prevLim)
	})
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	// t.Setenv cannot unset; LookupEnv sees "" as set, so test both paths
	// explicitly: set means "operator's choice".
	tuneGC(256<<20, discardLog())
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC set by the operator: percent changed to %d", got)
	}
	unsetEnv(t, "GOGC")
	unsetEnv(t, "GOMEMLIMIT")
	tuneGC(256<<20, discardLog())
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Fatalf("GC percent %d, want %d", got, defaultGCPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != 256<<20+gcHeadroom {
		t.Fatalf("memory limit %d, want %d", got, 256<<20+gcHeadroom)
	}
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// unsetEnv removes k for the rest of the test and restores it after.
func unsetEnv(t *testing.T, k string) {
	t.Helper()
	t.Setenv(k, "") // registers the restore
	os.Unsetenv(k)
}
