//go:build unix

package remoting

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"syscall"
	"testing"
	"time"
)

// noWaitStats counts a conn's non-blocking writes by ReleaseWritesNoWait:
// whole (the socket took the queue), partial (it took part or nothing;
// the rest was handed to the writer).
type noWaitStats struct{ whole, partial int }

var noWaitLog struct {
	sync.Mutex
	m map[*Conn]*noWaitStats
}

func init() {
	noWaitLog.m = make(map[*Conn]*noWaitStats)
	testHookNoWaitWrite = func(c *Conn, wrote, queued int) {
		noWaitLog.Lock()
		defer noWaitLog.Unlock()
		st := noWaitLog.m[c]
		if st == nil {
			st = new(noWaitStats)
			noWaitLog.m[c] = st
		}
		if wrote == queued {
			st.whole++
		} else {
			st.partial++
		}
	}
}

// writerGates stall a conn's writer when it wakes: it signals arrived and
// waits for open.
var writerGates struct {
	sync.Mutex
	m map[*Conn]*writerGate
}

type writerGate struct {
	arrived chan struct{} // cap 1
	open    chan struct{}
}

func init() {
	writerGates.m = make(map[*Conn]*writerGate)
	testHookWriterWoken = func(c *Conn) {
		writerGates.Lock()
		g := writerGates.m[c]
		writerGates.Unlock()
		if g != nil {
			select {
			case g.arrived <- struct{}{}:
			default:
			}
			<-g.open
		}
	}
}

// stallWriter makes c's writer stop when it next wakes, until the
// returned function (also run when the test ends) is called.
func stallWriter(t *testing.T, c *Conn) (g *writerGate, open func()) {
	g = &writerGate{arrived: make(chan struct{}, 1), open: make(chan struct{})}
	writerGates.Lock()
	writerGates.m[c] = g
	writerGates.Unlock()
	var once sync.Once
	open = func() {
		once.Do(func() {
			writerGates.Lock()
			delete(writerGates.m, c)
			writerGates.Unlock()
			close(g.open)
		})
	}
	t.Cleanup(open)
	return g, open
}

func noWaitWrites(c *Conn) noWaitStats {
	noWaitLog.Lock()
	defer noWaitLog.Unlock()
	if st := noWaitLog.m[c]; st != nil {
		return *st
	}
	return noWaitStats{}
}

// raceBuild reports whether the test binary was built with -race
// (allocation counts differ under it).
func raceBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// releaseNoWait runs c.ReleaseWritesNoWait and fails the test if it does
// not return within 2 s.
func releaseNoWait(t *testing.T, c *Conn) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		c.ReleaseWritesNoWait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("ReleaseWritesNoWait blocked on a peer that does not read")
	}
}

// holdReleaseNoWait answers each request as the HA report reader does:
// writes held, the response queued, and the hold released with
// ReleaseWritesNoWait on another goroutine; released gets the conn once
// that has returned.
func holdReleaseNoWait(released chan<- *Conn) Handler {
	return HandlerFunc(func(_ context.Context, c *Conn, req *Command) *Command {
		c.HoldWrites()
		resp := NewResponse(req, Success, "")
		resp.Body = req.Body
		if err := c.WriteResponse(resp); err != nil {
			panic(err)
		}
		go func() {
			c.ReleaseWritesNoWait()
			released <- c
		}()
		return nil
	})
}

// TestRemotingReleaseWritesNoWaitInline: a response held and released with
// ReleaseWritesNoWait from another goroutine goes out with one
// non-blocking write on that goroutine, not by the writer, on a plain TCP
// conn and on a plain conn of a permissive TLS port; the token is free
// again when it returns.
func TestRemotingReleaseWritesNoWaitInline(t *testing.T) {
	checkLeaks(t)
	srvCfg, _, _ := tlsPair(t, false)
	for _, cfg := range []ServerConfig{{}, {TLS: srvCfg, TLSMode: TLSPermissive}} {
		t.Run(cfg.TLSMode.String(), func(t *testing.T) {
			released := make(chan *Conn, 1)
			s := startServer(t, cfg, holdReleaseNoWait(released))
			cl := newTestClient(t, nil)
			ctx := ctxT(t)
			for i := range 3 {
				body := []byte(fmt.Sprintf("sync %d", i))
				resp, err := cl.Invoke(ctx, s.Addr().String(), NewRequest(SendMessage, nil, body))
				if err != nil || resp.Code != int32(Success) || !bytes.Equal(resp.Body, body) {
					t.Fatalf("request %d: %v, %v", i, resp, err)
				}
				c := <-released
				if st := noWaitWrites(c); st.whole != i+1 || st.partial != 0 {
					t.Fatalf("after %d releases: %d whole non-blocking writes, %d partial; want every response written inline, whole", i+1, st.whole, st.partial)
				}
				c.mu.Lock()
				writing, handoff := c.mu.writing, c.mu.handoff.buf != nil
				c.mu.Unlock()
				if writing || handoff {
					t.Fatalf("after an inline write: writing=%v handoff=%v", writing, handoff)
				}
			}
		})
	}
}

