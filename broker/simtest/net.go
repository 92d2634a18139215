package simtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Net is an in-memory network of hosts. Its conns are buffered pipes
// whose every wait is on a channel or a timer, so a goroutine blocked on
// one is durably blocked in a testing/synctest bubble and virtual time can
// advance. A link between two hosts can be cut: its conns break at once
// and dials across it fail, as over a real partition.
type Net struct {
	mu        sync.Mutex
	listeners map[string]*listener // by "ip:port"
	conns     map[*pipeConn]struct{}
	cut       map[[2]string]bool // host pairs, ordered
	nextPort  int
}

// NewNet returns an empty network.
func NewNet() *Net {
	return &Net{listeners: map[string]*listener{}, conns: map[*pipeConn]struct{}{}, cut: map[[2]string]bool{}, nextPort: 40000}
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// Host is one machine's view of the network (an IP). A host's process
// incarnation uses a Stack: killing the stack closes its listeners and
// conns and makes its dials fail, and the next incarnation gets a new one.
type Host struct {
	n  *Net
	ip string
}

// Host returns the host with ip.
func (n *Net) Host(ip string) *Host { return &Host{n: n, ip: ip} }

// Stack is one process's sockets on a host (implements broker.Network).
type Stack struct {
	h    *Host
	mu   sync.Mutex
	dead bool
	lns  []*listener
}

// NewStack is a new process's socket table on h.
func (h *Host) NewStack() *Stack { return &Stack{h: h} }

var errDead = errors.New("simtest: process is dead")

// Kill closes every listener and conn of the stack; later calls fail.
func (s *Stack) Kill() {
	s.mu.Lock()
	s.dead = true
	lns := s.lns
	s.lns = nil
	s.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	n := s.h.n
	n.mu.Lock()
	var broken []*pipeConn
	for c := range n.conns {
		if c.stack == s {
			broken = append(broken, c)
		}
	}
	n.mu.Unlock()
	for _, c := range broken {
		c.breakBoth()
	}
}

// Listen binds addr ("ip:port"; the ip must be the host's, or empty).
func (s *Stack) Listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if host == "" || host == "0.0.0.0" {
		host = s.h.ip
	}
	if host != s.h.ip {
		return nil, fmt.Errorf("simtest: listen %s on host %s: %w", addr, s.h.ip, syscall.EADDRNOTAVAIL)
	}
	key := net.JoinHostPort(host, port)
	n := s.h.n
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return nil, errDead
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, busy := n.listeners[key]; busy {
		return nil, fmt.Errorf("simtest: listen %s: %w", key, syscall.EADDRINUSE)
	}
	l := &listener{n: n, stack: s, key: key, addr: tcpAddr(key), q: make(chan *pipeConn, 128), done: make(chan struct{})}
	n.listeners[key] = l
	s.lns = append(s.lns, l)
	return l, nil
}

// Dial connects to addr; across a cut link it fails (host unreachable).
func (s *Stack) Dial(ctx context.Context, addr string) (net.Conn, error) {
	s.mu.Lock()
	dead := s.dead
	s.mu.Unlock()
	if dead {
		return nil, errDead
	}
	n := s.h.n
	n.mu.Lock()
	l := n.listeners[addr]
	var cut bool
	if l != nil {
		cut = n.cut[pair(s.h.ip, l.stack.h.ip)]
	} else if host, _, err := net.SplitHostPort(addr); err == nil {
		cut = n.cut[pair(s.h.ip, host)]
	}
	n.nextPort++
	local := tcpAddr(net.JoinHostPort(s.h.ip, fmt.Sprint(n.nextPort)))
	n.mu.Unlock()
	if cut {
		// Failing at once, not after a dial timeout: a caller may hold a
		// mutex across its dial (the remoting client does, per address),
		// and a goroutine waiting for that mutex is not durably blocked,
		// so virtual time would never reach the timeout.
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: tcpAddr(addr), Err: syscall.EHOSTUNREACH}
	}
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: tcpAddr(addr), Err: syscall.ECONNREFUSED}
	}
	c1, c2 := newPipe(local, l.addr)
	c1.stack, c2.stack = s, l.stack
	c1.peerIP, c2.peerIP = l.stack.h.ip, s.h.ip
	n.mu.Lock()
	n.conns[c1], n.conns[c2] = struct{}{}, struct{}{}
	n.mu.Unlock()
	select {
	case l.q <- c2:
		return c1, nil
	case <-l.done:
	case <-ctx.Done():
	}
	c1.breakBoth()
	return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: tcpAddr(addr), Err: syscall.ECONNREFUSED}
}

