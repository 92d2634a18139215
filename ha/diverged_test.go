package ha

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestMasterRefusesDivergedSlave (issue 10: divergent logs): a slave whose
// log was last written under an older epoch and goes past the offset where
// a newer epoch took the log over is refused with StatusDiverged, told
// that offset (OnDiverged), and sent nothing; one whose log ends at or
// before it, or that is at the master's epoch, follows as usual.
func TestMasterRefusesDivergedSlave(t *testing.T) {
	ms := openStore(t, t.TempDir())
	defer closeStore(t, ms)
	put(t, ms, 40, 300, nil)
	end := ms.MaxPhysOffset()
	var asked atomic.Int64
	asked.Store(-2)
	cut := end / 2
	addr := haAddr(t)
	m := startMaster(t, addr, ms, func() int64 { return 5 }, func(o *MasterOptions) {
		o.Diverged = func(e int64) (int64, bool) { asked.Store(e); return cut, true }
	})
	defer m.Close()

	// A slave at epoch 4 whose log is a copy past the cut.
	ds := openStore(t, t.TempDir())
	defer closeStore(t, ds)
	put(t, ds, 40, 300, nil)
	var told atomic.Int64
	told.Store(-1)
	s := startSlave(t, addr, ds, func(o *SlaveOptions) {
		o.MinEpoch = 4
		o.OnDiverged = func(c int64) { told.Store(c) }
	})
	waitFor(t, "the diverged slave to be told the cut", 10*time.Second, func() bool { return told.Load() == cut })
	s.Close()
	if asked.Load() != 4 {
		t.Fatalf("Diverged asked about epoch %d, want the slave's 4", asked.Load())
	}
	if st := s.State(); st.Sessions != 0 || st.Received != 0 {
		t.Fatalf("the diverged slave was followed: %+v", st)
	}

	// At epoch 4 but ending before the cut, or at the master's epoch:
	// followed to the end.
	for _, epoch := range []int64{4, 5} {
		fs := openStore(t, t.TempDir())
		put(t, fs, 10, 300, nil)
		if fs.MaxPhysOffset() > cut {
			t.Fatalf("test setup: the short log ends at %d, past the cut %d", fs.MaxPhysOffset(), cut)
		}
		s := startSlave(t, addr, fs, func(o *SlaveOptions) {
			o.MinEpoch = epoch
			o.OnDiverged = func(int64) { t.Errorf("epoch %d: OnDiverged called", epoch) }
		})
		waitFor(t, "the slave to catch up", 10*time.Second, func() bool { return fs.MaxPhysOffset() == end })
		s.Close()
		closeStore(t, fs)
	}
}