// nowaitServer serves conns whose first request hands the server's Conn
// to the test (answered at once).
func nowaitServer(t *testing.T) (*Server, <-chan *Conn) {
	t.Helper()
	conns := make(chan *Conn, 16)
	s := startServer(t, ServerConfig{}, HandlerFunc(func(_ context.Context, c *Conn, req *Command) *Command {
		conns <- c
		return NewResponse(req, Success, "")
	}))
	return s, conns
}

// dialServed dials s from a socket with a receive buffer of rcvBuf bytes
// (set before connecting, so that the window stays small) and returns it
// and the server's Conn for it, whose send buffer is cut to sndBuf.
func dialServed(t *testing.T, s *Server, conns <-chan *Conn, rcvBuf, sndBuf int) (net.Conn, *Conn) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvBuf)
		}); err != nil {
			return err
		}
		return serr
	}}
	nc, err := d.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	writeCmd(t, nc, NewRequest(GetRouteinfoByTopic, nil, nil))
	var c *Conn
	select {
	case c = <-conns:
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not serve the first request")
	}
	if resp := readCmd(t, nc); resp.Code != int32(Success) {
		t.Fatalf("first response: %v", resp)
	}
	if err := c.nc.(*net.TCPConn).SetWriteBuffer(sndBuf); err != nil {
		t.Fatal(err)
	}
	// The writer wrote that response: once it is idle again, with no
	// wake pending, only a handoff (or a close) wakes it.
	waitIdle(t, c)
	return nc, c
}

// seqFrame is frame i of a sequence: its opaque is i, its body a pattern
// of i, 700 to 999 bytes long (copied into the queue: no by-reference
// parts).
func seqFrame(i int32) *Command {
	return &Command{Code: int32(Success), Flag: FlagResponse, Opaque: i,
		Body: bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 350+int(i)%150)}
}

// seqConn queues numbered frames on a server conn and checks what its
// peer reads.
type seqConn struct {
	t    *testing.T
	c    *Conn
	nc   net.Conn
	next int32 // the opaque of the next frame queued
	read int32 // the opaque of the next frame the peer must read
}

// release queues n frames under one hold and releases it with
// ReleaseWritesNoWait, which must return promptly.
func (q *seqConn) release(n int) {
	q.t.Helper()
	q.c.HoldWrites()
	for range n {
		if err := q.c.WriteResponse(seqFrame(q.next)); err != nil {
			q.t.Fatal(err)
		}
		q.next++
	}
	releaseNoWait(q.t, q.c)
}

// fillUntilHandoff releases one frame at a time until the socket takes
// only part of a queue, which is handed to the writer.
func (q *seqConn) fillUntilHandoff() {
	q.t.Helper()
	before := noWaitWrites(q.c).partial
	for noWaitWrites(q.c).partial == before {
		if q.next-q.read > 5000 {
			q.t.Fatalf("%d frames queued to a peer that does not read and no write was partial", q.next-q.read)
		}
		q.release(1)
	}
}

// readAll reads every frame queued so far: each arrives whole, in queue
// order, once.
func (q *seqConn) readAll() {
	q.t.Helper()
	for ; q.read < q.next; q.read++ {
		_ = q.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		raw, err := ReadFrame(q.nc, nil, DefaultMaxFrameSize)
		if err != nil {
			q.t.Fatalf("reading frame %d of %d: %v", q.read, q.next, err)
		}
		got, err := DecodeFrame(raw)
		if err != nil {
			q.t.Fatalf("frame %d: %v", q.read, err)
		}
		if want := seqFrame(q.read); got.Opaque != want.Opaque || !bytes.Equal(got.Body, want.Body) {
			q.t.Fatalf("frame %d: got opaque %d with a %d-byte body, want opaque %d with %d bytes", q.read, got.Opaque, len(got.Body), want.Opaque, len(want.Body))
		}
	}
}

