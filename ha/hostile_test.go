package ha

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stratamq/stratamq/ha/hatest"
	"github.com/stratamq/stratamq/infra/logtest"
)

// The HA port tried as an attacker would (issue 31 items 1-3), with fake
// slaves written by hand (hatest): the master must not count what they
// say as held, must not stream them the log, and must not be held by
// them.

// awaitNow is AwaitAck's outcome for off, waited for at most d.
func awaitNow(t *testing.T, m *Master, off int64, d time.Duration) error {
	t.Helper()
	ch := make(chan error, 1)
	m.AwaitAck(off, time.Now().Add(d), func(err error) { ch <- err })
	select {
	case err := <-ch:
		return err
	case <-time.After(d + 10*time.Second):
		t.Fatalf("AwaitAck(%d) not settled %v past its deadline", off, 10*time.Second)
		return nil
	}
}

// A slave without the secret (or with another) is refused at its hello:
// it gets no byte of the log, does not count as a slave, and acks after
// it count for nothing.
func TestHostileSlaveWithoutSecretGetsNothing(t *testing.T) {
	ms, _, addr, m := masterPair(t, nil, nil)
	put(t, ms, 40, 500, m.Notify)
	end := ms.MaxPhysOffset()
	for _, secret := range [][]byte{nil, []byte("a guess")} {
		f, err := hatest.Hello(addr, "b1", 0, 0, secret)
		if err != nil {
			t.Fatal(err)
		}
		// Dump what the port sends, as acks for all of it go out.
		_ = f.Ack(end, 0)
		for {
			if _, err := f.Next(5 * time.Second); err != nil {
				break
			}
			_ = f.AckRead()
		}
		f.Close()
		if f.Status == StatusOK || f.Received > 0 {
			t.Fatalf("a hello signed with %q: status %d (%s), %d log bytes streamed; want a refusal and none", secret,
				f.Status, statusText(f.Status), f.Received)
		}
	}
	if best, _ := m.Acked(); best >= 0 || len(m.Slaves()) != 0 {
		t.Fatalf("after unauthenticated hellos: Acked %d, slaves %+v; want none", best, m.Slaves())
	}
	if err := awaitNow(t, m, end, time.Second); !errors.Is(err, ErrSlaveNotAvailable) {
		t.Fatalf("AwaitAck with only unauthenticated slaves: %v, want ErrSlaveNotAvailable", err)
	}
}

