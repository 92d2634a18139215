package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
)

// Defaults of Config's limits.
const (
	DefaultMaxConcurrentStreams = 1024
	// DefaultMaxRecvMsgSize is added to the broker's largest message: room
	// for the properties and the protobuf framing of one message.
	DefaultRecvOverhead   = 1 << 20
	DefaultMaxSendMsgSize = 64 << 20
	DefaultKeepaliveMin   = 10 * time.Second
	DefaultTelemetryQueue = 64
	// DefaultMaxHeaderListSize bounds a request's headers (the clients
	// send well under 2 KiB); grpc-go's own default is 16 MiB.
	DefaultMaxHeaderListSize = 16 << 10
	// DefaultHandshakeTimeout: a connection must finish its TLS and
	// HTTP/2 handshake within it.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultIdleTimeout: a connection with no RPC for this long is sent
	// GOAWAY and closed (a client's Telemetry stream keeps it busy).
	DefaultIdleTimeout = 120 * time.Second
	// DefaultSendTimeout: a response message a client does not take
	// within it closes its connection.
	DefaultSendTimeout = 30 * time.Second
	// DefaultReceiveMemory bounds the inflated bodies of stored compressed
	// messages that receives hold at once, all together.
	DefaultReceiveMemory = 128 << 20
)

// Config is a Server's configuration.
type Config struct {
	Addr string // listen address, e.g. ":8081"
	// Backend returns the broker generation serving now; nil while none is
	// (the RPC then answers UNAVAILABLE). HA role changes swap it.
	Backend func() Backend
	// Advertise is the host:port QueryRoute hands clients that name no
	// endpoints of their own; default: the broker's advertised host (its
	// STRATAMQ_ADVERTISE_ADDR, or first non-loopback IP) with this port.
	Advertise string
	Logger    *slog.Logger
	// TLS and TLSMode: the broker port's TLS (permissive: TLS and plain
	// clients on the same port, told apart by the first byte). "h2" is
	// added to the ALPN protocols.
	TLS     *tls.Config
	TLSMode remoting.TLSMode
	// Limits (zero: the defaults above). MaxRecvMsgSize defaults to the
	// backend's MaxMessageSize at New plus DefaultRecvOverhead.
	MaxConcurrentStreams uint32 // per connection
	// MaxConns and MaxConnsPerIP cap the connections held, in total and
	// from one remote IP (the remoting port's STRATAMQ_MAX_CONNECTIONS
	// and STRATAMQ_MAX_CONNECTIONS_PER_IP); one more is closed at accept
	// and counted by OnRefuse ("total" or "per_ip").
	MaxConns      int
	MaxConnsPerIP int
	OnRefuse      func(limit string)
	// MaxRecvMsgSize bounds a request message; it also bounds what the
	// bodies of one SendMessage may take once gzip bodies are inflated.
	MaxRecvMsgSize    int
	MaxHeaderListSize uint32        // a request's headers, bytes
	KeepaliveMinTime  time.Duration // clients pinging more often are closed (ENHANCE_YOUR_CALM)
	HandshakeTimeout  time.Duration // TLS and HTTP/2 handshake of a new connection
	IdleTimeout       time.Duration // a connection without RPCs is closed after it
	// SendTimeout: a response message (ReceiveMessage) that the client
	// does not take within it closes the client's connection, which
	// frees what was queued for it.
	SendTimeout time.Duration
	// ReceiveMemory bounds, in all, the inflated bodies receives hold
	// (stored compressed messages being sent, counted twice: the body and
	// its encoded copy); a receive waits for room.
	ReceiveMemory int64
	// Metrics, when set, counts requests and messages.
	Metrics Metrics
	// AutoRenewInvisible is the invisible time of a receive that asks for
	// none (a PushConsumer's, auto_renew), and of each renewal of its
	// handles (renew.go); zero: DefaultInvisible.
	AutoRenewInvisible time.Duration
}

// Metrics is what the server reports; broker.Metrics implements it
// (broker/grpc_metrics.go).
type Metrics interface {
	GRPCRequest(method, code string)
	GRPCMessagesIn(topic string, n, bytes int)
}

// Server is the gRPC endpoint. New binds, Serve serves, Stop ends.
type Server struct {
	cfg  Config
	log  *slog.Logger
	ln   net.Listener
	grpc *grpc.Server
	svc  *service
	// conns caps and knows the connections (limit.go); recvMem is the
	// budget of inflated bodies receives hold (rpc_receive.go).
	conns   *limitListener
	recvMem *byteBudget

	stopOnce sync.Once

	warnMu sync.Mutex
	warned map[string]time.Time // warnEvery's last warning per kind
}

