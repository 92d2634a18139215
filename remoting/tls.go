package remoting

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/infra/tlsconf"
)

// TLSMode is how a server port treats TLS, with the names of RocketMQ's
// tls.server.mode.
type TLSMode int

const (
	// TLSDisabled: plain TCP only (no TLS config needed).
	TLSDisabled TLSMode = iota
	// TLSPermissive: TLS and plain clients on the same port, told apart
	// by the first byte a client sends: a TLS record starts 0x16, a
	// remoting frame with the high byte of its length, at most 0x01 for
	// any frame a server accepts. For moving clients to TLS one at a time.
	TLSPermissive
	// TLSEnforcing: TLS only; a client whose first byte is not a TLS
	// handshake is disconnected.
	TLSEnforcing
)

// ParseTLSMode parses disabled, permissive or enforcing ("" is disabled).
func ParseTLSMode(s string) (TLSMode, error) {
	switch s {
	case "", "disabled":
		return TLSDisabled, nil
	case "permissive":
		return TLSPermissive, nil
	case "enforcing":
		return TLSEnforcing, nil
	}
	return TLSDisabled, fmt.Errorf("want disabled, permissive or enforcing, not %q", s)
}

func (m TLSMode) String() string {
	switch m {
	case TLSDisabled:
		return "disabled"
	case TLSPermissive:
		return "permissive"
	case TLSEnforcing:
		return "enforcing"
	}
	return fmt.Sprintf("TLSMode(%d)", int(m))
}

// DefaultTLSHandshakeTimeout bounds how long an accepted conn on a TLS
// port may take to send its first byte and finish the handshake.
const DefaultTLSHandshakeTimeout = 10 * time.Second

// ErrPlainRefused is the read error of a plain-text client on a port in
// TLSEnforcing mode (its conn is closed).
var ErrPlainRefused = errors.New("remoting: plain-text client refused: this port takes TLS only (STRATAMQ_TLS_MODE=enforcing)")

// tlsRecordHandshake is the first byte of a TLS ClientHello record.
const tlsRecordHandshake = 0x16

// TLSListener wraps ln so that each accepted conn speaks TLS with cfg, or
// (mode TLSPermissive) plain TCP when its first byte is not a TLS
// handshake. Accept does not wait for the client: the first byte is read
// and the handshake done on the conn's first Read or Write, under a
// deadline of handshakeTimeout (0: DefaultTLSHandshakeTimeout), so a
// silent client neither blocks the accept loop nor holds a goroutine
// longer than that. Mode TLSDisabled or a nil cfg returns ln as it is.
// The HA port uses it too.
func TLSListener(ln net.Listener, cfg *tls.Config, mode TLSMode, handshakeTimeout time.Duration) net.Listener {
	if cfg == nil || mode == TLSDisabled {
		return ln
	}
	if handshakeTimeout <= 0 {
		handshakeTimeout = DefaultTLSHandshakeTimeout
	}
	return &tlsListener{Listener: ln, cfg: cfg, mode: mode, timeout: handshakeTimeout}
}

type tlsListener struct {
	net.Listener
	cfg     *tls.Config
	mode    TLSMode
	timeout time.Duration
}

func (l *tlsListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{raw: nc, cfg: l.cfg, mode: l.mode, timeout: l.timeout}, nil
}

// sniffConn is an accepted conn on a TLS port. Its first Read or Write
// (whichever comes first; the other waits) reads one byte and decides:
// TLS (handshake now), plain (permissive only) or refused. Deadlines set
// meanwhile are kept and re-armed once the decision is made.
type sniffConn struct {
	raw     net.Conn
	cfg     *tls.Config
	mode    TLSMode
	timeout time.Duration

	once    sync.Once
	decided atomic.Bool
	inner   net.Conn // *tlsconf.Conn or *prefixedConn, set by decide
	err     error    // decide's error, returned by every Read and Write

	// mu guards the deadlines the owner asked for, applied to the socket
	// once decided is set (decide arms its own until then).
	mu       sync.Mutex
	rdl, wdl time.Time
	wbuf     []byte // WriteBuffers' coalescing buffer (writer goroutine only)
}

func (c *sniffConn) conn() (net.Conn, error) {
	c.once.Do(c.decide)
	return c.inner, c.err
}

func (c *sniffConn) decide() {
	defer func() {
		// The owner's deadlines again, from now on applied as set.
		c.mu.Lock()
		_ = c.raw.SetReadDeadline(c.rdl)
		_ = c.raw.SetWriteDeadline(c.wdl)
		c.decided.Store(true)
		c.mu.Unlock()
	}()
	deadline := time.Now().Add(c.timeout)
	_ = c.raw.SetReadDeadline(deadline)
	_ = c.raw.SetWriteDeadline(deadline)
	var first [1]byte
	if _, err := io.ReadFull(c.raw, first[:]); err != nil {
		c.err = fmt.Errorf("remoting: waiting for the first byte on a TLS port: %w", err)
		return
	}
	pre := &prefixedConn{Conn: c.raw, first: first[0], pending: true}
	switch {
	case first[0] == tlsRecordHandshake:
		tc := tlsconf.NewServerConn(pre, c.cfg)
		if err := tc.Handshake(); err != nil {
			c.err = fmt.Errorf("remoting: TLS handshake: %w", err)
			return
		}
		c.inner = tc
	case c.mode == TLSEnforcing:
		c.err = ErrPlainRefused
		return
	default:
		c.inner = pre
	}
}

