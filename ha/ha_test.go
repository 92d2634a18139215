package ha

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stratamq/stratamq/store"
)

// A slave following a master while records are written ends with a
// byte-identical log and the same consumequeues.
func TestSlaveFollowsByteIdentical(t *testing.T) {
	ep := &testEpoch{}
	ep.v.Store(3)
	ms, ss, addr, m := masterPair(t, ep.get, nil)
	put(t, ms, 100, 900, m.Notify) // before the slave connects
	s := startSlave(t, addr, ss, nil)
	defer s.Close()
	put(t, ms, 400, 1500, m.Notify) // while it follows: several 64 KiB segments
	waitFor(t, "the slave to catch up", 20*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	sameLog(t, ms, ss, 0)
	if n := len(ss.LocalSegments()); n < 5 {
		t.Fatalf("slave has %d segments; the test wants records across several", n)
	}
	st := s.State()
	if !st.Connected || st.Epoch != 3 || st.Received != ms.MaxPhysOffset() {
		t.Fatalf("slave state %+v; want connected, epoch 3, %d bytes received", st, ms.MaxPhysOffset())
	}
	waitFor(t, "the master to see the ack", 10*time.Second, func() bool {
		sl := m.Slaves()
		return len(sl) == 1 && sl[0].Acked == ms.MaxPhysOffset() && sl[0].Lag == 0 && sl[0].Name == "b1"
	})
}

// A slave that connects late streams only from the offset it reports.
func TestLateSlaveCatchesUpFromReportedOffset(t *testing.T) {
	ms, ss, addr, m := masterPair(t, nil, nil)
	put(t, ms, 60, 1000, m.Notify)
	s := startSlave(t, addr, ss, nil)
	waitFor(t, "the first catch-up", 20*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	s.Close()
	mid := ss.MaxPhysOffset()
	put(t, ms, 120, 1000, m.Notify) // written while no slave follows
	s = startSlave(t, addr, ss, nil)
	defer s.Close()
	waitFor(t, "the late catch-up", 20*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	sameLog(t, ms, ss, 0)
	if got := s.State().Received; got != ms.MaxPhysOffset()-mid {
		t.Fatalf("late slave received %d bytes; only the %d past its reported offset %d were missing", got, ms.MaxPhysOffset()-mid, mid)
	}
	waitFor(t, "the master's view", 10*time.Second, func() bool {
		sl := m.Slaves()
		return len(sl) == 1 && sl[0].Start == mid
	})
}

// After the master restarts (store and HA listener), the slave reconnects and
// continues without gaps or duplicates.
func TestReconnectAfterMasterRestart(t *testing.T) {
	mdir := t.TempDir()
	ms, ss := openStore(t, mdir), openStore(t, t.TempDir())
	defer closeStore(t, ss)
	addr := haAddr(t)
	ep := &testEpoch{}
	ep.v.Store(1)
	m := startMaster(t, addr, ms, ep.get, nil)
	s := startSlave(t, addr, ss, nil)
	defer s.Close()
	put(t, ms, 150, 1200, m.Notify)
	waitFor(t, "the slave to catch up", 20*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	closeStore(t, ms)
	waitFor(t, "the slave to see the master gone", 10*time.Second, func() bool { return !s.State().Connected })

	ms = openStore(t, mdir)
	defer closeStore(t, ms)
	ep.v.Store(2) // a restart takes the lease again
	m = startMaster(t, addr, ms, ep.get, nil)
	defer m.Close()
	put(t, ms, 150, 1200, m.Notify)
	waitFor(t, "the slave to catch up after the restart", 20*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	sameLog(t, ms, ss, 0)
	if st := s.State(); st.Sessions < 2 || st.Epoch != 2 || st.Received != ms.MaxPhysOffset() {
		t.Fatalf("slave state %+v: want ≥2 sessions, epoch 2, every byte received once (%d)", st, ms.MaxPhysOffset())
	}
}

// gate is an Appender whose appends block while it is closed.
type gate struct {
	*store.Store
	mu     sync.Mutex
	open   chan struct{}
	closed bool
}

func newGate(st *store.Store) *gate { return &gate{Store: st, open: make(chan struct{})} }

func (g *gate) block() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed, g.open = true, make(chan struct{})
	}
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.closed = false
		close(g.open)
	}
}

func (g *gate) AppendRaw(off int64, b []byte) error {
	g.mu.Lock()
	ch, closed := g.open, g.closed
	g.mu.Unlock()
	if closed {
		<-ch
	}
	return g.Store.AppendRaw(off, b)
}

func TestWaitAcked(t *testing.T) {
	ms, ss, addr, m := masterPair(t, nil, func(o *MasterOptions) { o.MaxLag = 64 << 10 })
	put(t, ms, 10, 1000, m.Notify)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := m.WaitAcked(ctx, ms.MaxPhysOffset()); !errors.Is(err, ErrSlaveNotAvailable) {
		t.Fatalf("WaitAcked with no slave: %v, want ErrSlaveNotAvailable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("WaitAcked with no slave took %v; it must answer at once", d)
	}

	g := newGate(ss)
	s := startSlave(t, addr, g, nil)
	defer s.Close()
	defer g.release() // before s.Close: an append in progress must finish
	waitFor(t, "the slave to connect", 10*time.Second, func() bool { return len(m.Slaves()) == 1 })
	if err := m.WaitAcked(ctx, ms.MaxPhysOffset()); err != nil {
		t.Fatalf("WaitAcked with a following slave: %v", err)
	}
	if ss.MaxPhysOffset() != ms.MaxPhysOffset() {
		t.Fatalf("WaitAcked returned with the slave at %d, master at %d", ss.MaxPhysOffset(), ms.MaxPhysOffset())
	}

	// A stalled slave: the ack never comes.
	g.block()
	put(t, ms, 2, 1000, m.Notify)
	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if err := m.WaitAcked(short, ms.MaxPhysOffset()); !errors.Is(err, ErrSlaveTimeout) {
		t.Fatalf("WaitAcked with a stalled slave: %v, want ErrSlaveTimeout", err)
	}
	// Past MaxLag the slave is not available at all.
	put(t, ms, 80, 1000, m.Notify)
	if err := m.WaitAcked(ctx, ms.MaxPhysOffset()); !errors.Is(err, ErrSlaveNotAvailable) {
		t.Fatalf("WaitAcked with a slave %d bytes behind (bound 64 KiB): %v, want ErrSlaveNotAvailable", ms.MaxPhysOffset()-ss.MaxPhysOffset(), err)
	}
	g.release()
	if err := m.WaitAcked(ctx, ms.MaxPhysOffset()); err != nil && !errors.Is(err, ErrSlaveNotAvailable) {
		t.Fatal(err)
	}
	// Caught up means the master has the slave's report of it, not only
	// that the slave's log reached the end (WaitAcked judges the lag by
	// the last report).
	waitFor(t, "the slave to catch up after the stall", 20*time.Second, func() bool {
		st := m.Slaves()
		return ss.MaxPhysOffset() == ms.MaxPhysOffset() && len(st) == 1 && st[0].Acked == ms.MaxPhysOffset()
	})
	if err := m.WaitAcked(ctx, ms.MaxPhysOffset()); err != nil {
		t.Fatalf("WaitAcked after the catch-up: %v", err)
	}
	sameLog(t, ms, ss, 0)
}

// A master whose epoch goes back (a fenced old master) is refused: the
// slave drops the connection and appends nothing from it.
func TestOlderEpochRefused(t *testing.T) {
	ep := &testEpoch{}
	ep.v.Store(5)
	ms, ss, addr, m := masterPair(t, ep.get, nil)
	s := startSlave(t, addr, ss, nil)
	defer s.Close()
	put(t, ms, 20, 1000, m.Notify)
	waitFor(t, "the slave to catch up", 20*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	held := ss.MaxPhysOffset()
	ep.v.Store(4)
	put(t, ms, 20, 1000, m.Notify)
	waitFor(t, "the older epoch to be refused", 10*time.Second, func() bool { return s.State().Refused >= 2 })
	if got := ss.MaxPhysOffset(); got != held {
		t.Fatalf("slave appended from an older epoch: log end %d, was %d", got, held)
	}
	if st := s.State(); st.Epoch != 5 {
		t.Fatalf("slave's epoch %d, want 5", st.Epoch)
	}
	// A slave that starts knowing epoch 5 refuses the hello of epoch 4 too.
	s2 := startSlave(t, addr, openGateless(t), func(o *SlaveOptions) { o.MinEpoch = 5 })
	defer s2.Close()
	waitFor(t, "the hello to be refused", 10*time.Second, func() bool { return s2.State().Refused >= 1 })
	if st := s2.State(); st.Received != 0 || st.Sessions != 0 {
		t.Fatalf("slave with MinEpoch 5 followed a master of epoch 4: %+v", st)
	}
	ep.v.Store(6) // a newer master is followed again
	waitFor(t, "the newer epoch to be followed", 20*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	sameLog(t, ms, ss, 0)
}

func openGateless(t *testing.T) *store.Store {
	st := openStore(t, t.TempDir())
	t.Cleanup(func() { closeStore(t, st) })
	return st
}

// Malformed input to the master closes that connection only.
func TestMasterMalformedClosesThatConnectionOnly(t *testing.T) {
	ms, ss := openStore(t, t.TempDir()), openStore(t, t.TempDir())
	defer closeStore(t, ss)
	defer closeStore(t, ms)
	addr := haAddr(t)
	// The malformed cases must be closed for what they sent, long before
	// this master's idle timeout; the silent ones go to a second master
	// with a short one.
	m := startMaster(t, addr, ms, nil, func(o *MasterOptions) { o.IdleTimeout = time.Minute; o.HeartbeatInterval = 100 * time.Millisecond })
	defer m.Close()
	quickAddr := haAddr(t)
	quick := startMaster(t, quickAddr, ms, nil, func(o *MasterOptions) { o.IdleTimeout = 300 * time.Millisecond })
	defer quick.Close()
	s := startSlave(t, addr, ss, nil)
	defer s.Close()
	put(t, ms, 20, 1000, m.Notify)
	waitFor(t, "the slave to catch up", 20*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	before := s.State().Sessions // a redial while starting under load is not what this test is about

	raw := func(b []byte) func(net.Conn) error {
		return func(c net.Conn) error { _, err := c.Write(b); return err }
	}
	signed := func(h hello, then ...[]byte) func(net.Conn) error {
		return func(c net.Conn) error {
			if _, err := helloRaw(c, testSecret, h); err != nil {
				return err
			}
			for _, b := range then {
				if _, err := c.Write(b); err != nil {
					return err
				}
			}
			return nil
		}
	}
	validHello := hello{version: Version, name: "b1", offset: 0}
	cases := []struct {
		name string
		send func(net.Conn) error
	}{
		{"bad magic", raw([]byte("GET / HTTP/1.1\r\n\r\nxxxxxxxx"))},
		{"name too long", raw(binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint32(nil, Magic), Version), 999))},
		{"wrong version", raw(appendSignedHello(nil, hello{version: 9, name: "b1"}, testSecret, [nonceLen]byte{}))},
		{"unsigned", raw(appendSignedHello(nil, validHello, nil, [nonceLen]byte{}))},
		{"wrong broker", signed(hello{version: Version, name: "other"})},
		{"offset past the end", signed(hello{version: Version, name: "b1", offset: 1 << 40})},
		{"report past what was sent", signed(validHello, appendReport(nil, 1<<40, 0))},
		{"silent after hello", signed(validHello)},
		{"silent", nil},
	}
	for _, tc := range cases {
		to := addr
		if tc.name == "silent" || tc.name == "silent after hello" {
			to = quickAddr
		}
		c, err := net.Dial("tcp", to)
		if err != nil {
			t.Fatal(err)
		}
		if tc.send != nil {
			if err := tc.send(c); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, c) // returns when the master closes (heartbeats aside)
		c.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) || (err != nil && !errors.Is(err, syscall.ECONNRESET)) {
			t.Fatalf("%s: the master did not close the connection: %v", tc.name, err)
		}
	}
	// The real slave was never disturbed.
	if st := s.State(); st.Sessions != before || !st.Connected {
		t.Fatalf("slave state %+v: the malformed connections disturbed it", st)
	}
	put(t, ms, 20, 1000, m.Notify)
	waitFor(t, "the slave to keep following", 20*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	sameLog(t, ms, ss, 0)
}

// fakeMaster accepts connections, answers the hello and then runs script.
func fakeMaster(t *testing.T, script func(c net.Conn, h hello)) (addr string, conns func() int, stop func()) {
	ln, err := net.Listen("tcp", haAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				ch, err := newChallenge(true)
				if err != nil {
					return
				}
				if _, err := c.Write(appendChallenge(nil, ch)); err != nil {
					return
				}
				h, _, err := readHello(c)
				if err != nil {
					return
				}
				if _, err := c.Write(appendSignedReply(nil, reply{epoch: 1, masterMax: 1 << 20}, testSecret, h.nonce, ch.nonce)); err != nil {
					return
				}
				script(c, h)
			}()
		}
	}()
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }, func() { ln.Close(); wg.Wait() }
}

// Malformed transfers make the slave drop the connection and redial; it
// appends nothing from them.
func TestSlaveMalformedDropsConnection(t *testing.T) {
	hdr := func(h header) []byte { b := make([]byte, headerLen); putHeader(b, h); return b }
	cases := []struct {
		name string
		send []byte
	}{
		{"gap", hdr(header{phyOffset: 100, epoch: 1, masterMax: 1 << 20})},
		{"size past the limit", hdr(header{phyOffset: 0, epoch: 1, masterMax: 1 << 40, size: 1 << 30})},
		{"negative size", hdr(header{phyOffset: 0, epoch: 1, masterMax: 1 << 20, size: -1})},
		{"older epoch", hdr(header{phyOffset: 0, epoch: 0, masterMax: 1 << 20})},
		{"not records", append(hdr(header{phyOffset: 0, epoch: 1, masterMax: 1 << 20, size: 200}), make([]byte, 200)...)},
		{"silent", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ss := openGateless(t)
			addr, conns, stop := fakeMaster(t, func(c net.Conn, h hello) {
				c.Write(tc.send)
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				io.Copy(io.Discard, c) // until the slave drops it
			})
			defer stop()
			idle := time.Minute // the malformed cases must be dropped for what they sent
			if tc.send == nil {
				idle = 300 * time.Millisecond
			}
			s := startSlave(t, addr, ss, func(o *SlaveOptions) { o.IdleTimeout = idle; o.MaxTransfer = 1 << 20 })
			waitFor(t, "the slave to drop and redial", 5*time.Second, func() bool { return conns() >= 2 })
			s.Close()
			if ss.MaxPhysOffset() != 0 {
				t.Fatalf("slave appended %d bytes from a malformed stream", ss.MaxPhysOffset())
			}
		})
	}
}

