package remoting

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime/debug"
	"sync"
	"time"
)

// ErrServerClosed is returned by Serve and Listen after Close or Shutdown.
var ErrServerClosed = errors.New("remoting: server closed")

// Handler serves requests.
type Handler interface {
	// ServeRemoting handles one request. It returns the response, or nil when nothing is due now:
	// for a oneway request, or when the handler keeps the request (a long-polled pull) and
	// answers later with c.WriteResponse.
	//
	// ctx is canceled when the conn closes or the server stops. The
	// server fixes the response's opaque, response flag and serialization
	// to match req, and drops it when req is oneway.
	ServeRemoting(ctx context.Context, c *Conn, req *Command) *Command
}

// RequestHinter is an optional interface of a Handler that lets the server
// decode and buffer some requests more cheaply. Without it every request
// gets its ExtFields map and its own frame buffer.
//
// Ownership of a request frame: a decoded request's Body aliases the frame
// buffer it was read into (its header strings never do). When RequestHints
// reports reuseFrame for a code, the server recycles that buffer as soon as
// ServeRemoting returns (after the response is queued; queuing copies
// bodies up to 4 KiB, and a larger response body must not alias
// req.Body). The handler, and everything it calls, must then not keep
// req.Body or any slice of it past its return; Body is set to nil when the
// buffer is recycled. Copying the bytes (as the store's Put does into the
// log, and string conversions do) is fine.
//
// The decoded header (the Command and the copy of the header its strings
// alias) is the handler's to keep unless it calls ReadBatch.Recycle for
// the request: then the server reuses it for a later request once the
// batch ends (see Recycle for what the handler promises).
type RequestHinter interface {
	// RequestHints reports, for one request code, whether the handler
	// reads Command.ExtFields (false: it reads Command.Ext or ExtMap, and
	// ExtFields is left nil until ExtMap builds it), and whether the frame
	// may be recycled once ServeRemoting returns.
	RequestHints(code RequestCode) (extMap, reuseFrame bool)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, c *Conn, req *Command) *Command

// ServeRemoting calls f.
func (f HandlerFunc) ServeRemoting(ctx context.Context, c *Conn, req *Command) *Command {
	return f(ctx, c, req)
}

// PoolClass selects the worker pool a request runs on.
type PoolClass int

// Pool classes. Requests of a class whose pool is not configured run on
// PoolDefault's.
const (
	PoolDefault PoolClass = iota
	PoolSend
	PoolPull
	PoolAdmin
	PoolHeartbeat
)

func (p PoolClass) String() string {
	switch p {
	case PoolDefault:
		return "default"
	case PoolSend:
		return "send"
	case PoolPull:
		return "pull"
	case PoolAdmin:
		return "admin"
	case PoolHeartbeat:
		return "heartbeat"
	}
	return fmt.Sprintf("pool%d", int(p))
}

// PoolConfig sizes one worker pool: Workers goroutines take requests from
// a queue of Queue slots. Zero values mean the defaults (Workers 16,
// Queue 1024). Inline pools have no workers: their requests run on the
// connection's reader goroutine, which saves a goroutine hand-off per
// request but stops that connection's reading while the handler runs —
// only for handlers that never block for long.
type PoolConfig struct {
	Workers, Queue int
	Inline         bool
}

const (
	defaultPoolWorkers = 16
	defaultPoolQueue   = 1024
)

