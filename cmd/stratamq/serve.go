package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/namesrv"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/bucketurl"
)

// serve runs the name server and/or the broker until ctx ends, then shuts
// them down in order: broker first (it unregisters from the name server),
// then the name server, then the HTTP endpoint.
func serve(ctx context.Context, cfg Config, log *slog.Logger, withNamesrv, withBroker bool) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var ready readiness

	metrics := broker.NewMetrics(reg)
	nsErr := make(chan error, 2)
	if withNamesrv {
		ns := namesrv.New(namesrv.Config{Logger: log})
		nsServer := remoting.NewServer(remoting.ServerConfig{
			Addr: cfg.NamesrvListen, Logger: log.With("component", "namesrv"), OnClose: ns.OnConnClose,
			MaxReadMemory: int64(cfg.MaxReadMemory), FrameTimeout: cfg.FrameTimeout,
			MaxConns: cfg.MaxConnections, MaxConnsPerIP: cfg.MaxConnectionsPerIP,
			OnRefuse: metrics.ConnRefused("namesrv"),
		}, ns)
		metrics.WatchServer("namesrv", nsServer)
		if err := nsServer.Listen(); err != nil {
			return fmt.Errorf("name server: listen %s: %w", cfg.NamesrvListen, err)
		}
		log.Info("name server listening", "addr", nsServer.Addr().String())
		if cfg.Namesrv == "" {
			cfg.Namesrv = loopbackFor(nsServer.Addr())
		}
		// The name server outlives the broker: it is stopped last so the
		// broker can unregister.
		nsCtx, nsCancel := context.WithCancel(context.WithoutCancel(ctx))
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); nsErr <- ns.Run(nsCtx) }()
		go func() { defer wg.Done(); nsErr <- nsServer.Serve(nsCtx) }()
		defer func() {
			sctx, sc := context.WithTimeout(context.Background(), 5*time.Second)
			defer sc()
			_ = nsServer.Shutdown(sctx)
			nsCancel()
			wg.Wait()
		}()
	}

	brokerDone := make(chan error, 1)
	var routes []httpRoute // admin_http.go: GET /ha with a broker
	if withBroker {
		bucket, err := openBucket(ctx, cfg)
		if err != nil {
			return err
		}
		defer bucket.Close()
		tuneGC(int64(cfg.CacheSize), log)
		// A Node runs the broker through its HA role changes (one
		// generation without STRATAMQ_HA_FAILOVER); ready once the first
		// one is open.
		opened := make(chan struct{})
		var once sync.Once
		node := broker.NewNode(cfg.Config, broker.Deps{Logger: log, Metrics: metrics, Bucket: bucket, Registerer: reg},
			func(*broker.Broker) { once.Do(func() { close(opened) }) })
		go func() { brokerDone <- node.Run(ctx) }()
		select {
		case <-opened:
		case err := <-brokerDone:
			return err
		}
		routes = append(routes, haRoute(node.Broker))
	}
	ready.set()

	if cfg.HTTPListen != "" {
		stopHTTP := serveHTTP(cfg.HTTPListen, reg, &ready, cfg.Pprof, log, routes...)
		defer stopHTTP()
	}

	var err error
	select {
	case <-ctx.Done():
		if withBroker {
			err = <-brokerDone // Run returns after its graceful shutdown
		}
	case err = <-brokerDone:
	case err = <-nsErr:
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// openBucket opens STRATAMQ_BUCKET, by default a directory under the data
// dir. The bucket is created when missing.
func openBucket(ctx context.Context, cfg Config) (tier.Bucket, error) {
	raw := cfg.Bucket
	if raw == "" {
		dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "bucket"))
		if err != nil {
			return nil, err
		}
		raw = "file://" + dir
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := bucketurl.Open(octx, raw, bucketurl.Options{})
	if err != nil {
		return nil, fmt.Errorf("STRATAMQ_BUCKET: %w", err)
	}
	return b, nil
}

// serveHTTP serves /metrics, /healthz, /readyz and routes; it returns the
// stop func.
func serveHTTP(addr string, reg *prometheus.Registry, ready *readiness, withPprof bool, log *slog.Logger, routes ...httpRoute) func() {
	mux := http.NewServeMux()
	for _, r := range routes {
		mux.Handle(r.path, r.h)
	}
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !ready.get() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn("metrics/health endpoint disabled", "addr", addr, "err", err)
		return func() {}
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("metrics and health listening", "addr", ln.Addr().String())
	return func() {
		sctx, sc := context.WithTimeout(context.Background(), 2*time.Second)
		defer sc()
		_ = srv.Shutdown(sctx)
	}
}

type readiness struct {
	mu sync.Mutex
	ok bool
}

func (r *readiness) set() { r.mu.Lock(); r.ok = true; r.mu.Unlock() }
func (r *readiness) get() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok
}

// loopbackFor turns a bound wildcard address into one the broker can dial.
func loopbackFor(a net.Addr) string {
	t, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if t.IP == nil || t.IP.IsUnspecified() {
		return fmt.Sprintf("127.0.0.1:%d", t.Port)
	}
	return t.String()
}
