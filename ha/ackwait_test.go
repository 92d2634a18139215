package ha

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// awaited is one AwaitAck call's outcome: done must run exactly once.
type awaited struct {
	calls atomic.Int32
	ch    chan error
}

func await(m *Master, off int64, deadline time.Time) *awaited {
	a := &awaited{ch: make(chan error, 1)}
	m.AwaitAck(off, deadline, func(err error) {
		if a.calls.Add(1) == 1 {
			a.ch <- err
		}
	})
	return a
}

// settledNow is the outcome of a call that must be settled before
// AwaitAck returned (on the caller's goroutine).
func (a *awaited) settledNow(t *testing.T) error {
	t.Helper()
	select {
	case err := <-a.ch:
		return err
	default:
		t.Fatal("AwaitAck returned before settling a wait that is over at once")
		return nil
	}
}

func (a *awaited) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-a.ch:
		return err
	case <-time.After(d):
		t.Fatalf("AwaitAck's callback did not run within %v", d)
		return nil
	}
}

func (a *awaited) pending(t *testing.T) {
	t.Helper()
	select {
	case err := <-a.ch:
		t.Fatalf("a wait that cannot be over yet was settled: %v", err)
	default:
	}
}

func (a *awaited) once(t *testing.T) {
	t.Helper()
	if n := a.calls.Load(); n != 1 {
		t.Fatalf("the callback ran %d times, want once", n)
	}
}

// AwaitAck settles as WaitAcked answers, without a goroutine per wait: at
// once without a slave, on the ack that covers it, ErrSlaveTimeout at the
// deadline, ErrSlaveNotAvailable when the slave goes or the master stops;
// waits settle in offset order, each exactly once.
func TestAwaitAck(t *testing.T) {
	ms, ss, addr, m := masterPair(t, nil, func(o *MasterOptions) { o.MaxLag = 64 << 10 })
	put(t, ms, 10, 1000, m.Notify)
	far := time.Now().Add(time.Minute)

	if err := await(m, ms.MaxPhysOffset(), far).settledNow(t); !errors.Is(err, ErrSlaveNotAvailable) {
		t.Fatalf("no slave: %v, want ErrSlaveNotAvailable", err)
	}

	// A stalled slave: waits stay pending (in order), then the deadline
	// ends the ones it passed, and the ack settles the rest.
	g := &failGate{gate: newGate(ss)}
	g.block()
	s := startSlave(t, addr, g, nil)
	defer s.Close()
	defer g.release() // before s.Close: an append in progress must finish
	waitFor(t, "the slave to connect", 10*time.Second, func() bool { return len(m.Slaves()) == 1 })
	end := ms.MaxPhysOffset()
	var ws []*awaited
	for i := int64(1); i <= 4; i++ {
		ws = append(ws, await(m, end*i/4, far))
	}
	timed := await(m, end, time.Now().Add(200*time.Millisecond))
	if err := timed.wait(t, 10*time.Second); !errors.Is(err, ErrSlaveTimeout) {
		t.Fatalf("a wait past its deadline: %v, want ErrSlaveTimeout", err)
	}
	for _, w := range ws {
		w.pending(t)
	}
	g.release()
	for i, w := range ws {
		if err := w.wait(t, 10*time.Second); err != nil {
			t.Fatalf("wait %d of %d once the slave caught up: %v", i+1, len(ws), err)
		}
		w.once(t)
	}
	if ss.MaxPhysOffset() < end {
		t.Fatalf("waits settled with the slave at %d, below %d", ss.MaxPhysOffset(), end)
	}
	timed.once(t)
	if err := await(m, end, far).settledNow(t); err != nil {
		t.Fatalf("an acked offset: %v, want nil at once", err)
	}

	// Past MaxLag the slave is not available at all.
	put(t, ms, 80, 1000, m.Notify)
	waitFor(t, "the slave to catch up", 20*time.Second, func() bool {
		st := m.Slaves()
		return len(st) == 1 && st[0].Acked == ms.MaxPhysOffset()
	})
	g.block()
	put(t, ms, 2, 1000, m.Notify)
	lagging := await(m, ms.MaxPhysOffset(), far)
	lagging.pending(t)
	put(t, ms, 80, 1000, m.Notify)
	if err := await(m, ms.MaxPhysOffset(), far).settledNow(t); !errors.Is(err, ErrSlaveNotAvailable) {
		t.Fatalf("a slave %d bytes behind (bound 64 KiB): %v, want ErrSlaveNotAvailable", ms.MaxPhysOffset()-ss.MaxPhysOffset(), err)
	}

	// The slave's connection drops (its blocked append fails): the
	// pending wait fails, it does not wait for its deadline. (Whether the
	// master sees the drop or the slave's reconnect first, the slave lags
	// past MaxLag.)
	g.fail.Store(true)
	g.release()
	if err := lagging.wait(t, 10*time.Second); !errors.Is(err, ErrSlaveNotAvailable) {
		t.Fatalf("pending when the slave left: %v, want ErrSlaveNotAvailable", err)
	}
	lagging.once(t)
	g.fail.Store(false)
}

