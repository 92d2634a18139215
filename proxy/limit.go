package proxy

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Connection caps: the remoting port's defaults (remoting.DefaultMaxConns,
// DefaultMaxConnsPerIP), counted for the gRPC endpoint on its own.
const (
	DefaultMaxConns      = 4096
	DefaultMaxConnsPerIP = 1024
)

// limitListener caps the connections the endpoint holds, in total and
// per remote IP, as the remoting port does: one past a cap is closed at
// accept (a flood costs no goroutine or buffer), with a warning at most
// once a second per cap, and counted by onRefuse. It also knows every
// connection it handed out by its remote address, so a stream whose
// client stops reading can have its connection closed (closePeer).
type limitListener struct {
	net.Listener
	maxConns, maxPerIP int
	onRefuse           func(limit string)
	log                *slog.Logger

	mu struct {
		sync.Mutex
		conns  map[string]*limitConn // by remote address
		perIP  map[netip.Addr]int
		warned map[string]time.Time // last warning per cap
		muted  map[string]int       // refusals not logged since
	}
}

func newLimitListener(ln net.Listener, maxConns, maxPerIP int, onRefuse func(string), log *slog.Logger) *limitListener {
	l := &limitListener{Listener: ln, maxConns: maxConns, maxPerIP: maxPerIP, onRefuse: onRefuse, log: log}
	l.mu.conns = map[string]*limitConn{}
	l.mu.perIP = map[netip.Addr]int{}
	l.mu.warned = map[string]time.Time{}
	l.mu.muted = map[string]int{}
	return l
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

// admit registers c, or closes it when a cap is reached (nil).
func (l *limitListener) admit(c net.Conn) *limitConn {
	ip := peerIP(c.RemoteAddr())
	l.mu.Lock()
	limit, max := "", 0
	switch {
	case l.maxConns > 0 && len(l.mu.conns) >= l.maxConns:
		limit, max = "total", l.maxConns
	case l.maxPerIP > 0 && l.mu.perIP[ip] >= l.maxPerIP:
		limit, max = "per_ip", l.maxPerIP
	}
	if limit == "" {
		lc := &limitConn{Conn: c, l: l, ip: ip, key: c.RemoteAddr().String()}
		l.mu.conns[lc.key] = lc
		l.mu.perIP[ip]++
		l.mu.Unlock()
		return lc
	}
	logIt, muted := false, 0
	if now := time.Now(); now.Sub(l.mu.warned[limit]) >= time.Second {
		l.mu.warned[limit], logIt, muted = now, true, l.mu.muted[limit]
		l.mu.muted[limit] = 0
	} else {
		l.mu.muted[limit]++
	}
	l.mu.Unlock()
	if l.onRefuse != nil {
		l.onRefuse(limit)
	}
	if logIt {
		what := "total connections"
		if limit == "per_ip" {
			what = "connections from one IP"
		}
		l.log.Warn("grpc: connection refused: "+what+" at their cap", "cap", limit, "max", max,
			"remote", c.RemoteAddr().String(), "refused_unlogged_since_last", muted)
	}
	c.Close()
	return nil
}

// open is the number of connections held.
func (l *limitListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.conns)
}

// closePeer closes the connection whose remote address is addr (a
// stream's peer.Addr); false when there is none.
func (l *limitListener) closePeer(addr net.Addr) bool {
	if addr == nil {
		return false
	}
	l.mu.Lock()
	c := l.mu.conns[addr.String()]
	l.mu.Unlock()
	if c == nil {
		return false
	}
	c.Close()
	return true
}

type limitConn struct {
	net.Conn
	l    *limitListener
	ip   netip.Addr
	key  string
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		l := c.l
		l.mu.Lock()
		if l.mu.conns[c.key] == c {
			delete(l.mu.conns, c.key)
		}
		if l.mu.perIP[c.ip]--; l.mu.perIP[c.ip] <= 0 {
			delete(l.mu.perIP, c.ip)
		}
		l.mu.Unlock()
	})
	return err
}

// peerIP is a remote address's IP (the zero Addr when it has none).
func peerIP(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// byteBudget is a count of bytes held, up to max; acquire waits for room.
type byteBudget struct {
	max int64
	mu  sync.Mutex
	// used is what is held; free is closed and replaced when some is
	// released.
	used int64
	free chan struct{}
}

func newByteBudget(max int64) *byteBudget {
	return &byteBudget{max: max, free: make(chan struct{})}
}

// acquire takes n bytes (n <= max), waiting until they fit or ctx ends.
func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		free := b.free
		b.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryAcquire takes n bytes if they fit now.
func (b *byteBudget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.free)
	b.free = make(chan struct{})
	b.mu.Unlock()
}

// inUse is the bytes held now.
func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
