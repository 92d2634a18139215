package ha

import (
	"context"
	"errors"
	"testing"
	"time"
)

// slaveInSync is the only slave's InSync (false without exactly one).
func slaveInSync(m *Master) bool {
	st := m.Slaves()
	return len(st) == 1 && st[0].InSync
}

// MinInSync 1: without a slave, and once the only slave missed an ack
// deadline, a wait succeeds (the master acknowledges alone, counted); a
// slave that caught up is in the set again and waits are for it. MinInSync
// 2 (the default): the same slave times the wait out, and shows out of
// sync.
func TestAwaitAckMinInSync(t *testing.T) {
	for _, min := range []int{1, 2} {
		t.Run(map[int]string{1: "alone", 2: "refuse"}[min], func(t *testing.T) {
			ms, ss, addr, m := masterPair(t, nil, func(o *MasterOptions) { o.MinInSync = min })
			put(t, ms, 10, 1000, m.Notify)
			far := time.Now().Add(time.Minute)
			err := await(m, ms.MaxPhysOffset(), far).settledNow(t)
			switch {
			case min == 1 && (err != nil || m.AckedAlone() != 1):
				t.Fatalf("no slave, MinInSync 1: %v, acked alone %d; want nil, 1", err, m.AckedAlone())
			case min == 2 && (!errors.Is(err, ErrSlaveNotAvailable) || m.AckedAlone() != 0):
				t.Fatalf("no slave, MinInSync 2: %v, acked alone %d; want ErrSlaveNotAvailable, 0", err, m.AckedAlone())
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// WaitAcked is "a slave holds it" (a demote's check): never alone.
			if err := m.WaitAcked(ctx, ms.MaxPhysOffset()); !errors.Is(err, ErrSlaveNotAvailable) {
				t.Fatalf("WaitAcked without a slave, MinInSync %d: %v, want ErrSlaveNotAvailable", min, err)
			}
			alone := m.AckedAlone()

			g := &failGate{gate: newGate(ss)}
			s := startSlave(t, addr, g, nil)
			defer s.Close()
			defer g.release()
			waitFor(t, "the slave to catch up and be in sync", 10*time.Second, func() bool {
				return slaveInSync(m) && m.Slaves()[0].Acked == ms.MaxPhysOffset()
			})
			if n, best := m.InSync(); n != 1 || best != ms.MaxPhysOffset() {
				t.Fatalf("InSync = %d, %d; want 1, %d", n, best, ms.MaxPhysOffset())
			}
			// In sync: a wait is for the slave, whatever MinInSync.
			put(t, ms, 2, 1000, m.Notify)
			if err := await(m, ms.MaxPhysOffset(), far).wait(t, 10*time.Second); err != nil || m.AckedAlone() != alone {
				t.Fatalf("a wait with the slave in sync: %v, acked alone %d (was %d)", err, m.AckedAlone(), alone)
			}

			// The slave stalls: a wait reaches its deadline.
			g.block()
			put(t, ms, 2, 1000, m.Notify)
			end := ms.MaxPhysOffset()
			timed := await(m, end, time.Now().Add(200*time.Millisecond))
			pending := await(m, end, far)
			err = timed.wait(t, 10*time.Second)
			if slaveInSync(m) {
				t.Fatal("a slave that missed an ack deadline is still in sync")
			}
			if n, _ := m.InSync(); n != 0 {
				t.Fatalf("InSync counts %d slaves, want 0", n)
			}
			if min == 2 {
				if !errors.Is(err, ErrSlaveTimeout) {
					t.Fatalf("MinInSync 2, a stalled slave: %v, want ErrSlaveTimeout", err)
				}
				pending.pending(t)
				if m.AckedAlone() != 0 {
					t.Fatalf("MinInSync 2 acknowledged %d waits alone", m.AckedAlone())
				}
			} else {
				if err != nil {
					t.Fatalf("MinInSync 1, the only slave out of sync: %v, want nil (alone)", err)
				}
				if err := pending.wait(t, 10*time.Second); err != nil {
					t.Fatalf("MinInSync 1: the wait pending beside it: %v, want nil (alone)", err)
				}
				if err := await(m, end, far).settledNow(t); err != nil {
					t.Fatalf("MinInSync 1, slave out of sync: a new wait %v, want nil at once", err)
				}
				if got := m.AckedAlone(); got != alone+3 {
					t.Fatalf("acked alone %d, want %d", got, alone+3)
				}
			}

			// It catches up: in sync again, and a wait is for it.
			g.release()
			if min == 2 {
				if err := pending.wait(t, 10*time.Second); err != nil {
					t.Fatalf("MinInSync 2: the pending wait once the slave caught up: %v", err)
				}
			}
			waitFor(t, "the slave to be in sync again", 10*time.Second, func() bool { return slaveInSync(m) })
			alone = m.AckedAlone()
			g.block()
			put(t, ms, 1, 1000, m.Notify)
			w := await(m, ms.MaxPhysOffset(), far)
			w.pending(t)
			g.release()
			if err := w.wait(t, 10*time.Second); err != nil || m.AckedAlone() != alone {
				t.Fatalf("a wait with the slave in sync again: %v, acked alone %d (was %d)", err, m.AckedAlone(), alone)
			}
		})
	}
}