// failGate is a gate whose appends fail while fail is set (after the gate
// lets them through): the slave drops its connection and redials.
type failGate struct {
	*gate
	fail atomic.Bool
}

func (g *failGate) AppendRaw(off int64, b []byte) error {
	if err := g.gate.AppendRaw(off, b); err != nil {
		return err
	}
	if g.fail.Load() {
		return errors.New("injected append failure")
	}
	return nil
}

// Close fails the waits still pending.
func TestAwaitAckClose(t *testing.T) {
	ms, ss, addr, m := masterPair(t, nil, nil)
	put(t, ms, 10, 1000, m.Notify)
	g := newGate(ss)
	g.block()
	s := startSlave(t, addr, g, nil)
	defer s.Close()
	defer g.release()
	waitFor(t, "the slave to connect", 10*time.Second, func() bool { return len(m.Slaves()) == 1 })
	w := await(m, ms.MaxPhysOffset(), time.Now().Add(time.Minute))
	w.pending(t)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.settledNow(t); !errors.Is(err, ErrSlaveNotAvailable) {
		t.Fatalf("pending at Close: %v, want ErrSlaveNotAvailable", err)
	}
	w.once(t)
	if err := await(m, 0, time.Now().Add(time.Minute)).settledNow(t); !errors.Is(err, ErrSlaveNotAvailable) {
		t.Fatalf("after Close: %v, want ErrSlaveNotAvailable", err)
	}
}

// Many goroutines wait on offsets in any order while the log grows and a
// slave follows: every wait settles exactly once, and nil only once the
// slave's report covers its offset (an acked send is on the slave).
func TestAwaitAckConcurrent(t *testing.T) {
	ms, ss, addr, m := masterPair(t, nil, nil)
	s := startSlave(t, addr, ss, nil)
	defer s.Close()
	waitFor(t, "the slave to connect", 10*time.Second, func() bool { return len(m.Slaves()) == 1 })

	const waiters = 8
	const rounds = 40
	type outcome struct {
		off, acked int64
		err        error
	}
	results := make(chan outcome, waiters*(rounds+1))
	var calls atomic.Int64
	done := make(chan struct{})
	written := make(chan struct{}) // closed once the log stops growing
	for w := range waiters {
		go func() {
			defer func() { done <- struct{}{} }()
			for r := range rounds + 1 {
				end := ms.MaxPhysOffset()
				off := end - int64((w*31+r*17)%1000) // behind the end, or at it
				if off < 0 {
					off = end
				}
				if r == rounds {
					// Last: exactly the final end, which no later
					// report goes past.
					<-written
					off = ms.MaxPhysOffset()
				}
				var once atomic.Bool
				settled := make(chan struct{})
				m.AwaitAck(off, time.Now().Add(20*time.Second), func(err error) {
					calls.Add(1)
					if !once.CompareAndSwap(false, true) {
						t.Errorf("wait for %d settled twice", off)
						return
					}
					var acked int64 = -1
					if st := m.Slaves(); len(st) == 1 {
						acked = st[0].Acked
					}
					results <- outcome{off: off, acked: acked, err: err}
					close(settled)
				})
				select {
				case <-settled:
				case <-time.After(30 * time.Second):
					t.Errorf("wait for %d never settled", off)
					return
				}
			}
		}()
	}
	for range 60 {
		put(t, ms, 4, 500, m.Notify)
	}
	close(written)
	for range waiters {
		<-done
	}
	close(results)
	n := 0
	for o := range results {
		n++
		if o.err != nil {
			t.Errorf("wait for %d: %v", o.off, o.err)
			continue
		}
		if o.acked < o.off {
			t.Errorf("wait for %d settled nil with the slave's report at %d", o.off, o.acked)
		}
	}
	if want := waiters * (rounds + 1); n != want || calls.Load() != int64(want) {
		t.Fatalf("%d outcomes, %d callbacks, want %d each", n, calls.Load(), want)
	}
}