func (c *sniffConn) Read(p []byte) (int, error) {
	nc, err := c.conn()
	if err != nil {
		return 0, err
	}
	return nc.Read(p)
}

func (c *sniffConn) Write(p []byte) (int, error) {
	nc, err := c.conn()
	if err != nil {
		return 0, err
	}
	return nc.Write(p)
}

// WriteBuffers writes bufs as one write: TLS would otherwise seal each
// buffer in a record (and a syscall) of its own. A plain conn keeps
// writev.
func (c *sniffConn) WriteBuffers(bufs [][]byte) (int64, error) {
	nc, err := c.conn()
	if err != nil {
		return 0, err
	}
	if pc, ok := nc.(*prefixedConn); ok {
		nb := net.Buffers(bufs)
		return nb.WriteTo(pc.Conn)
	}
	var n int64
	c.wbuf, n, err = writeCoalesced(nc, c.wbuf, bufs)
	return n, err
}

// TLSState is the conn's TLS state; ok is false for a plain conn (or
// before its first byte).
func (c *sniffConn) TLSState() (tls.ConnectionState, bool) {
	if !c.decided.Load() {
		return tls.ConnectionState{}, false
	}
	if tc, ok := c.inner.(*tlsconf.Conn); ok {
		return tc.ConnectionState(), true
	}
	return tls.ConnectionState{}, false
}

func (c *sniffConn) Close() error {
	if c.decided.Load() {
		if tc, ok := c.inner.(*tlsconf.Conn); ok {
			return tc.Close() // close_notify, then the socket
		}
	}
	return c.raw.Close()
}

func (c *sniffConn) LocalAddr() net.Addr  { return c.raw.LocalAddr() }
func (c *sniffConn) RemoteAddr() net.Addr { return c.raw.RemoteAddr() }

func (c *sniffConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl, c.wdl = t, t
	if !c.decided.Load() {
		return nil
	}
	return c.raw.SetDeadline(t)
}

func (c *sniffConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl = t
	if !c.decided.Load() {
		return nil
	}
	return c.raw.SetReadDeadline(t)
}

func (c *sniffConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wdl = t
	if !c.decided.Load() {
		return nil
	}
	return c.raw.SetWriteDeadline(t)
}

// prefixedConn returns first before what the socket holds: the byte read
// to tell TLS from plain.
type prefixedConn struct {
	net.Conn
	first   byte
	pending bool
}

func (p *prefixedConn) Read(b []byte) (int, error) {
	if p.pending && len(b) > 0 {
		b[0] = p.first
		p.pending = false
		return 1, nil
	}
	return p.Conn.Read(b)
}

// clientTLSConn is a Client's TLS conn, with the coalescing WriteBuffers.
type clientTLSConn struct {
	*tlsconf.Conn
	wbuf []byte
}

func (c *clientTLSConn) WriteBuffers(bufs [][]byte) (int64, error) {
	var (
		n   int64
		err error
	)
	c.wbuf, n, err = writeCoalesced(c.Conn, c.wbuf, bufs)
	return n, err
}

// coalesceMax is the most bytes writeCoalesced copies into one write; a
// TLS record holds 16 KiB, so larger writes gain nothing more.
const coalesceMax = 256 << 10

// writeCoalesced writes bufs to w in writes of up to coalesceMax bytes,
// copying small buffers together through buf (returned for reuse).
func writeCoalesced(w io.Writer, buf []byte, bufs [][]byte) ([]byte, int64, error) {
	var n int64
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		m, err := w.Write(buf)
		n += int64(m)
		buf = buf[:0]
		return err
	}
	for _, b := range bufs {
		if len(b) >= coalesceMax {
			if err := flush(); err != nil {
				return buf[:0], n, err
			}
			m, err := w.Write(b)
			n += int64(m)
			if err != nil {
				return buf[:0], n, err
			}
			continue
		}
		if len(buf)+len(b) > coalesceMax {
			if err := flush(); err != nil {
				return buf[:0], n, err
			}
		}
		buf = append(buf, b...)
	}
	err := flush()
	if cap(buf) > coalesceMax*2 {
		buf = nil
	}
	return buf, n, err
}

// buffersWriter is a conn that writes several buffers better than one
// Write each (TLS conns, which would seal a record per buffer).
type buffersWriter interface {
	WriteBuffers(bufs [][]byte) (int64, error)
}

// TLSState is the TLS state of c's connection; ok is false for a plain
// one.
func (c *Conn) TLSState() (tls.ConnectionState, bool) {
	switch nc := c.nc.(type) {
	case *sniffConn:
		return nc.TLSState()
	case *clientTLSConn:
		return nc.ConnectionState(), true
	}
	return tls.ConnectionState{}, false
}

// dialTLS runs a client handshake on nc (closed on failure) within
// timeout. cfg's ServerName defaults to addr's host.
func dialTLS(ctx context.Context, nc net.Conn, addr string, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	tc, err := tlsconf.Handshake(ctx, nc, addr, cfg, timeout)
	if err != nil {
		return nil, fmt.Errorf("remoting: %w", err)
	}
	return &clientTLSConn{Conn: tc}, nil
}
