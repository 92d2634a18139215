package remoting

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var quiet = slog.New(slog.DiscardHandler)

// startServer runs a server on loopback until the test ends.
func startServer(t *testing.T, cfg ServerConfig, h Handler) *Server {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s := NewServer(cfg, h)
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	t.Cleanup(func() {
		s.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after Close")
		}
	})
	return s
}

func newTestClient(t *testing.T, h Handler) *Client {
	t.Helper()
	cl := NewClient(ClientConfig{Logger: quiet, Handler: h})
	t.Cleanup(func() { cl.Close() })
	return cl
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dialRaw(t *testing.T, s *Server) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

func writeCmd(t *testing.T, nc net.Conn, c *Command) {
	t.Helper()
	f, err := AppendFrame(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(f); err != nil {
		t.Fatal(err)
	}
}

func readCmd(t *testing.T, nc net.Conn) *Command {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	raw, err := ReadFrame(nc, nil, DefaultMaxFrameSize)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	c, err := DecodeFrame(raw)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// expectClosed waits until the server closes nc.
func expectClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [64]byte
	for range 1000 {
		_, err := nc.Read(b[:])
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "reset") {
			return
		}
		t.Fatalf("conn not closed by the server: %v", err)
	}
	t.Fatal("conn kept sending data")
}

// echo answers SUCCESS with the request's ext fields and body.
func echo(_ context.Context, _ *Conn, req *Command) *Command {
	resp := NewResponse(req, Success, "")
	resp.ExtFields = req.ExtFields
	resp.Body = req.Body
	return resp
}

func TestRemotingServerOutOfOrder(t *testing.T) {
	checkLeaks(t)
	release := make(chan struct{})
	entered := make(chan struct{})
	s := startServer(t, ServerConfig{}, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		if req.Code == 1 {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return echo(ctx, c, req)
	}))
	cl := newTestClient(t, nil)
	ctx := ctxT(t)
	slow := make(chan *Command, 1)
	go func() {
		resp, err := cl.Invoke(ctx, s.Addr().String(), NewRequest(1, map[string]string{"k": "slow"}, nil))
		if err != nil {
			t.Error(err)
		}
		slow <- resp
	}()
	<-entered
	resp, err := cl.Invoke(ctx, s.Addr().String(), NewRequest(2, map[string]string{"k": "fast"}, []byte("body")))
	if err != nil || resp.ExtFields["k"] != "fast" || string(resp.Body) != "body" {
		t.Fatalf("fast: %+v %v", resp, err)
	}
	select {
	case <-slow:
		t.Fatal("slow request answered before release")
	default:
	}
	close(release)
	if r := <-slow; r == nil || r.ExtFields["k"] != "slow" {
		t.Fatalf("slow: %+v", r)
	}
}

func TestRemotingServerMalformedFrameClosesOnlyThatConn(t *testing.T) {
	checkLeaks(t)
	closed := make(chan uint64, 4)
	s := startServer(t, ServerConfig{OnClose: func(c *Conn) { closed <- c.ID() }}, HandlerFunc(echo))
	cl := newTestClient(t, nil)
	ctx := ctxT(t)
	good, err := cl.Conn(ctx, s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.Invoke(ctx, NewRequest(1, nil, nil)); err != nil {
		t.Fatal(err)
	}
	bad := dialRaw(t, s)
	// Header length 100 in a frame of 6 bytes.
	if _, err := bad.Write([]byte{0, 0, 0, 6, 0, 0, 0, 100, '{', '}'}); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, bad)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("OnClose not called")
	}
	resp, err := good.Invoke(ctx, NewRequest(2, map[string]string{"still": "ok"}, nil))
	if err != nil || resp.ExtFields["still"] != "ok" {
		t.Fatalf("other conn broken: %+v %v", resp, err)
	}
}

func TestRemotingServerOversizeFrameClosesConn(t *testing.T) {
	checkLeaks(t)
	s := startServer(t, ServerConfig{MaxFrameSize: 1024}, HandlerFunc(echo))
	nc := dialRaw(t, s)
	// A fine frame first, then one over the limit.
	writeCmd(t, nc, NewRequest(1, nil, make([]byte, 900)))
	if r := readCmd(t, nc); r.Code != 0 || len(r.Body) != 900 {
		t.Fatalf("%+v", r)
	}
	writeCmd(t, nc, NewRequest(1, nil, make([]byte, 2000)))
	expectClosed(t, nc)
}