// ServerConfig configures a Server. Zero values mean defaults.
type ServerConfig struct {
	Addr         string
	MaxFrameSize int           // default 16 MiB + 64 KiB; bigger frame → that conn is closed
	IdleTimeout  time.Duration // default 120s without inbound bytes → conn closed; < 0 disables
	Pools        map[PoolClass]PoolConfig
	Classify     func(code RequestCode) PoolClass // nil → PoolDefault
	Logger       *slog.Logger
	OnClose      func(c *Conn) // after a conn is closed (consumer/producer/broker expiry)

	// MaxReadMemory bounds the bytes of requests being read or waiting
	// to be handled, over all conns (default 64 MiB; < 0: no bound). A
	// conn that would go over stops reading until memory is freed; it is
	// not closed for it. One frame at a time may go up to MaxFrameSize
	// past the bound, so a frame of the largest size always gets through.
	MaxReadMemory int64
	// FrameTimeout: a frame must arrive whole within this long of its
	// first byte, or its conn is closed (default 30s; < 0 disables). Time
	// spent waiting for read memory does not count. Between frames the
	// idle timeout applies.
	FrameTimeout time.Duration
	// MaxConns and MaxConnsPerIP cap the open conns, in total and per
	// remote IP (defaults 4096 and 1024; < 0: no cap). A conn over a cap
	// is closed at accept, with a (rate-limited) warning.
	MaxConns, MaxConnsPerIP int
	// OnRefuse, when set, is called for each conn closed at accept by a
	// cap: limit is "total" or "per_ip".
	OnRefuse func(limit string)

	// TLS, with TLSMode permissive or enforcing, serves TLS on the port
	// (see TLSListener); TLSHandshakeTimeout bounds a new conn's first
	// byte and handshake (default DefaultTLSHandshakeTimeout).
	TLS                 *tls.Config
	TLSMode             TLSMode
	TLSHandshakeTimeout time.Duration

	// Listener, if set, binds Addr in place of a TCP listen (an in-memory
	// network in tests). Its conns need not be TCP: the conn code falls
	// back from its socket fast paths on any other net.Conn.
	Listener func(addr string) (net.Listener, error)

	// bufRelease: a conn idle this long between frames drops its read
	// buffer until its next byte (default idleBufferRelease; tests
	// shorten it).
	bufRelease time.Duration
}

// Defaults of ServerConfig's resource limits.
const (
	DefaultMaxReadMemory = 64 << 20
	DefaultFrameTimeout  = 30 * time.Second
	DefaultMaxConns      = 4096
	DefaultMaxConnsPerIP = 1024
)

// idleBufferRelease is how long a server conn idles between frames
// before it drops its 64 KiB read buffer: an idle conn then holds a few
// KiB, and one that wakes allocates a new buffer (rarely: at most once
// per this long).
const idleBufferRelease = 2 * time.Second

// ServerStats is a snapshot of a server's resource use.
type ServerStats struct {
	Conns      int   // open conns
	ReadMemory int64 // bytes of requests being read or waiting to be handled
}

// refuseLogEvery rate-limits the warnings for conns refused at accept, and
// for reads paused on the read budget: one line per this long per kind.
const refuseLogEvery = time.Second

type task struct {
	c   *Conn
	req *Command
}

type pool struct {
	class   PoolClass
	workers int
	q       chan task
	inline  bool
}

// ControlFunc is a test hook; see Server.Control.
type ControlFunc func(c *Conn, req *Command) (resp *Command, handled bool)

// Server accepts remoting connections and runs their requests on bounded
// worker pools. When a pool's queue is full the server answers SYSTEM_BUSY
// itself; the reader never blocks on a busy pool. Responses go out in the
// order handlers finish (clients match them by opaque).
//
// Goroutines: Serve owns the accept loop, the pool workers and each conn's
// reader and writer; it returns after all of them have exited.
type Server struct {
	cfg    ServerConfig
	h      Handler
	log    *slog.Logger
	pools  map[PoolClass]*pool
	budget *readBudget // nil: no bound

	ctx    context.Context // handlers' parent; canceled by Close
	cancel context.CancelFunc

	wg          sync.WaitGroup
	closeOnce   sync.Once
	closedCh    chan struct{}
	stopWorkers chan struct{}
	serveDone   chan struct{}

	// mu guards the fields below; it is never held across I/O.
	mu struct {
		sync.Mutex
		ln       net.Listener
		serving  bool
		closed   bool
		draining bool
		inflight int
		drained  chan struct{}
		conns    map[uint64]*Conn
		perIP    map[netip.Addr]int
		control  map[RequestCode]ControlFunc
		// rate-limited warnings: when each kind was last logged, and
		// how many events were not logged since
		lastLog    map[string]time.Time
		suppressed map[string]int
	}
}

