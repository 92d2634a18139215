package ha

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/store"
)

// pushPair starts a master that neither polls nor heartbeats (only Notify
// and Push move bytes) and a slave appending to wrap(its store) (the store
// itself for nil), and waits until they are connected.
func pushPair(t *testing.T, wrap func(*store.Store) Appender) (ms, ss *store.Store, m *Master, s *Slave) {
	t.Helper()
	ms, ss, addr, m := masterPair(t, nil, func(o *MasterOptions) { o.PollInterval, o.HeartbeatInterval = time.Hour, time.Hour })
	var app Appender = ss
	if wrap != nil {
		app = wrap(ss)
	}
	s = startSlave(t, addr, app, nil)
	t.Cleanup(func() { s.Close() })
	waitFor(t, "the slave to connect", 10*time.Second, func() bool { return len(m.Slaves()) == 1 })
	waitStreamParked(t, m)
	return ms, ss, m, s
}

// waitStreamParked waits until the stream goroutine of m's one slave has
// started and waits for a wake-up: the slave is idle, so a Push sends to
// it on the caller's goroutine (a connection listed before its stream
// goroutine started is skipped by Push, which wakes that goroutine).
func waitStreamParked(t *testing.T, m *Master) {
	t.Helper()
	waitFor(t, "the slave's stream goroutine to wait", 10*time.Second, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		for sc := range m.conns {
			return sc.live.Load() && sc.parked.Load()
		}
		return false
	})
}

// TestPushSendsOnTheCallersGoroutine: a held write is on its way to an
// idle slave when Push returns (sent there, not handed to the stream
// goroutine), and reaches it with no Notify and no poll.
func TestPushSendsOnTheCallersGoroutine(t *testing.T) {
	ms, ss, m, _ := pushPair(t, nil)
	for i := 0; i < 20; i++ {
		waitStreamParked(t, m)
		m.HoldNotify()
		put(t, ms, 1+i%3, 500, m.Notify) // the store's dispatch hook: held
		end := ms.MaxPhysOffset()
		m.Push(time.Now().Add(10 * time.Second))
		if st := m.Slaves(); len(st) != 1 || st[0].Sent != end {
			t.Fatalf("write %d: after Push the master sent %+v, want all up to %d", i, st, end)
		}
		waitFor(t, "write "+strconv.Itoa(i)+" to reach the slave", 10*time.Second, func() bool {
			st := m.Slaves()
			return len(st) == 1 && st[0].Acked == end
		})
	}
	sameLog(t, ms, ss, 0)
}

// TestPushBusySlaveWakesStream: a slave still appending what it was sent
// is not written to by Push; its stream goroutine is woken and sends the
// held bytes once the slave goes on.
func TestPushBusySlaveWakesStream(t *testing.T) {
	var g *gate
	ms, ss, m, _ := pushPair(t, func(st *store.Store) Appender { g = newGate(st); return g })
	t.Cleanup(g.release) // before the slave's Close: an append in progress must finish
	g.block()
	put(t, ms, 3, 500, m.Notify)
	first := ms.MaxPhysOffset()
	waitFor(t, "the first write sent (the slave holds it unacked)", 10*time.Second, func() bool {
		st := m.Slaves()
		return len(st) == 1 && st[0].Sent == first
	})
	m.HoldNotify()
	put(t, ms, 3, 500, m.Notify)
	m.Push(time.Now().Add(10 * time.Second))
	g.release()
	waitFor(t, "the held write to reach the slave", 10*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	sameLog(t, ms, ss, 0)
}

// TestPushConcurrentWithNotify: senders that hold and push, and another
// writer that only notifies, all at once with no polling: every byte
// reaches the slave (a Notify swallowed while a Push was due must not be
// lost).
func TestPushConcurrentWithNotify(t *testing.T) {
	ms, ss, m, _ := pushPair(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	write := func(i int) bool {
		_, err := ms.Put(context.Background(), []store.Message{{Topic: "T0", Body: bytes.Repeat([]byte{byte(i)}, 300+i%5*50)}})
		if err != nil {
			errs <- err
			return false
		}
		m.Notify() // the store's dispatch hook
		return true
	}
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for i := 0; i < 40; i++ {
				m.HoldNotify()
				ok := write(i)
				m.Push(time.Now().Add(10 * time.Second))
				if !ok {
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; i < 40 && write(i); i++ {
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	end := ms.MaxPhysOffset()
	waitFor(t, "every write to reach the slave", 20*time.Second, func() bool { return ss.MaxPhysOffset() == end })
	sameLog(t, ms, ss, 0)
}

// laggingLog is a master's log whose MaxPhysOffset lags its bytes: a
// write is in the file (ReadLog returns it) before the end the master
// reads says so.
type laggingLog struct {
	*store.Store
	end atomic.Int64
}

func (l *laggingLog) MaxPhysOffset() int64 { return l.end.Load() }

// TestTransferStopsAtTheEndItStates: a transfer never holds bytes past the
// master end its header states, though the log holds them already (the
// slave refuses such a transfer and drops the connection: a sync_master
// send under concurrent writes got SLAVE_NOT_AVAILABLE).
func TestTransferStopsAtTheEndItStates(t *testing.T) {
	ms, ss := openStore(t, t.TempDir()), openStore(t, t.TempDir())
	defer closeStore(t, ss)
	defer closeStore(t, ms)
	lg := &laggingLog{Store: ms}
	addr := haAddr(t)
	m, err := StartMaster(MasterOptions{Listen: addr, Log: lg, BrokerName: "b1", PollInterval: 20 * time.Millisecond,
		Logger: quietLogger(), Secret: testSecretFn})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := startSlave(t, addr, ss, nil)
	defer s.Close()
	waitFor(t, "the slave to connect", 10*time.Second, func() bool { return len(m.Slaves()) == 1 })
	for i := 0; i < 10; i++ {
		put(t, ms, 3, 500, nil)
		stated := ms.MaxPhysOffset()
		put(t, ms, 3, 500, nil) // in the log, not yet in the stated end
		lg.end.Store(stated)
		m.Notify()
		waitFor(t, "the stated end to reach the slave", 10*time.Second, func() bool { return ss.MaxPhysOffset() == stated })
		lg.end.Store(ms.MaxPhysOffset())
		m.HoldNotify()
		m.Push(time.Now().Add(10 * time.Second))
		waitFor(t, "the rest to reach the slave", 10*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	}
	if st := s.State(); st.Sessions != 1 {
		t.Fatalf("the slave connected %d times; a transfer past its stated end drops the connection", st.Sessions)
	}
	sameLog(t, ms, ss, 0)
}