// Cut cuts (or heals) the link between hosts a and b; cutting breaks the
// conns between them.
func (n *Net) Cut(a, b string, cut bool) {
	n.mu.Lock()
	if cut {
		n.cut[pair(a, b)] = true
	} else {
		delete(n.cut, pair(a, b))
	}
	var broken []*pipeConn
	if cut {
		for c := range n.conns {
			if pair(c.stack.h.ip, c.peerIP) == pair(a, b) {
				broken = append(broken, c)
			}
		}
	}
	n.mu.Unlock()
	for _, c := range broken {
		c.breakBoth()
	}
}

// HealAll heals every cut link.
func (n *Net) HealAll() {
	n.mu.Lock()
	clear(n.cut)
	n.mu.Unlock()
}

func (n *Net) forget(c *pipeConn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
}

func tcpAddr(hostport string) *net.TCPAddr {
	a, err := net.ResolveTCPAddr("tcp", hostport)
	if err != nil {
		return &net.TCPAddr{}
	}
	return a
}

type listener struct {
	n     *Net
	stack *Stack
	key   string
	addr  *net.TCPAddr
	q     chan *pipeConn
	once  sync.Once
	done  chan struct{}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.q:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		if l.n.listeners[l.key] == l {
			delete(l.n.listeners, l.key)
		}
		l.n.mu.Unlock()
		for {
			select {
			case c := <-l.q:
				c.breakBoth()
			default:
				return
			}
		}
	})
	return nil
}

func (l *listener) Addr() net.Addr { return l.addr }

// pipeBufMax bounds the bytes buffered one way: a writer past it waits
// for the reader, as a full socket buffer makes it.
const pipeBufMax = 4 << 20

// half is one direction of a conn: bytes written at one end, read at the
// other. changed is closed (and replaced) on every change a waiter may
// wait for.
type half struct {
	mu      sync.Mutex
	buf     []byte
	eof     bool // the writer closed: reads drain buf, then io.EOF
	broken  bool // reset: every op fails at once
	changed chan struct{}
}

func newHalf() *half { return &half{changed: make(chan struct{})} }

func (h *half) notifyLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// pipeConn is one end of a conn.
type pipeConn struct {
	n             *Net
	stack         *Stack
	peerIP        string
	local, remote *net.TCPAddr
	in, out       *half
	peer          *pipeConn

	mu        sync.Mutex
	closed    bool
	rdl, wdl  time.Time
	dlChanged chan struct{}
}

func newPipe(a, b *net.TCPAddr) (*pipeConn, *pipeConn) {
	ab, ba := newHalf(), newHalf()
	c1 := &pipeConn{local: a, remote: b, in: ba, out: ab, dlChanged: make(chan struct{})}
	c2 := &pipeConn{local: b, remote: a, in: ab, out: ba, dlChanged: make(chan struct{})}
	c1.peer, c2.peer = c2, c1
	return c1, c2
}

var errReset = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}

func (c *pipeConn) breakBoth() {
	for _, h := range []*half{c.in, c.out} {
		h.mu.Lock()
		h.broken = true
		h.buf = nil
		h.notifyLocked()
		h.mu.Unlock()
	}
	for _, e := range []*pipeConn{c, c.peer} {
		if e.stack != nil {
			e.stack.h.n.forget(e)
		}
	}
}

// deadline returns the deadline in force and the channel closed when it
// changes.
func (c *pipeConn) deadline(read bool) (time.Time, chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if read {
		return c.rdl, c.dlChanged, c.closed
	}
	return c.wdl, c.dlChanged, c.closed
}

