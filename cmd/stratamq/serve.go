package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/console"
	"github.com/stratamq/stratamq/console/history"
	"github.com/stratamq/stratamq/infra/sysmon"
	"github.com/stratamq/stratamq/namesrv"
	"github.com/stratamq/stratamq/proxy"
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

	// Everything that can be checked before a port opens is: the data
	// dir (its own error, not the bucket's), the metrics port (taken is
	// an error unless STRATAMQ_HTTP_LISTEN is set empty).
	// The bucket is opened (and made, when missing) before any port opens
	// too: a bad URL, wrong credentials or a missing bucket stop the start
	// with nothing listening.
	tlsm, tlsErr := cfg.TLSSettings.load(true) // checked by checkConfig: files read again here
	if tlsErr != nil {
		return tlsErr
	}
	aclx, aclStop, aclErr := openACL(ctx, cfg, log, withBroker) // acl.go; nil without STRATAMQ_ACL_FILE
	if aclErr != nil {
		return aclErr
	}
	defer aclStop()
	cfg.ACL = aclx
	bucketURL := ""
	var bucket tier.Bucket
	if withBroker {
		if err := checkDataDir(cfg.DataDir); err != nil {
			return err
		}
		var note string
		bucketURL, note = resolveBucket(cfg)
		if note != "" {
			log.Warn(note)
		}
		b, err := openBucket(ctx, bucketURL)
		if err != nil {
			return err
		}
		bucket = b
		defer bucket.Close()
	}
	var httpLn net.Listener
	if cfg.HTTPListen != "" {
		ln, err := net.Listen("tcp", cfg.HTTPListen)
		if err != nil {
			return fmt.Errorf("STRATAMQ_HTTP_LISTEN=%q (metrics and health): %w; set it empty (STRATAMQ_HTTP_LISTEN= or --http-listen=) to run without those endpoints", cfg.HTTPListen, err)
		}
		httpLn = ln
		if tlsm.http != nil {
			httpLn = tls.NewListener(ln, tlsm.http)
		}
	}
	startupLog(log, cfg, bucketURL, withNamesrv, withBroker)
	listens := map[string]string{"STRATAMQ_HTTP_LISTEN": cfg.HTTPListen}
	if withNamesrv {
		listens["STRATAMQ_NAMESRV_LISTEN"] = cfg.NamesrvListen
	}
	if withBroker {
		listens["STRATAMQ_LISTEN"], listens["STRATAMQ_HA_LISTEN"] = cfg.Listen, cfg.HAListen
		listens["STRATAMQ_GRPC_LISTEN"] = cfg.GRPCListen
	}
	warnOpenWithoutACL(log, aclFileSetting(cfg), listens)

	metrics := broker.NewMetrics(reg)
	nsErr := make(chan error, 2)
	var nsNode atomic.Pointer[broker.Node] // the broker whose users the name server checks
	if withNamesrv {
		ns := namesrv.New(namesrv.Config{Logger: log, ACL: aclx, Users: namesrvUsers(cfg, aclx != nil, log, nsNode.Load)})
		nsServer := remoting.NewServer(remoting.ServerConfig{
			Addr: cfg.NamesrvListen, Logger: log.With("component", "namesrv"), OnClose: ns.OnConnClose,
			MaxReadMemory: int64(cfg.MaxReadMemory), FrameTimeout: cfg.FrameTimeout,
			MaxConns: cfg.MaxConnections, MaxConnsPerIP: cfg.MaxConnectionsPerIP,
			OnRefuse: metrics.ConnRefused("namesrv"),
			TLS:      tlsm.server, TLSMode: tlsm.mode,
		}, ns)
		metrics.WatchServer("namesrv", nsServer)
		if err := nsServer.Listen(); err != nil {
			return fmt.Errorf("name server: listen %s: %w", cfg.NamesrvListen, err)
		}
		log.Info("name server listening", "addr", nsServer.Addr().String(), "tls", tlsm.mode.String())
		if cfg.Namesrv == "" {
			cfg.Namesrv = loopbackFor(nsServer.Addr())
		}
		if nss := cfg.NameServers(); withBroker && (slices.Contains(nss, loopbackFor(nsServer.Addr())) || slices.Contains(nss, cfg.NamesrvListen)) {
			// Route answers wait (each up to 5 s) until the local broker
			// has registered here, so a client started the moment this
			// port opens gets its route instead of "topic not exist".
			release := ns.HoldRoutes(cfg.BrokerName, routeHoldMax, routeHoldWindow)
			defer release()
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
	var routes []httpRoute // admin_http.go: GET /ha with a broker; the console at /
	if withBroker {
		tuneGC(int64(cfg.CacheSize), log)
		// A Node runs the broker through its HA role changes (one
		// generation without STRATAMQ_HA_FAILOVER); ready once the first
		// one is open.
		opened := make(chan struct{})
		var once sync.Once
		// The gRPC endpoint (RocketMQ 5 clients) serves whichever broker
		// generation runs now; it binds before the broker starts.
		var nodeRef atomic.Pointer[broker.Node]
		grpcSrv, err := startGRPC(ctx, cfg, log, tlsm, metrics, nodeRef.Load)
		if err != nil {
			return err
		}
		deps := broker.Deps{Logger: log, Metrics: metrics, Bucket: bucket, Registerer: reg, TLS: tlsm.brokerTLS()}
		if grpcSrv != nil {
			deps.GRPC = broker.GRPCDeps{CheckTransaction: grpcSrv.CheckTransaction}
			defer grpcSrv.Stop(5 * time.Second)
		}
		if testHookBeforeBroker != nil {
			testHookBeforeBroker()
		}
		node := broker.NewNode(cfg.Config, deps, func(*broker.Broker) { once.Do(func() { close(opened) }) })
		nodeRef.Store(node)
		nsNode.Store(node)
		go func() { brokerDone <- node.Run(ctx) }()
		select {
		case <-opened:
		case err := <-brokerDone:
			return err
		}
		// The web console (package console) at /: pages of the running
		// generation, its actions, and charts of the broker's own metric
		// history (package history, kept for the process's life).
		prices, err := parsePrices(cfg.ConsolePrices)
		if err != nil {
			return err
		}
		hist := history.New(history.Config{Gatherer: reg, Families: console.HistoryFamilies, Step: cfg.ConsoleHistoryStep})
		go hist.Run(ctx)
		routes = append(routes, haRoute(node.Broker), httpRoute{"/", console.New(console.Config{Version: version, Logger: log,
			Hosts: consoleHosts(cfg), Write: cfg.ConsoleWrite, SessionTTL: cfg.ConsoleSessionTTL, History: hist, Prices: prices,
			Broker: func() console.Broker {
				if b := node.Broker(); b != nil {
					return b
				}
				return nil
			}})})
		ready.setCheck(func(ctx context.Context) error {
			b := node.Broker()
			if b == nil {
				return errors.New("the broker is between HA roles")
			}
			return b.Ready(ctx) // lease held, registered, routed by a name server
		})
	}
	ready.set()

	if httpLn != nil {
		stopHTTP := serveHTTP(httpLn, reg, &ready, cfg.Pprof, log, routes...)
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

// resolveBucket is the bucket URL to open: STRATAMQ_BUCKET, else a
// directory beside the data dir (<data dir>-bucket), so that deleting the
// data dir does not delete the system of record. A data dir that still
// holds the bucket of the old default (<data dir>/bucket) keeps it, with
// a warning (note): switching to an empty bucket would lose its history.
func resolveBucket(cfg Config) (url, note string) {
	if cfg.Bucket != "" {
		return cfg.Bucket, ""
	}
	data, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		data = filepath.Clean(cfg.DataDir)
	}
	old := filepath.Join(data, "bucket")
	if ents, err := os.ReadDir(old); err == nil && len(ents) > 0 {
		return "file://" + old, fmt.Sprintf("the bucket is inside the data dir (%s, the old default): deleting the data dir deletes it too; "+
			"move it beside the data dir (%s-bucket) or set STRATAMQ_BUCKET", old, data)
	}
	return "file://" + data + "-bucket", ""
}

// checkDataDir makes the data dir and checks that it is writable, so a
// permission problem is reported as STRATAMQ_DATA_DIR's, at once.
func checkDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("STRATAMQ_DATA_DIR=%q: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".writable-*")
	if err != nil {
		return fmt.Errorf("STRATAMQ_DATA_DIR=%q is not writable: %w", dir, err)
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	return nil
}

// startupLog says where everything is: the data dir, the bucket (its URL
// redacted), the role and the ports.
func startupLog(log *slog.Logger, cfg Config, bucketURL string, withNamesrv, withBroker bool) {
	attrs := []any{"version", version}
	if withNamesrv {
		attrs = append(attrs, "namesrvListen", cfg.NamesrvListen)
	}
	if withBroker {
		data, _ := filepath.Abs(cfg.DataDir)
		role := string(cfg.Role)
		if cfg.HAFailover {
			role += " (failover)"
		}
		attrs = append(attrs, "dataDir", data, "bucket", bucketurl.Redacted(bucketURL), "role", role,
			"cluster", cfg.Cluster, "brokerName", cfg.BrokerName, "listen", cfg.Listen, "haListen", cfg.HAListen, "flush", cfg.Flush)
	}
	attrs = append(attrs, "httpListen", cfg.HTTPListen,
		"gomaxprocs", runtime.GOMAXPROCS(0), "sysmon", sysmon.Mode(os.Getenv("GODEBUG")))
	log.Info("stratamq starting", attrs...)
}

// openBucket opens the bucket URL resolveBucket chose; a file:// bucket's
// directory is created when missing.
func openBucket(ctx context.Context, raw string) (tier.Bucket, error) {
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
func serveHTTP(ln net.Listener, reg *prometheus.Registry, ready *readiness, withPprof bool, log *slog.Logger, routes ...httpRoute) func() {
	mux := http.NewServeMux()
	for _, r := range routes {
		mux.Handle(r.path, r.h)
	}
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprofStreaming(pprof.Profile))
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprofStreaming(pprof.Trace))
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !ready.get() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		if err := ready.checkNow(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := newHTTPServer(mux, defaultHTTPTimeouts)
	go func() { _ = srv.Serve(ln) }()
	log.Info("metrics and health listening", "addr", ln.Addr().String())
	return func() {
		sctx, sc := context.WithTimeout(context.Background(), 2*time.Second)
		defer sc()
		_ = srv.Shutdown(sctx)
	}
}

// readiness is /readyz's answer: 503 until set (the ports are open), then
// whatever check says on each request (the broker's Ready: lease held,
// registered, routed), so 200 is a promise that clients can start.
type readiness struct {
	mu    sync.Mutex
	ok    bool
	check func(context.Context) error
}

func (r *readiness) set() { r.mu.Lock(); r.ok = true; r.mu.Unlock() }
func (r *readiness) get() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok
}

// setCheck makes every /readyz after set also ask check.
func (r *readiness) setCheck(check func(context.Context) error) {
	r.mu.Lock()
	r.check = check
	r.mu.Unlock()
}

// checkNow runs the check (nil without one).
func (r *readiness) checkNow(ctx context.Context) error {
	r.mu.Lock()
	check := r.check
	r.mu.Unlock()
	if check == nil {
		return nil
	}
	return check(ctx)
}

// How long serve's name server holds route answers for its broker's
// first registration: each answer at most routeHoldMax (under client-go's
// 6 s route timeout), and none once routeHoldWindow has passed since the
// start (a broker that takes longer, restoring a large bucket, is not
// waited for by every query).
var (
	routeHoldMax    = 5 * time.Second
	routeHoldWindow = 2 * time.Minute
)

// testHookBeforeBroker, set by tests, runs once the name server serves
// and before the broker opens: a broker that registers late.
var testHookBeforeBroker func()

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

// startGRPC binds STRATAMQ_GRPC_LISTEN (nil server when it is empty, or
// taken: logged) and serves the RocketMQ 5 gRPC protocol until ctx ends or
// Stop; node is read on each call, once it is set.
func startGRPC(ctx context.Context, cfg Config, log *slog.Logger, tlsm tlsMaterial, metrics *broker.Metrics, node func() *broker.Node) (*proxy.Server, error) {
	if cfg.GRPCListen == "" {
		return nil, nil
	}
	srv, err := proxy.New(proxy.Config{
		Addr: cfg.GRPCListen, Logger: log, TLS: tlsm.server, TLSMode: tlsm.mode, Metrics: metrics,
		MaxRecvMsgSize: int(cfg.MaxMessageSize) + proxy.DefaultRecvOverhead,
		// The remoting port's connection caps, counted for this port apart.
		MaxConns: cfg.MaxConnections, MaxConnsPerIP: cfg.MaxConnectionsPerIP, OnRefuse: metrics.ConnRefused("grpc"),
		Backend: func() proxy.Backend {
			if n := node(); n != nil {
				if b := n.Broker(); b != nil {
					return b
				}
			}
			return nil
		},
	})
	if err != nil {
		// The gRPC endpoint is an addition to the remoting port the
		// broker lives on: a taken port is said loudly, not fatal.
		log.Warn("the gRPC endpoint (RocketMQ 5 clients) is not running: its port cannot be bound; set STRATAMQ_GRPC_LISTEN to a free address, or empty to turn it off",
			"err", err)
		return nil, nil
	}
	go func() {
		if err := srv.Serve(ctx); err != nil {
			log.Error("gRPC endpoint stopped", "err", err)
		}
	}()
	return srv, nil
}

// parsePrices parses STRATAMQ_CONSOLE_PRICES ("put=0.005,get=0.0004":
// dollars per 1,000 requests; either may be left out).
func parsePrices(s string) (console.Prices, error) {
	p := console.DefaultPrices
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || err != nil || f < 0 {
			return p, fmt.Errorf("STRATAMQ_CONSOLE_PRICES: %q: want put=<dollars per 1,000 PUTs>,get=<dollars per 1,000 GETs>", kv)
		}
		switch strings.TrimSpace(k) {
		case "put":
			p.PutPer1000 = f
		case "get":
			p.GetPer1000 = f
		default:
			return p, fmt.Errorf("STRATAMQ_CONSOLE_PRICES: %q: the prices are put and get", kv)
		}
	}
	return p, nil
}

// consoleHosts are the host names the web console answers to besides IP
// addresses and localhost: STRATAMQ_HTTP_HOSTS, this machine's host name,
// and the hosts of STRATAMQ_ADVERTISE_ADDR and STRATAMQ_HTTP_LISTEN when
// they are names.
func consoleHosts(cfg Config) []string {
	var out []string
	for _, h := range strings.Split(cfg.HTTPHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		out = append(out, h)
	}
	for _, addr := range []string{cfg.AdvertiseAddr, cfg.HTTPListen} {
		if h, _, err := net.SplitHostPort(addr); err == nil && h != "" {
			out = append(out, h)
		}
	}
	return out
}