// waitIdle waits until nobody holds c's write token, nothing is queued or
// handed off and the writer has no wake pending. Without one it takes no
// queue: releases then find the token free.
func waitIdle(t *testing.T, c *Conn) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		idle := !c.mu.writing && c.mu.handoff.buf == nil && len(c.mu.buf) == 0 && len(c.wake) == 0
		c.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the write token was not given back")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRemotingReleaseWritesNoWaitNeverBlocks: with a peer that stops
// reading, ReleaseWritesNoWait returns at once while the socket fills up
// and once it is full; the socket's partial write hands the rest to the
// writer, which is woken for it (round 1: nothing else wakes it); when the
// peer reads again every frame arrives whole, in order, once.
func TestRemotingReleaseWritesNoWaitNeverBlocks(t *testing.T) {
	checkLeaks(t)
	s, conns := nowaitServer(t)
	nc, c := dialServed(t, s, conns, 4<<10, 4<<10)
	q := &seqConn{t: t, c: c, nc: nc}

	// Round 1: a handoff, then the peer reads.
	q.fillUntilHandoff()
	q.readAll()
	waitIdle(t, c)

	// Round 2: a handoff, then more releases while the writer holds the
	// token blocked on the full socket; then a frame by the writer's own
	// path.
	q.fillUntilHandoff()
	for range 50 {
		q.release(3)
	}
	if err := c.WriteResponse(seqFrame(q.next)); err != nil {
		t.Fatal(err)
	}
	q.next++
	q.readAll()
	waitIdle(t, c)
	if st := noWaitWrites(c); st.whole == 0 || st.partial < 2 {
		t.Fatalf("non-blocking writes: %d whole, %d partial; want both kinds", st.whole, st.partial)
	}
}

// TestRemotingReleaseWritesNoWaitCloseFlushesHandoff: a conn closed with a
// handoff pending (the writer woken for it, not yet at it; the peer not
// reading) flushes it and everything queued after it once the peer reads,
// then closes.
func TestRemotingReleaseWritesNoWaitCloseFlushesHandoff(t *testing.T) {
	checkLeaks(t)
	s, conns := nowaitServer(t)
	nc, c := dialServed(t, s, conns, 4<<10, 4<<10)
	q := &seqConn{t: t, c: c, nc: nc}
	gate, open := stallWriter(t, c)
	q.fillUntilHandoff()
	select {
	case <-gate.arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer was not woken for the handoff")
	}
	for range 5 {
		q.release(2)
	}
	c.Close()
	c.mu.Lock()
	pending := c.mu.handoff.buf != nil
	c.mu.Unlock()
	if !pending {
		t.Fatal("no handoff pending at the close")
	}
	open()
	q.readAll()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %d bytes, %v; want EOF", n, err)
	}
	waitConns(t, s, 0)
}