// NewServer returns a server; it starts nothing.
func NewServer(cfg ServerConfig, h Handler) *Server {
	if cfg.MaxFrameSize <= 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	} else if cfg.IdleTimeout < 0 {
		cfg.IdleTimeout = 0
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxReadMemory == 0 {
		cfg.MaxReadMemory = DefaultMaxReadMemory
	}
	if cfg.FrameTimeout == 0 {
		cfg.FrameTimeout = DefaultFrameTimeout
	} else if cfg.FrameTimeout < 0 {
		cfg.FrameTimeout = 0
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxConnsPerIP == 0 {
		cfg.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	if cfg.bufRelease == 0 {
		cfg.bufRelease = idleBufferRelease
	}
	s := &Server{
		cfg:         cfg,
		h:           h,
		log:         cfg.Logger,
		pools:       make(map[PoolClass]*pool),
		closedCh:    make(chan struct{}),
		stopWorkers: make(chan struct{}),
		serveDone:   make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.MaxReadMemory > 0 {
		s.budget = newReadBudget(cfg.MaxReadMemory)
	}
	s.mu.conns = make(map[uint64]*Conn)
	s.mu.perIP = make(map[netip.Addr]int)
	s.mu.control = make(map[RequestCode]ControlFunc)
	s.mu.lastLog = make(map[string]time.Time)
	s.mu.suppressed = make(map[string]int)
	classes := map[PoolClass]PoolConfig{PoolDefault: {}}
	for cl, pc := range cfg.Pools {
		classes[cl] = pc
	}
	for cl, pc := range classes {
		if pc.Workers <= 0 {
			pc.Workers = defaultPoolWorkers
		}
		if pc.Queue <= 0 {
			pc.Queue = defaultPoolQueue
		}
		if pc.Inline {
			s.pools[cl] = &pool{class: cl, inline: true}
			continue
		}
		s.pools[cl] = &pool{class: cl, workers: pc.Workers, q: make(chan task, pc.Queue)}
	}
	return s
}

// Listen binds cfg.Addr; Addr is valid afterwards. Serve calls it if it
// has not been called.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrServerClosed
	}
	if s.mu.ln != nil {
		return nil
	}
	listen := s.cfg.Listener
	if listen == nil {
		listen = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	ln, err := listen(s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("remoting: listen %s: %w", s.cfg.Addr, err)
	}
	s.mu.ln = TLSListener(ln, s.cfg.TLS, s.cfg.TLSMode, s.cfg.TLSHandshakeTimeout)
	return nil
}

// Addr is the bound address, nil before Listen.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.ln == nil {
		return nil
	}
	return s.mu.ln.Addr()
}

// Serve accepts connections until ctx is done or Shutdown/Close is called,
// and returns after every goroutine it started has exited. It returns nil
// after a normal stop.
func (s *Server) Serve(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.mu.serving {
		s.mu.Unlock()
		return errors.New("remoting: Serve called twice")
	}
	s.mu.serving = true
	ln := s.mu.ln
	s.mu.Unlock()
	defer close(s.serveDone)

	for _, p := range s.pools {
		for range p.workers {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.work(p)
			}()
		}
	}
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()

	var serveErr error
	backoff := 5 * time.Millisecond
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.stopping() || errors.Is(err, net.ErrClosed) {
				break
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				s.log.Warn("remoting: accept failed, retrying", "err", err, "backoff", backoff)
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
				case <-s.closedCh:
				}
				t.Stop()
				backoff = min(2*backoff, time.Second)
				continue
			}
			serveErr = fmt.Errorf("remoting: accept: %w", err)
			s.Close()
			break
		}
		backoff = 5 * time.Millisecond
		s.startConn(nc)
	}
	<-s.closedCh
	s.wg.Wait()
	return serveErr
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (s *Server) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.closed || s.mu.draining
}

// ServeConn serves nc as a connection Accept returned: an in-process
// client (the web console's actions) reaches the handlers, the ACL and
// the connection limits exactly as a remote one, its address being
// nc.RemoteAddr(). It returns at once; nc is closed when the server
// closes. Before Serve runs, nc is served once Serve starts its workers.
func (s *Server) ServeConn(nc net.Conn) { s.startConn(nc) }