// With polling effectively off, Notify alone wakes the stream for each write.
func TestNotifyWakesStream(t *testing.T) {
	ms, ss, addr, m := masterPair(t, nil, func(o *MasterOptions) { o.PollInterval = time.Hour })
	s := startSlave(t, addr, ss, nil)
	defer s.Close()
	waitFor(t, "the slave to connect", 10*time.Second, func() bool { return len(m.Slaves()) == 1 })
	for i := 0; i < 20; i++ {
		put(t, ms, 1+i%3, 500, m.Notify)
		waitFor(t, "write "+strconv.Itoa(i)+" to reach the slave", 10*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	}
	sameLog(t, ms, ss, 0)
}

// A slave that leaves is dropped from Slaves (and WaitAcked) at once, not
// at the next heartbeat's failed write.
func TestMasterSeesSlaveLeave(t *testing.T) {
	ms, ss, addr, m := masterPair(t, nil, func(o *MasterOptions) { o.HeartbeatInterval, o.IdleTimeout = time.Hour, time.Hour })
	put(t, ms, 5, 500, m.Notify)
	s := startSlave(t, addr, ss, nil)
	waitFor(t, "the slave to catch up", 10*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	s.Close()
	waitFor(t, "the master to drop the slave", 10*time.Second, func() bool { return len(m.Slaves()) == 0 })
	if err := m.WaitAcked(context.Background(), ms.MaxPhysOffset()+1); !errors.Is(err, ErrSlaveNotAvailable) {
		t.Fatalf("WaitAcked after the slave left: %v, want ErrSlaveNotAvailable", err)
	}
}

// Records bigger than BatchSize are sent whole, one per transfer, and
// smaller ones after them still batch: the slave's log ends byte-identical.
func TestRecordBiggerThanBatch(t *testing.T) {
	ms, ss, addr, m := masterPair(t, nil, func(o *MasterOptions) { o.BatchSize = 2048 })
	put(t, ms, 10, 300, m.Notify)
	put(t, ms, 10, 5000, m.Notify) // each record bigger than a batch
	put(t, ms, 10, 300, m.Notify)
	s := startSlave(t, addr, ss, nil)
	defer s.Close()
	waitFor(t, "the slave to catch up", 20*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	sameLog(t, ms, ss, 0)
}
