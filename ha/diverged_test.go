package ha

import (
	"net"
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

// TestMasterJudgesEpochZeroHello: a slave whose hello says epoch 0 (it
// could not tell which epoch its log agrees with) is judged as the oldest
// epoch, not waved through: past the cut it is refused and told the cut,
// and it never counts as holding anything.
func TestMasterJudgesEpochZeroHello(t *testing.T) {
	ms := openStore(t, t.TempDir())
	defer closeStore(t, ms)
	put(t, ms, 40, 300, nil)
	cut := ms.MaxPhysOffset() / 2
	addr := haAddr(t)
	var asked atomic.Int64
	asked.Store(-1)
	m := startMaster(t, addr, ms, func() int64 { return 5 }, func(o *MasterOptions) {
		o.Diverged = func(e int64) (int64, bool) { asked.Store(e); return cut, true }
	})
	defer m.Close()
	ds := openStore(t, t.TempDir())
	defer closeStore(t, ds)
	put(t, ds, 40, 300, nil)
	var told atomic.Int64
	told.Store(-1)
	s := startSlave(t, addr, ds, func(o *SlaveOptions) {
		o.MinEpoch = 0
		o.OnDiverged = func(c int64) { told.Store(c) }
	})
	waitFor(t, "the epoch-0 slave to be told the cut", 10*time.Second, func() bool { return told.Load() == cut })
	s.Close()
	if asked.Load() != 0 {
		t.Fatalf("Diverged asked about epoch %d, want 0", asked.Load())
	}
	if best, _ := m.Acked(); best >= 0 {
		t.Fatalf("the refused slave counts as holding offset %d", best)
	}
}

// TestMasterRefusesMidRecordHello: a hello whose offset is inside a record
// of the master's log (a slave with a torn or foreign log) is refused: the
// stream from there would not be whole records, and its offset must not
// count as acknowledged.
func TestMasterRefusesMidRecordHello(t *testing.T) {
	ms := openStore(t, t.TempDir())
	defer closeStore(t, ms)
	put(t, ms, 10, 300, nil)
	addr := haAddr(t)
	m := startMaster(t, addr, ms, func() int64 { return 1 }, nil)
	defer m.Close()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := helloRaw(c, testSecret, hello{version: Version, name: "b1", offset: 17, epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.status != StatusOffsetOutOfRange {
		t.Fatalf("hello at offset 17 (inside the first record): status %s, want a refusal", statusText(r.status))
	}
	if best, _ := m.Acked(); best >= 0 {
		t.Fatalf("the refused hello counts as holding offset %d", best)
	}
}