func (s *Server) startConn(nc net.Conn) {
	ip := remoteIP(nc)
	s.mu.Lock()
	if s.mu.closed || s.mu.draining {
		s.mu.Unlock()
		nc.Close()
		return
	}
	limit, max := "", 0
	switch {
	case s.cfg.MaxConns > 0 && len(s.mu.conns) >= s.cfg.MaxConns:
		limit, max = "total", s.cfg.MaxConns
	case s.cfg.MaxConnsPerIP > 0 && s.mu.perIP[ip] >= s.cfg.MaxConnsPerIP:
		limit, max = "per_ip", s.cfg.MaxConnsPerIP
	}
	if limit != "" {
		log, suppressed := s.rateLimitedLocked("refuse " + limit)
		s.mu.Unlock()
		// Counted and logged before the peer can see the close.
		if s.cfg.OnRefuse != nil {
			s.cfg.OnRefuse(limit)
		}
		if log {
			what := "total connections"
			if limit == "per_ip" {
				what = "connections from one IP"
			}
			s.log.Warn("remoting: connection refused: "+what+" at their cap", "cap", limit, "max", max,
				"remote", nc.RemoteAddr().String(), "refused_unlogged_since_last", suppressed)
		}
		nc.Close()
		return
	}
	c := newConn(nc, s, s.ctx, s.log, s.cfg.MaxFrameSize, s.cfg.IdleTimeout)
	c.poolFrames = true
	c.budget = s.budget
	c.frameTimeout = s.cfg.FrameTimeout
	c.bufRelease = s.cfg.bufRelease
	c.ip = ip
	s.mu.conns[c.id] = c
	s.mu.perIP[ip]++
	s.wg.Add(2)
	s.mu.Unlock()
	c.start(s.wg.Done)
}

// remoteIP is the IP nc's peer connects from (the zero Addr when it is
// not an IP address).
func remoteIP(nc net.Conn) netip.Addr {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// rateLimitedLocked reports whether an event of kind may be logged now,
// and how many of its kind were not logged since the last line. s.mu is
// held.
func (s *Server) rateLimitedLocked(kind string) (bool, int) {
	now := time.Now()
	if last, ok := s.mu.lastLog[kind]; ok && now.Sub(last) < refuseLogEvery {
		s.mu.suppressed[kind]++
		return false, 0
	}
	n := s.mu.suppressed[kind]
	s.mu.lastLog[kind] = now
	s.mu.suppressed[kind] = 0
	return true, n
}

// readPaused logs, rate-limited, that a conn stopped reading on the read
// budget.
func (s *Server) readPaused(c *Conn, b *readBudget) {
	s.mu.Lock()
	log, suppressed := s.rateLimitedLocked("read paused")
	s.mu.Unlock()
	if log {
		s.log.Warn("remoting: read memory at its cap, pausing reads until requests are handled",
			"max_read_memory", b.limit, "in_use", b.inUse(), "conn", c.id, "remote", c.RemoteAddr().String(),
			"paused_unlogged_since_last", suppressed)
	}
}

// Stats reports the server's current resource use.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	st := ServerStats{Conns: len(s.mu.conns)}
	s.mu.Unlock()
	if s.budget != nil {
		st.ReadMemory = s.budget.inUse()
	}
	return st
}

// Control installs a test hook for the next request with this code: fn
// runs on the conn's reader goroutine before the request is queued; if it
// reports handled, its response (if any) is sent and the handler is not
// called. The hook is removed after one use.
func (s *Server) Control(code RequestCode, fn func(c *Conn, req *Command) (resp *Command, handled bool)) {
	s.mu.Lock()
	s.mu.control[code] = fn
	s.mu.Unlock()
}

func (s *Server) dispatch(c *Conn, req *Command) {
	code := RequestCode(req.Code)
	s.mu.Lock()
	fn := s.mu.control[code]
	if fn != nil {
		delete(s.mu.control, code)
	}
	s.mu.Unlock()
	if fn != nil {
		// A test hook sees the usual request and may keep it.
		req.ExtMap()
		req.frame = nil
		resp, handled := fn(c, req)
		if handled {
			s.reply(c, req, resp)
			req.handled(s.budget)
			return
		}
	}

	s.mu.Lock()
	if s.mu.draining {
		s.mu.Unlock()
		s.reply(c, req, NewResponse(req, ServiceNotAvailable, "server is shutting down"))
		req.handled(s.budget)
		return
	}
	s.mu.inflight++
	s.mu.Unlock()

	p := s.pool(code)
	if p.inline {
		if _, ok := s.h.(BatchHandler); ok {
			s.serveInBatch(c, req)
			return
		}
		s.serve(task{c: c, req: req})
		return
	}
	select {
	case p.q <- task{c: c, req: req}:
	default:
		s.doneInflight()
		s.log.Warn("remoting: pool full, rejecting request", "pool", p.class.String(), "code", code.String(), "conn", c.id)
		s.reply(c, req, NewResponse(req, SystemBusy,
			fmt.Sprintf("[REJECTREQUEST]system busy, %s pool full, start flow control for a while", p.class)))
		req.handled(s.budget)
	}
}