// A slave that reads each transfer's header and acks its end without
// holding the bytes (it cannot give the stream's checksum) is dropped,
// and its ack settles nothing; nor does one above what was sent. It has
// the secret: the check does not rest on the hello alone.
func TestHostileSlaveHeaderOnlyAcks(t *testing.T) {
	ms, _, addr, m := masterPair(t, nil, nil)
	put(t, ms, 40, 500, m.Notify)
	end := ms.MaxPhysOffset()
	f, err := hatest.Hello(addr, "b1", 0, 0, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Status != StatusOK {
		t.Fatalf("hello with the secret: status %d (%s)", f.Status, statusText(f.Status))
	}
	tr, err := f.Next(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Ack(tr.Offset+int64(len(tr.Body)), 0) // the header's end, no checksum
	if err := awaitNow(t, m, tr.Offset+int64(len(tr.Body)), 2*time.Second); err == nil {
		t.Fatal("a header-only ack settled AwaitAck: the master acknowledged bytes no slave holds")
	}
	if best, _ := m.Acked(); best > 0 {
		t.Fatalf("Acked %d after a header-only ack; want nothing counted", best)
	}
	f.C.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, f.C); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the master kept streaming to a slave whose ack was false")
	}

	// Past what was sent: an ack of the whole log before reading it.
	g, err := hatest.Hello(addr, "b1", 0, 0, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_ = g.Ack(end, 0)
	if err := awaitNow(t, m, end, 2*time.Second); err == nil {
		t.Fatal("an ack past what was sent settled AwaitAck")
	}
}

// A slave that says hello at 0 and never advances (re-reporting 0) is
// stalled once StallTimeout passes without an ack of what it was sent:
// not a slave to wait for (sends fail at once, not after their timeout)
// and not in sync, whatever MaxLag allows; with MinInSync 1 the master
// then acknowledges (and shows) alone. An honest slave advancing beside
// it keeps the master in sync.
func TestHostileSlaveNeverAcks(t *testing.T) {
	ms, ss, addr, m := masterPair(t, nil, func(o *MasterOptions) { stallAfter(o, 300*time.Millisecond) })
	put(t, ms, 40, 500, m.Notify)
	f, err := hatest.Hello(addr, "b1", 0, 0, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // re-report 0, as a slave whose log never grows
		defer close(done)
		for {
			if f.Ack(0, 0) != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-done }()
	waitFor(t, "the master to list the slave", 10*time.Second, func() bool { return len(m.Slaves()) == 1 })
	waitFor(t, "the silent slave to count as not in sync", 20*time.Second, func() bool {
		_, ok := m.Acked()
		return !ok
	})
	if sl := m.Slaves(); len(sl) != 1 || sl[0].InSync {
		t.Fatalf("slaves %+v: the one that never acked is listed in sync", sl)
	}
	start := time.Now()
	if err := awaitNow(t, m, ms.MaxPhysOffset(), time.Minute); !errors.Is(err, ErrSlaveNotAvailable) {
		t.Fatalf("AwaitAck with only a stalled slave: %v after %v, want ErrSlaveNotAvailable at once", err, time.Since(start))
	}

	// An honest slave beside it: the master waits for it again.
	s := startSlave(t, addr, ss, nil)
	defer s.Close()
	waitFor(t, "the honest slave to catch up", 20*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	put(t, ms, 5, 500, m.Notify)
	if err := awaitNow(t, m, ms.MaxPhysOffset(), time.Minute); err != nil {
		t.Fatalf("AwaitAck with an honest slave beside a stalled one: %v", err)
	}
}

// MinInSync 1: a slave that joined at the master's end and then stops
// acknowledging leaves the in-sync set once StallTimeout passes, though
// no ack wait ran out (writes that nobody waits for): the in-sync set is
// the broker's read bound, which it must not hold back for ever.
func TestHostileSlaveStallsLeavesInSyncSet(t *testing.T) {
	ms, _, addr, m := masterPair(t, nil, func(o *MasterOptions) { stallAfter(o, 300*time.Millisecond); o.MinInSync = 1 })
	put(t, ms, 10, 500, m.Notify)
	f, err := hatest.Hello(addr, "b1", ms.MaxPhysOffset(), 0, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	waitFor(t, "the slave to be in sync", 10*time.Second, func() bool { n, _ := m.InSync(); return n == 1 })
	put(t, ms, 10, 500, m.Notify) // not acknowledged, not waited for
	waitFor(t, "the silent slave to leave the in-sync set", 20*time.Second, func() bool { n, _ := m.InSync(); return n == 0 })
}

// 400 connections that never say hello do not hold the port: the master
// keeps at most MaxConns in their handshake (dropping the oldest) long
// before its idle timeout, logs a few lines, not one per connection, and
// a real slave still connects and follows.
// floodConns is the long form's flood size (-ha.flood=4000; the CI form
// opens 400 connections).
var floodConns = flag.Int("ha.flood", 400, "TestHostileConnectionFlood: connections that never say hello")

func TestHostileConnectionFlood(t *testing.T) {
	var rec logtest.Recorder
	ms, ss, addr, m := masterPair(t, nil, func(o *MasterOptions) { o.IdleTimeout = time.Minute; o.Logger = slog.New(&rec) })
	put(t, ms, 20, 500, m.Notify)
	n := *floodConns
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	began := time.Now()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	closed := 0
	deadline := time.Now().Add(20 * time.Second) // the master's idle timeout is a minute
	for _, c := range conns {
		c.SetReadDeadline(deadline)
		_, err := io.Copy(io.Discard, c) // the challenge, then EOF once the master drops it
		if err == nil || errors.Is(err, syscall.ECONNRESET) {
			closed++
		}
		if closed >= n-2*DefaultMaxConns {
			break
		}
	}
	if closed < n-2*DefaultMaxConns {
		t.Fatalf("the master closed %d of %d connections that never said hello in 20 s; want all but %d", closed, n, 2*DefaultMaxConns)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	dropped := time.Since(began)
	s := startSlave(t, addr, ss, nil)
	defer s.Close()
	waitFor(t, "a real slave to follow beside the flood", 20*time.Second, func() bool { return ss.MaxPhysOffset() == ms.MaxPhysOffset() })
	t.Logf("%d connections that never said hello: %d closed by the master within %v; heap %d -> %d KiB (this test process, "+
		"attacker included); a real slave caught up %v after the flood began",
		n, closed, dropped.Round(time.Millisecond), before.HeapAlloc>>10, after.HeapAlloc>>10, time.Since(began).Round(time.Millisecond))
	warns := 0
	for _, r := range rec.Records() {
		if r.Level >= slog.LevelWarn {
			warns++
		}
	}
	if warns > 5 {
		t.Fatalf("%d WARN lines for one flood; want them rate-limited", warns)
	}
}