// warnEvery logs a warning of kind at most once a second.
func (s *Server) warnEvery(kind, msg string, args ...any) {
	s.warnMu.Lock()
	now := time.Now()
	if now.Sub(s.warned[kind]) < time.Second {
		s.warnMu.Unlock()
		return
	}
	if s.warned == nil {
		s.warned = map[string]time.Time{}
	}
	s.warned[kind] = now
	s.warnMu.Unlock()
	s.log.Warn("grpc: "+msg, args...)
}

// ReceiveMemory is the inflated body bytes receives hold now.
func (s *Server) ReceiveMemory() int64 { return s.recvMem.inUse() }

// New binds the listener and builds the server; it starts nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Backend == nil {
		return nil, errors.New("proxy: Config.Backend is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if cfg.MaxRecvMsgSize == 0 {
		max := 4 << 20
		if b := cfg.Backend(); b != nil {
			max = b.MaxMessageSize()
		}
		cfg.MaxRecvMsgSize = max + DefaultRecvOverhead
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxConnsPerIP == 0 {
		cfg.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	if cfg.MaxHeaderListSize == 0 {
		cfg.MaxHeaderListSize = DefaultMaxHeaderListSize
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = DefaultSendTimeout
	}
	if cfg.ReceiveMemory <= 0 {
		cfg.ReceiveMemory = DefaultReceiveMemory
	}
	// One message of the largest inflated size always fits.
	cfg.ReceiveMemory = max(cfg.ReceiveMemory, 2*maxInflate)
	if cfg.KeepaliveMinTime == 0 {
		cfg.KeepaliveMinTime = DefaultKeepaliveMin
	}
	if cfg.AutoRenewInvisible <= 0 {
		cfg.AutoRenewInvisible = DefaultInvisible
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("STRATAMQ_GRPC_LISTEN=%q: %w", cfg.Addr, err)
	}
	log := cfg.Logger.With("component", "grpc")
	limited := newLimitListener(ln, cfg.MaxConns, cfg.MaxConnsPerIP, cfg.OnRefuse, log)
	ln = limited
	if cfg.TLS != nil && cfg.TLSMode != remoting.TLSDisabled {
		t := cfg.TLS.Clone()
		t.NextProtos = append([]string{"h2"}, t.NextProtos...)
		ln = remoting.TLSListener(ln, t, cfg.TLSMode, cfg.HandshakeTimeout)
	}
	s := &Server{cfg: cfg, log: log, ln: ln, conns: limited, recvMem: newByteBudget(cfg.ReceiveMemory)}
	s.svc = newService(s)
	s.grpc = grpc.NewServer(
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize),
		grpc.MaxSendMsgSize(DefaultMaxSendMsgSize),
		grpc.MaxHeaderListSize(cfg.MaxHeaderListSize),
		grpc.ConnectionTimeout(cfg.HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 60 * time.Second, Timeout: 20 * time.Second,
			MaxConnectionIdle: cfg.IdleTimeout}),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
	)
	apiv2.RegisterMessagingServiceServer(s.grpc, s.svc)
	return s, nil
}

// Conns is the number of connections the endpoint holds.
func (s *Server) Conns() int { return s.conns.open() }

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Stop (or ctx ends, which stops the server). It
// returns nil after a Stop.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.Stop(5 * time.Second) })
	defer stop()
	// The renewer of auto_renew handles runs until the server stops.
	rctx, rcancel := context.WithCancel(ctx)
	renewDone := make(chan struct{})
	go func() { defer close(renewDone); s.svc.renew.run(rctx) }()
	go func() {
		select {
		case <-s.svc.done:
			rcancel()
		case <-rctx.Done():
		}
	}()
	defer func() { rcancel(); <-renewDone }()
	s.log.Info("gRPC (RocketMQ 5 proxy protocol) listening", "addr", s.ln.Addr().String())
	err := s.grpc.Serve(s.ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop ends the server: streams (Telemetry, long polls) are told to end,
// in-flight unary calls get until timeout, then everything is closed.
func (s *Server) Stop(timeout time.Duration) {
	s.stopOnce.Do(func() {
		s.svc.shutdown()
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			s.grpc.Stop()
			<-done
		}
	})
}

// backend is the broker generation serving now.
func (s *Server) backend() (Backend, error) {
	b := s.cfg.Backend()
	if b == nil {
		return nil, bad(apiv2.Code_INTERNAL_SERVER_ERROR, "the broker is starting or changing role; retry")
	}
	return b, nil
}