func (s *Server) pool(code RequestCode) *pool {
	if s.cfg.Classify != nil {
		if p, ok := s.pools[s.cfg.Classify(code)]; ok {
			return p
		}
	}
	return s.pools[PoolDefault]
}

// reply sends resp for req unless resp is nil or req is oneway.
func (s *Server) reply(c *Conn, req, resp *Command) {
	if err := c.Reply(req, resp); err != nil && !errors.Is(err, ErrConnClosed) {
		s.log.Error("remoting: cannot encode response", "code", resp.Code, "err", err, "conn", c.id)
	}
}

func (s *Server) doneInflight() { s.doneInflightN(1) }

func (s *Server) doneInflightN(n int) {
	s.mu.Lock()
	s.mu.inflight -= n
	if s.mu.inflight == 0 && s.mu.drained != nil {
		close(s.mu.drained)
		s.mu.drained = nil
	}
	s.mu.Unlock()
}

func (s *Server) work(p *pool) {
	for {
		select {
		case t := <-p.q:
			s.serve(t)
		case <-s.stopWorkers:
			return
		}
	}
}

func (s *Server) serve(t task) {
	defer s.doneInflight()
	defer t.req.handled(s.budget) // also after a panic
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("remoting: handler panicked", "code", RequestCode(t.req.Code).String(), "panic", r,
				"stack", string(debug.Stack()))
			s.reply(t.c, t.req, NewResponse(t.req, SystemError, fmt.Sprintf("handler panic: %v", r)))
		}
	}()
	// A request that arrived whole is served even if its conn has closed
	// since: client-go sends its final offset commits ("oneway") and closes
	// at once, and those must not be lost. Only the reply is dropped.
	resp := s.h.ServeRemoting(t.c.ctx, t.c, t.req)
	s.reply(t.c, t.req, resp)
}

func (s *Server) requestHints(code RequestCode) (extMap, reuseFrame bool) {
	if h, ok := s.h.(RequestHinter); ok {
		return h.RequestHints(code)
	}
	return true, false
}

func (s *Server) endReadBatch(c *Conn) { s.endBatch(c) }

func (s *Server) connClosed(c *Conn) {
	s.mu.Lock()
	delete(s.mu.conns, c.id)
	if s.mu.perIP[c.ip]--; s.mu.perIP[c.ip] <= 0 {
		delete(s.mu.perIP, c.ip)
	}
	s.mu.Unlock()
	if s.cfg.OnClose != nil {
		s.cfg.OnClose(c)
	}
}

// Shutdown stops accepting, answers new requests SERVICE_NOT_AVAILABLE,
// waits until the requests already queued or running have been handled
// (or ctx is done), then closes every conn and waits for Serve to return.
// Requests a handler kept (long polls) are not waited for. It must not be
// called from a handler.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.mu.draining = true
	var drained chan struct{}
	if s.mu.inflight > 0 {
		if s.mu.drained == nil {
			s.mu.drained = make(chan struct{})
		}
		drained = s.mu.drained
	}
	ln, serving := s.mu.ln, s.mu.serving
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	var err error
	if drained != nil {
		select {
		case <-drained:
		case <-ctx.Done():
			err = fmt.Errorf("remoting: shutdown: requests still running: %w", ctx.Err())
		}
	}
	s.Close()
	if serving {
		select {
		case <-s.serveDone:
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("remoting: shutdown: %w", ctx.Err())
			}
		}
	}
	return err
}

// Close stops the server at once: the listener and every conn are closed
// and handlers' contexts canceled. It does not wait; Serve returns once
// everything has exited.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.mu.closed = true
		s.mu.draining = true
		ln := s.mu.ln
		conns := make([]*Conn, 0, len(s.mu.conns))
		for _, c := range s.mu.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		if ln != nil {
			ln.Close()
		}
		s.cancel()
		for _, c := range conns {
			c.Close()
		}
		close(s.stopWorkers)
		close(s.closedCh)
	})
	return nil
}