// TestRemotingReleaseWritesNoWaitCloseRace: conns closed while releases
// fill their sockets (before, around and after a handoff) finish: no
// release blocks, the writer exits, no goroutine is left.
func TestRemotingReleaseWritesNoWaitCloseRace(t *testing.T) {
	checkLeaks(t)
	s, conns := nowaitServer(t)
	const n = 8
	var qs [n]*seqConn
	for k := range qs {
		nc, c := dialServed(t, s, conns, 4<<10, 4<<10)
		qs[k] = &seqConn{t: t, c: c, nc: nc}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for k, q := range qs {
		wg.Add(2)
		closeAt := make(chan struct{})
		go func() {
			defer wg.Done()
			<-closeAt
			q.c.Close()
		}()
		go func() {
			defer wg.Done()
			var once sync.Once
			defer once.Do(func() { close(closeAt) })
			for i := 0; i < 200; i++ {
				if i == 4*k {
					once.Do(func() { close(closeAt) }) // races the releases that follow
				}
				q.c.HoldWrites()
				err := q.c.WriteResponse(seqFrame(int32(i)))
				done := make(chan struct{})
				go func() {
					q.c.ReleaseWritesNoWait()
					close(done)
				}()
				select {
				case <-done:
				case <-time.After(2 * time.Second):
					errs <- fmt.Errorf("conn %d: release %d blocked", k, i)
					return
				}
				if errors.Is(err, ErrConnClosed) {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for k, q := range qs {
		select {
		case <-q.c.writerDone:
		case <-time.After(5 * time.Second):
			t.Fatalf("conn %d: the writer did not exit after Close", k)
		}
	}
	waitConns(t, s, 0)
}

// TestRemotingReleaseWritesNoWaitTLS: on TLS conns (the server's sniffed
// one, a client's) ReleaseWritesNoWait leaves the write to the writer and
// the frames still arrive.
func TestRemotingReleaseWritesNoWaitTLS(t *testing.T) {
	checkLeaks(t)
	srvCfg, cliCfg, _ := tlsPair(t, false)
	released := make(chan *Conn, 1)
	s := startServer(t, ServerConfig{TLS: srvCfg, TLSMode: TLSEnforcing}, holdReleaseNoWait(released))
	cl := NewClient(ClientConfig{Logger: quiet, TLS: cliCfg})
	defer cl.Close()
	ctx := ctxT(t)
	cc, err := cl.Conn(ctx, s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		body := []byte(fmt.Sprintf("sync %d", i))
		// The client's request too is held and released with
		// ReleaseWritesNoWait.
		cc.HoldWrites()
		type result struct {
			resp *Command
			err  error
		}
		res := make(chan result, 1)
		go func() {
			resp, err := cc.Invoke(ctx, NewRequest(SendMessage, nil, body))
			res <- result{resp, err}
		}()
		// Wait for it to be queued; a writer still finishing the last
		// request's write may have taken it already (a hold only keeps
		// queuing from waking the writer).
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			cc.mu.Lock()
			queued := len(cc.mu.buf) > 0 || cc.mu.writing
			cc.mu.Unlock()
			if queued || len(res) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("request %d was not queued", i)
			}
		}
		cc.ReleaseWritesNoWait()
		r := <-res
		if r.err != nil || r.resp.Code != int32(Success) || !bytes.Equal(r.resp.Body, body) {
			t.Fatalf("request %d: %v, %v", i, r.resp, r.err)
		}
		c := <-released
		for _, conn := range []*Conn{c, cc} {
			if st := noWaitWrites(conn); st != (noWaitStats{}) {
				t.Fatalf("%s: %d whole and %d partial non-blocking writes on a TLS conn", conn, st.whole, st.partial)
			}
			conn.mu.Lock()
			known, nb := conn.mu.nbKnown, conn.mu.nb
			conn.mu.Unlock()
			if !known || nb != nil {
				t.Fatalf("%s: raw socket resolved %v, writer %v; want none", conn, known, nb)
			}
		}
	}
}

// TestRemotingNBWriterFullSocket: the non-blocking write returns at once
// on a full socket: part of a buffer, then nothing (EAGAIN) and no error.
func TestRemotingNBWriterFullSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close() // never read
	sc, known := plainSocket(nc)
	w := newNBWriter(sc)
	if !known || w == nil {
		t.Fatal("no non-blocking writer for a TCP conn")
	}
	buf := make([]byte, 64<<10)
	partial, zero := false, false
	for i := 0; !zero; i++ {
		if i > 10000 {
			t.Fatal("the socket never filled up")
		}
		done := make(chan struct{})
		var n int
		go func() {
			defer close(done)
			n, err = w.writeSome(buf)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			nc.Close()
			<-done
			t.Fatal("writeSome blocked on a full socket")
		}
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		partial = partial || n > 0 && n < len(buf)
		zero = n == 0
	}
	if !partial {
		t.Log("the socket filled up without a partial write")
	}
	nc.Close()
	if n, err := w.writeSome(buf); err == nil {
		t.Fatalf("write on a closed conn: %d bytes, no error", n)
	}
}

// TestRemotingReleaseWritesNoWaitAllocations: a small queue written
// inline allocates nothing.
func TestRemotingReleaseWritesNoWaitAllocations(t *testing.T) {
	if raceBuild() || testing.CoverMode() != "" {
		t.Skip("allocation counts differ under -race and -cover")
	}
	s, conns := nowaitServer(t)
	nc, c := dialServed(t, s, conns, 1<<20, 1<<20)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		buf := make([]byte, 64<<10)
		for {
			if _, err := nc.Read(buf); err != nil {
				return
			}
		}
	}()
	defer func() {
		nc.Close()
		<-drained
	}()
	resp := &Command{Code: int32(Success), Flag: FlagResponse, Opaque: 7, Body: []byte("committed offset 12345")}
	write := func() {
		c.HoldWrites()
		if err := c.WriteResponse(resp); err != nil {
			t.Fatal(err)
		}
		c.ReleaseWritesNoWait()
	}
	for range 10 {
		write() // the queue buffer and its spare
	}
	before := noWaitWrites(c)
	allocs := testing.AllocsPerRun(200, write)
	after := noWaitWrites(c)
	if after.whole-before.whole < 150 {
		t.Fatalf("only %d of 201 releases were written inline whole (%d partial)", after.whole-before.whole, after.partial-before.partial)
	}
	if allocs != 0 {
		t.Errorf("HoldWrites, WriteResponse and ReleaseWritesNoWait of a small response allocate %.1f times, want 0", allocs)
	}
}
