package remoting

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// ErrClientClosed is returned by a Client after Close.
var ErrClientClosed = errors.New("remoting: client closed")

// ClientConfig configures a Client. Zero values mean defaults.
type ClientConfig struct {
	DialTimeout  time.Duration // default 3s
	MaxFrameSize int           // default 16 MiB + 64 KiB
	// Handler serves requests the peer sends on a client conn (a broker's
	// CHECK_TRANSACTION_STATE or NOTIFY_CONSUMER_IDS_CHANGED). nil answers
	// REQUEST_CODE_NOT_SUPPORTED.
	Handler Handler
	Logger  *slog.Logger
	// TLS, when set, makes every conn TLS (the handshake is part of the
	// dial, under DialTimeout). An empty ServerName is taken from the
	// address dialled.
	TLS *tls.Config
	// Dial, if set, connects to addr in place of a TCP dial (an in-memory
	// network in tests); it is given DialTimeout in ctx.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

const (
	defaultDialTimeout = 3 * time.Second
	// maxClientHandlers bounds concurrent server→client requests per Client.
	maxClientHandlers = 64
)

// Client holds one conn per address, dialled lazily and redialled on the
// next call after it closes. It is safe for concurrent use.
type Client struct {
	cfg    ClientConfig
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		closed bool
		slots  map[string]*clientSlot
	}
}

type clientSlot struct {
	mu sync.Mutex // held while dialling, so one dial per address at a time
	c  *Conn
}

// NewClient returns a client; it dials nothing until used.
func NewClient(cfg ClientConfig) *Client {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.MaxFrameSize <= 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cl := &Client{cfg: cfg, log: cfg.Logger, sem: make(chan struct{}, maxClientHandlers)}
	cl.ctx, cl.cancel = context.WithCancel(context.Background())
	cl.mu.slots = make(map[string]*clientSlot)
	return cl
}

// Conn returns the conn to addr, dialling it if there is none or the last
// one closed.
func (cl *Client) Conn(ctx context.Context, addr string) (*Conn, error) {
	cl.mu.Lock()
	if cl.mu.closed {
		cl.mu.Unlock()
		return nil, ErrClientClosed
	}
	slot := cl.mu.slots[addr]
	if slot == nil {
		slot = &clientSlot{}
		cl.mu.slots[addr] = slot
	}
	cl.mu.Unlock()

	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.c != nil && !slot.c.isClosed() {
		return slot.c, nil
	}
	var nc net.Conn
	var err error
	if cl.cfg.Dial != nil {
		dctx, cancel := context.WithTimeout(ctx, cl.cfg.DialTimeout)
		nc, err = cl.cfg.Dial(dctx, addr)
		cancel()
	} else {
		d := net.Dialer{Timeout: cl.cfg.DialTimeout}
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("remoting: dial %s: %w", addr, err)
	}
	if cl.cfg.TLS != nil {
		if nc, err = dialTLS(ctx, nc, addr, cl.cfg.TLS, cl.cfg.DialTimeout); err != nil {
			return nil, err
		}
	}
	cl.mu.Lock()
	if cl.mu.closed {
		cl.mu.Unlock()
		nc.Close()
		return nil, ErrClientClosed
	}
	c := newConn(nc, cl, cl.ctx, cl.log, cl.cfg.MaxFrameSize, 0)
	cl.wg.Add(2)
	cl.mu.Unlock()
	c.start(cl.wg.Done)
	slot.c = c
	return c, nil
}

// Invoke sends req to addr and waits for the response until ctx is done.
func (cl *Client) Invoke(ctx context.Context, addr string, req *Command) (*Command, error) {
	c, err := cl.Conn(ctx, addr)
	if err != nil {
		return nil, err
	}
	return c.Invoke(ctx, req)
}

// InvokeOneway sends req to addr with the oneway flag and does not wait.
func (cl *Client) InvokeOneway(ctx context.Context, addr string, req *Command) error {
	c, err := cl.Conn(ctx, addr)
	if err != nil {
		return err
	}
	return c.InvokeOneway(ctx, req)
}

// Close closes every conn and waits for their goroutines and running
// handlers. It must not be called from a Handler.
func (cl *Client) Close() error {
	cl.mu.Lock()
	if cl.mu.closed {
		cl.mu.Unlock()
		return nil
	}
	cl.mu.closed = true
	slots := cl.mu.slots
	cl.mu.slots = nil
	cl.mu.Unlock()
	cl.cancel()
	for _, s := range slots {
		s.mu.Lock()
		if s.c != nil {
			s.c.Close()
		}
		s.mu.Unlock()
	}
	cl.wg.Wait()
	return nil
}

func (cl *Client) dispatch(c *Conn, req *Command) {
	if cl.cfg.Handler == nil {
		cl.reply(c, req, NotSupported(req))
		return
	}
	select {
	case cl.sem <- struct{}{}:
	default:
		cl.reply(c, req, NewResponse(req, SystemBusy, "[REJECTREQUEST]system busy, client handlers full"))
		return
	}
	cl.wg.Add(1)
	go func() {
		defer cl.wg.Done()
		defer func() { <-cl.sem }()
		cl.reply(c, req, cl.cfg.Handler.ServeRemoting(c.ctx, c, req))
	}()
}

func (cl *Client) reply(c *Conn, req, resp *Command) {
	if err := c.Reply(req, resp); err != nil && !errors.Is(err, ErrConnClosed) {
		cl.log.Error("remoting: cannot encode response", "code", resp.Code, "err", err)
	}
}

func (cl *Client) connClosed(*Conn) {}

func (cl *Client) endReadBatch(*Conn) {}

func (cl *Client) readPaused(*Conn, *readBudget) {}

// requestHints: requests a server sends to a client (rare: transaction
// checks) keep the map and their own frame.
func (cl *Client) requestHints(RequestCode) (bool, bool) { return true, false }