func TestRemotingServerPoolFullIsSystemBusy(t *testing.T) {
	checkLeaks(t)
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	var handled atomic.Int32
	s := startServer(t, ServerConfig{
		Pools:    map[PoolClass]PoolConfig{PoolDefault: {Workers: 1, Queue: 1}, PoolSend: {Workers: 1, Queue: 1}},
		Classify: func(code RequestCode) PoolClass { return map[RequestCode]PoolClass{SendMessage: PoolSend}[code] },
	}, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		handled.Add(1)
		if req.Code == int32(SendMessage) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return echo(ctx, c, req)
	}))
	nc := dialRaw(t, s)
	send := func(op int32) {
		c := NewRequest(SendMessage, nil, nil)
		c.Opaque = op
		writeCmd(t, nc, c)
	}
	send(1) // runs, blocks
	<-entered
	send(2) // waits in the queue
	send(3) // no room
	r := readCmd(t, nc)
	if r.Opaque != 3 || r.Code != int32(SystemBusy) || !strings.Contains(r.Remark, "send pool full") {
		t.Fatalf("want SYSTEM_BUSY for opaque 3, got %+v", r)
	}
	// Another class's pool is unaffected.
	c := NewRequest(HeartBeat, nil, nil)
	c.Opaque = 4
	writeCmd(t, nc, c)
	if r := readCmd(t, nc); r.Opaque != 4 || r.Code != 0 {
		t.Fatalf("default pool: %+v", r)
	}
	close(release)
	got := map[int32]int32{}
	for range 2 {
		r := readCmd(t, nc)
		got[r.Opaque] = r.Code
	}
	if got[1] != 0 || got[2] != 0 || len(got) != 2 {
		t.Fatalf("queued requests: %v", got)
	}
	if n := handled.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
}

func TestRemotingServerIdleTimeout(t *testing.T) {
	checkLeaks(t)
	s := startServer(t, ServerConfig{IdleTimeout: 100 * time.Millisecond}, HandlerFunc(echo))
	nc := dialRaw(t, s)
	writeCmd(t, nc, NewRequest(1, nil, nil))
	readCmd(t, nc)
	expectClosed(t, nc)
}

func TestRemotingServerOnewayResponseDropped(t *testing.T) {
	checkLeaks(t)
	var oneways atomic.Int32
	s := startServer(t, ServerConfig{}, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		if req.IsOneway() {
			oneways.Add(1)
		}
		return echo(ctx, c, req)
	}))
	nc := dialRaw(t, s)
	ow := NewRequest(UpdateConsumerOffset, nil, nil)
	ow.Opaque, ow.Flag = 10, FlagOneway
	writeCmd(t, nc, ow)
	req := NewRequest(GetMaxOffset, nil, nil)
	req.Opaque = 11
	writeCmd(t, nc, req)
	if r := readCmd(t, nc); r.Opaque != 11 {
		t.Fatalf("first response is for opaque %d, want 11 (oneway must get none)", r.Opaque)
	}
	if oneways.Load() != 1 {
		t.Fatalf("oneway handled %d times", oneways.Load())
	}
}

func TestRemotingServerBinaryRequestGetsBinaryResponse(t *testing.T) {
	checkLeaks(t)
	s := startServer(t, ServerConfig{}, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		return NotSupported(req)
	}))
	nc := dialRaw(t, s)
	req := NewRequest(9999, map[string]string{"x": "y"}, nil)
	req.Serialize, req.Opaque = SerializeRocketMQ, 5
	writeCmd(t, nc, req)
	r := readCmd(t, nc)
	if r.Serialize != SerializeRocketMQ || r.Code != int32(RequestCodeNotSupported) ||
		r.Remark != " request type 9999 not supported" || r.Opaque != 5 || !r.IsResponse() {
		t.Fatalf("%+v", r)
	}
}

func TestRemotingServerShutdownDrains(t *testing.T) {
	checkLeaks(t)
	release := make(chan struct{})
	entered := make(chan struct{})
	s := NewServer(ServerConfig{Addr: "127.0.0.1:0", Logger: quiet}, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		if req.Code == 1 {
			close(entered)
			<-release // ignores ctx: Shutdown must wait for it
		}
		return echo(ctx, c, req)
	}))
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background()) }()
	cl := newTestClient(t, nil)
	ctx := ctxT(t)
	c, err := cl.Conn(ctx, s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	inflight := make(chan error, 1)
	go func() {
		resp, err := c.Invoke(ctx, NewRequest(1, nil, nil))
		if err == nil && resp.Code != 0 {
			err = errors.New(ResponseCode(resp.Code).String())
		}
		inflight <- err
	}()
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	waitFor(t, "shutdown to start", 10*time.Second, s.stopping)
	// New requests during the drain are refused, on the same conn.
	resp, err := c.Invoke(ctx, NewRequest(2, nil, nil))
	if err != nil || resp.Code != int32(ServiceNotAvailable) {
		t.Fatalf("request during drain: %+v %v", resp, err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned with a request in flight: %v", err)
	default:
	}
	close(release)
	if err := <-inflight; err != nil {
		t.Fatalf("in-flight request: %v", err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	cl.Close()
}

func TestRemotingServerShutdownDeadline(t *testing.T) {
	checkLeaks(t)
	entered := make(chan struct{})
	s := startServer(t, ServerConfig{}, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		close(entered)
		<-ctx.Done() // only Close's cancel ends it
		return nil
	}))
	cl := newTestClient(t, nil)
	go func() { _, _ = cl.Invoke(ctxT(t), s.Addr().String(), NewRequest(1, nil, nil)) }()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want deadline exceeded", err)
	}
}