// wait blocks until h changes, the deadline passes or changes; it
// returns a timeout error when the deadline passed.
func (c *pipeConn) wait(changed chan struct{}, read bool) error {
	dl, dlc, closed := c.deadline(read)
	if closed {
		return net.ErrClosed
	}
	var tc <-chan time.Time
	if !dl.IsZero() {
		d := time.Until(dl)
		if d <= 0 {
			return os.ErrDeadlineExceeded
		}
		t := time.NewTimer(d)
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-changed:
	case <-dlc:
	case <-tc:
		return os.ErrDeadlineExceeded
	}
	return nil
}

func (c *pipeConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *pipeConn) Read(p []byte) (int, error) {
	for {
		if c.isClosed() {
			return 0, net.ErrClosed
		}
		h := c.in
		h.mu.Lock()
		switch {
		case h.broken:
			h.mu.Unlock()
			return 0, errReset
		case len(h.buf) > 0:
			n := copy(p, h.buf)
			h.buf = h.buf[n:]
			if len(h.buf) == 0 {
				h.buf = nil
			}
			h.notifyLocked() // room for the writer
			h.mu.Unlock()
			return n, nil
		case h.eof:
			h.mu.Unlock()
			return 0, io.EOF
		}
		ch := h.changed
		h.mu.Unlock()
		if dl, _, _ := c.deadline(true); !dl.IsZero() && !time.Now().Before(dl) {
			return 0, os.ErrDeadlineExceeded
		}
		if err := c.wait(ch, true); err != nil {
			return 0, err
		}
	}
}

func (c *pipeConn) Write(p []byte) (int, error) {
	written := 0
	for {
		if c.isClosed() {
			return written, net.ErrClosed
		}
		h := c.out
		h.mu.Lock()
		if h.broken {
			h.mu.Unlock()
			return written, &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}
		}
		if h.eof {
			h.mu.Unlock()
			return written, net.ErrClosed
		}
		if room := pipeBufMax - len(h.buf); room > 0 {
			n := min(room, len(p)-written)
			h.buf = append(h.buf, p[written:written+n]...)
			written += n
			h.notifyLocked()
		}
		if written == len(p) {
			h.mu.Unlock()
			return written, nil
		}
		ch := h.changed
		h.mu.Unlock()
		if dl, _, _ := c.deadline(false); !dl.IsZero() && !time.Now().Before(dl) {
			return written, os.ErrDeadlineExceeded
		}
		if err := c.wait(ch, false); err != nil {
			return written, err
		}
	}
}

func (c *pipeConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.dlChanged)
	c.dlChanged = make(chan struct{})
	c.mu.Unlock()
	// Our writes end (the peer reads EOF after the buffered bytes); what
	// the peer sends us from now on is refused.
	c.out.mu.Lock()
	c.out.eof = true
	c.out.notifyLocked()
	c.out.mu.Unlock()
	c.in.mu.Lock()
	c.in.broken = true
	c.in.buf = nil
	c.in.notifyLocked()
	c.in.mu.Unlock()
	if c.stack != nil {
		c.stack.h.n.forget(c)
	}
	return nil
}

func (c *pipeConn) LocalAddr() net.Addr  { return c.local }
func (c *pipeConn) RemoteAddr() net.Addr { return c.remote }

func (c *pipeConn) SetDeadline(t time.Time) error {
	c.setDeadline(t, true, true)
	return nil
}

func (c *pipeConn) SetReadDeadline(t time.Time) error {
	c.setDeadline(t, true, false)
	return nil
}

func (c *pipeConn) SetWriteDeadline(t time.Time) error {
	c.setDeadline(t, false, true)
	return nil
}

func (c *pipeConn) setDeadline(t time.Time, r, w bool) {
	c.mu.Lock()
	if r {
		c.rdl = t
	}
	if w {
		c.wdl = t
	}
	close(c.dlChanged)
	c.dlChanged = make(chan struct{})
	c.mu.Unlock()
}