func TestRemotingServerControlAndClientRedial(t *testing.T) {
	checkLeaks(t)
	s := startServer(t, ServerConfig{}, HandlerFunc(echo))
	cl := newTestClient(t, nil)
	ctx := ctxT(t)
	addr := s.Addr().String()
	s.Control(PullMessage, func(c *Conn, req *Command) (*Command, bool) {
		return NewResponse(req, SystemBusy, "forced"), true
	})
	r, err := cl.Invoke(ctx, addr, NewRequest(PullMessage, nil, nil))
	if err != nil || r.Code != int32(SystemBusy) || r.Remark != "forced" {
		t.Fatalf("hooked: %+v %v", r, err)
	}
	r, err = cl.Invoke(ctx, addr, NewRequest(PullMessage, nil, nil))
	if err != nil || r.Code != 0 {
		t.Fatalf("hook must apply once: %+v %v", r, err)
	}
	// Drop the conn on the next request: the call fails, the next one redials.
	first, _ := cl.Conn(ctx, addr)
	s.Control(PullMessage, func(c *Conn, req *Command) (*Command, bool) {
		c.Close()
		return nil, true
	})
	if _, err := cl.Invoke(ctx, addr, NewRequest(PullMessage, nil, nil)); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("dropped conn: %v", err)
	}
	waitFor(t, "client conn to close", 10*time.Second, first.isClosed)
	r, err = cl.Invoke(ctx, addr, NewRequest(PullMessage, nil, nil))
	if err != nil || r.Code != 0 {
		t.Fatalf("after redial: %+v %v", r, err)
	}
	if second, _ := cl.Conn(ctx, addr); second == first {
		t.Fatal("client did not redial")
	}
}

// The server calls back into the client on the conn the client opened
// (as a broker sends CHECK_TRANSACTION_STATE), and a long-polled request
// is answered later with WriteResponse.
func TestRemotingServerInvokesClientAndAnswersLater(t *testing.T) {
	checkLeaks(t)
	s := startServer(t, ServerConfig{}, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		back, err := c.Invoke(ctx, NewRequest(CheckTransactionState, map[string]string{"q": "?"}, nil))
		if err != nil {
			return NewResponse(req, SystemError, err.Error())
		}
		if err := c.InvokeOneway(ctx, NewRequest(NotifyConsumerIdsChanged, nil, nil)); err != nil {
			return NewResponse(req, SystemError, err.Error())
		}
		go func() { // answer later, off the worker
			resp := NewResponse(req, Success, back.Remark)
			_ = c.WriteResponse(resp)
		}()
		return nil
	}))
	notified := make(chan struct{}, 1)
	cl := newTestClient(t, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		if req.Code == int32(NotifyConsumerIdsChanged) {
			if !req.IsOneway() {
				t.Error("oneway flag not set")
			}
			notified <- struct{}{}
			return NewResponse(req, Success, "dropped: oneway")
		}
		return NewResponse(req, Success, "answer "+req.ExtFields["q"])
	}))
	r, err := cl.Invoke(ctxT(t), s.Addr().String(), NewRequest(PullMessage, nil, nil))
	if err != nil || r.Code != 0 || r.Remark != "answer ?" {
		t.Fatalf("%+v %v", r, err)
	}
	select {
	case <-notified:
	case <-time.After(10 * time.Second):
		t.Fatal("oneway request not delivered to the client handler")
	}
}

func TestRemotingClientInvokeTimeout(t *testing.T) {
	checkLeaks(t)
	s := startServer(t, ServerConfig{}, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		return nil // never answers
	}))
	cl := newTestClient(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := cl.Invoke(ctx, s.Addr().String(), NewRequest(1, nil, nil)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	// A dial failure is reported, not hung on.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	if _, err := cl.Invoke(ctxT(t), dead, NewRequest(1, nil, nil)); err == nil {
		t.Fatal("want dial error")
	}
}

// checkLeaks fails the test if goroutines it started outlive it. Call it
// first: cleanups run last-in first-out, so this check runs after the
// servers and clients the test registered have been closed.
func checkLeaks(t *testing.T) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
}

// Many callers share one conn; every response must match its request.
func TestRemotingServerConcurrentCallersOneConn(t *testing.T) {
	checkLeaks(t)
	s := startServer(t, ServerConfig{}, HandlerFunc(echo))
	cl := newTestClient(t, nil)
	ctx := ctxT(t)
	const callers, calls = 8, 100
	errs := make(chan error, callers)
	for g := range callers {
		go func() {
			for i := range calls {
				body := bytes.Repeat([]byte{byte('a' + g)}, (g*calls+i)%(3*inlineBodyMax))
				id := fmt.Sprintf("%d/%d", g, i)
				resp, err := cl.Invoke(ctx, s.Addr().String(), NewRequest(SendMessage, map[string]string{"id": id}, body))
				if err == nil && (resp.ExtFields["id"] != id || !bytes.Equal(resp.Body, body)) {
					err = fmt.Errorf("call %s got the response of %s", id, resp.ExtFields["id"])
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
