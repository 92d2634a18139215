package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/stratamq/stratamq/infra/tlsconf"
	"github.com/stratamq/stratamq/infra/tlsconf/tlstest"
	"github.com/stratamq/stratamq/remoting"
)

// rocketmq-client-go's WithTls sets UseTls on one configuration shared by
// every client of the process (remote.DefaultRemotingClientConfig), and
// its TLS skips certificate verification and presents no client
// certificate. So these tests switch it explicitly before each phase, run
// one phase at a time, never in parallel, and switch it off at the end; and
// since the setting reaches every client of the process, they never call
// t.Parallel: the parallel end-to-end tests start once they are done.
func setOfficialTLS(t *testing.T, on bool) {
	t.Helper()
	p, err := rocketmq.NewProducer(rmqproducer.WithTls(on), rmqproducer.WithInstanceName(uniqueName(t, "tlsflip")),
		rmqproducer.WithNsResolver(primitive.NewPassthroughResolver([]string{"127.0.0.1:1"})))
	if err != nil {
		t.Fatal(err)
	}
	_ = p // never started: only its option's side effect is wanted
}

// askTLS is ask over TLS (cfg nil: plain).
func askTLS(addr string, cfg *tls.Config, req *remoting.Command, d time.Duration) (*remoting.Command, bool) {
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second, TLS: cfg, Logger: slog.New(slog.DiscardHandler)})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := cl.Invoke(ctx, addr, req)
	return resp, err == nil && resp.Code == int32(remoting.Success)
}

func routeReq(topic string) *remoting.Command {
	return remoting.NewRequest(remoting.GetRouteinfoByTopic, map[string]string{"topic": topic}, nil)
}

// served reports whether both ports of s answer a client with cfg (nil:
// plain): the name server a route, the broker its runtime info.
func (s *testServe) served(cfg *tls.Config) (ns, broker bool) {
	_, ns = askTLS(s.nsAddr, cfg, routeReq("TBW102"), 2*time.Second)
	_, broker = askTLS(s.brokAddr, cfg, remoting.NewRequest(remoting.GetBrokerRuntimeInfo, nil, nil), 2*time.Second)
	return ns, broker
}

// startServeTLS is startServe for a server whose ports take TLS: it waits
// for the broker's registration through a client with cfg.
func startServeTLS(t *testing.T, extra map[string]string, cfg *tls.Config) *testServe {
	t.Helper()
	s := &testServe{t: t, dir: t.TempDir(), logs: &syncBuffer{}}
	s.nsAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s.brokAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s.env = map[string]string{"STRATAMQ_DATA_DIR": s.dir, "STRATAMQ_NAMESRV_LISTEN": s.nsAddr,
		"STRATAMQ_LISTEN": s.brokAddr, "STRATAMQ_HTTP_LISTEN": "127.0.0.1:0", "STRATAMQ_LOG_LEVEL": "info"}
	for k, v := range extra {
		s.env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.done = make(chan int, 1)
	go func() { s.done <- run(ctx, []string{"serve"}, s.env, io.Discard, s.logs) }()
	t.Cleanup(s.stop)
	waitFor(t, 15*time.Second, "broker registered with the TLS name server", func() bool {
		select {
		case code := <-s.done:
			s.done <- code
			t.Fatalf("serve exited early with %d:\n%s", code, s.logs.String())
		default:
		}
		resp, ok := askTLS(s.nsAddr, cfg, routeReq("TBW102"), time.Second)
		return ok && len(resp.Body) > 0
	})
	return s
}

// tlsProduceConsume sends n messages to topic with an official producer
// and waits until an official push consumer of a new group has them all.
func tlsProduceConsume(t *testing.T, ns, topic string, n int, opts ...rmqproducer.Option) *received {
	t.Helper()
	p := newClientProducer(t, ns, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		m := primitive.NewMessage(topic, []byte(fmt.Sprintf("tls-%d", i)))
		if res, err := p.SendSync(ctx, m); err != nil || res.Status != primitive.SendOK {
			t.Fatalf("SendSync %d: %v %v", i, res, err)
		}
	}
	r := newReceived()
	newPushConsumer(t, ns, uniqueName(t, "cg"), topic, rmqconsumer.MessageSelector{}, r, uniqueName(t, "c"))
	waitFor(t, 30*time.Second, fmt.Sprintf("%d messages consumed", n), func() bool { return r.distinct() >= n })
	return r
}

// TestTLSOfficialClientEnforcing (issue 14 item 3): with
// STRATAMQ_TLS_MODE=enforcing the official Go client with WithTls(true)
// produces and consumes through the TLS name server and broker (the
// broker registers over TLS too); a plain client is disconnected by both.
func TestTLSOfficialClientEnforcing(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	cli, err := tlsconf.Client(tlsconf.ClientOptions{CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setOfficialTLS(t, false) })
	s := startServeTLS(t, map[string]string{"STRATAMQ_TLS_CERT": f.Cert, "STRATAMQ_TLS_KEY": f.Key,
		"STRATAMQ_TLS_MODE": "enforcing", "STRATAMQ_TLS_CA": f.CA}, cli)

	setOfficialTLS(t, true)
	topic := uniqueName(t, "TlsTopic")
	tlsProduceConsume(t, s.nsAddr, topic, 20)

	if ns, br := s.served(cli); !ns || !br {
		t.Fatalf("a TLS client: name server served %v, broker %v", ns, br)
	}
	if ns, br := s.served(nil); ns || br {
		t.Fatalf("a plain client in enforcing mode: name server served %v, broker %v", ns, br)
	}
	waitFor(t, 5*time.Second, "the refusal logged", func() bool { return strings.Contains(s.logs.String(), "plain-text client refused") })

	// The tools: admin with STRATAMQ_TLS_CLIENT, bench with --tls; neither
	// gets through without.
	admin := func(env map[string]string) (int, string) {
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		code := run(ctx, []string{"admin", "clusterList", "-n", s.nsAddr, "--timeout", "2s"}, env, &stdout, &stderr)
		return code, stdout.String() + stderr.String()
	}
	if code, out := admin(map[string]string{"STRATAMQ_TLS_CLIENT": "true", "STRATAMQ_TLS_CA": f.CA}); code != 0 || !strings.Contains(out, s.brokAddr) {
		t.Fatalf("admin clusterList over TLS: exit %d:\n%s", code, out)
	}
	if code, out := admin(nil); code == 0 {
		t.Fatalf("admin clusterList without TLS succeeded:\n%s", out)
	}
	common := []string{"produce", "--namesrv", s.nsAddr, "--topic", topic, "--messages", "500", "--progress", "0", "--size", "100"}
	if r := runBenchCmd(t, 0, append(common, "--tls", "--tls-ca", f.CA)...); r.Messages != 500 || r.Errors != 0 {
		t.Fatalf("bench produce --tls: %+v", r)
	}
	if r := runBenchCmd(t, 0, append(common, "--tls", "--tls-insecure-skip-verify", "--conns", "2")...); r.Messages != 500 || r.Errors != 0 {
		t.Fatalf("bench produce --tls --tls-insecure-skip-verify: %+v", r)
	}
	var stdout, stderr bytes.Buffer
	bctx, bcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer bcancel()
	if code := run(bctx, append([]string{"bench"}, append(common, "--timeout", "2s", "--max-errors", "1")...), nil, &stdout, &stderr); code == 0 {
		t.Fatal("bench produce without --tls succeeded against an enforcing broker")
	}

	setOfficialTLS(t, false)
	p, err := rocketmq.NewProducer(rmqproducer.WithNsResolver(primitive.NewPassthroughResolver([]string{s.nsAddr})),
		rmqproducer.WithGroupName(uniqueName(t, "plain")), rmqproducer.WithInstanceName(uniqueName(t, "plain")), rmqproducer.WithRetry(0), rmqproducer.WithSendMsgTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte("plain"))); err == nil {
		t.Fatal("the official client without TLS sent to an enforcing broker")
	}
}

// TestTLSOfficialClientPermissive: in permissive mode one port serves the
// official client with TLS and without. The broker registers over TLS
// (STRATAMQ_TLS_CLIENT) without STRATAMQ_TLS_CA: it trusts its own
// certificate for its own name server.
func TestTLSOfficialClientPermissive(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	cli, err := tlsconf.Client(tlsconf.ClientOptions{CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setOfficialTLS(t, false) })
	s := startServeTLS(t, map[string]string{"STRATAMQ_TLS_CERT": f.Cert, "STRATAMQ_TLS_KEY": f.Key,
		"STRATAMQ_TLS_MODE": "permissive", "STRATAMQ_TLS_CLIENT": "true"}, cli)
	setOfficialTLS(t, true)
	tlsProduceConsume(t, s.nsAddr, uniqueName(t, "TlsTopic"), 10)
	setOfficialTLS(t, false)
	tlsProduceConsume(t, s.nsAddr, uniqueName(t, "PlainTopic"), 10)
	for _, cfg := range []*tls.Config{cli, nil} {
		if ns, br := s.served(cfg); !ns || !br {
			t.Fatalf("TLS %v in permissive mode: name server served %v, broker %v", cfg != nil, ns, br)
		}
	}
}

// TestTLSMutualAndHTTP: with STRATAMQ_TLS_CLIENT_CA a client must present
// a certificate the CA signed: ours with one is served, ours without one
// and the official client (which has no client certificate option) are
// refused; the broker registers with its own certificate. The HTTP port
// with STRATAMQ_HTTP_TLS serves HTTPS to a client without a certificate
// (health probes) and nothing over plain HTTP.
func TestTLSMutualAndHTTP(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	withCert, err := tlsconf.Client(tlsconf.ClientOptions{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := tlsconf.Client(tlsconf.ClientOptions{CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	t.Cleanup(func() { setOfficialTLS(t, false) })
	s := startServeTLS(t, map[string]string{"STRATAMQ_TLS_CERT": f.Cert, "STRATAMQ_TLS_KEY": f.Key,
		"STRATAMQ_TLS_CLIENT_CA": f.CA, "STRATAMQ_TLS_CA": f.CA, "STRATAMQ_HTTP_TLS": "true",
		"STRATAMQ_HTTP_LISTEN": httpAddr}, withCert)
	if ns, br := s.served(withCert); !ns || !br {
		t.Fatalf("a client with a certificate: name server served %v, broker %v", ns, br)
	}
	if ns, br := s.served(noCert); ns || br {
		t.Fatalf("a client without a certificate: name server served %v, broker %v", ns, br)
	}
	setOfficialTLS(t, true)
	p, err := rocketmq.NewProducer(rmqproducer.WithNsResolver(primitive.NewPassthroughResolver([]string{s.nsAddr})),
		rmqproducer.WithGroupName(uniqueName(t, "nocert")), rmqproducer.WithInstanceName(uniqueName(t, "nocert")), rmqproducer.WithRetry(0), rmqproducer.WithSendMsgTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.SendSync(ctx, primitive.NewMessage(uniqueName(t, "T"), []byte("x"))); err == nil {
		t.Fatal("the official client without a certificate sent under mutual TLS")
	}

	pem, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get("https://" + httpAddr + "/healthz")
	if err != nil {
		t.Fatalf("GET https /healthz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("ok")) {
		t.Fatalf("https /healthz: %d %q", resp.StatusCode, body)
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://" + httpAddr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served on the TLS HTTP port")
		}
	}
}

// TestFirstHourTLSBadSettings: a bad TLS setting is a one-line error
// naming its variable, before any port opens (serve and namesrv).
func TestFirstHourTLSBadSettings(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	hold := func() (string, func()) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln.Addr().String(), func() { ln.Close() }
	}
	nsAddr, closeNS := hold()
	defer closeNS()
	brAddr, closeBr := hold()
	defer closeBr()
	missing := f.Cert + ".missing"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"mode", map[string]string{"STRATAMQ_TLS_MODE": "strict"}, `STRATAMQ_TLS_MODE="strict"`},
		{"mode without cert", map[string]string{"STRATAMQ_TLS_MODE": "enforcing"}, "STRATAMQ_TLS_MODE=enforcing needs STRATAMQ_TLS_CERT"},
		{"cert without key", map[string]string{"STRATAMQ_TLS_CERT": f.Cert}, "STRATAMQ_TLS_CERT and STRATAMQ_TLS_KEY"},
		{"missing cert", map[string]string{"STRATAMQ_TLS_CERT": missing, "STRATAMQ_TLS_KEY": f.Key}, `STRATAMQ_TLS_CERT="` + missing},
		{"key of another cert", map[string]string{"STRATAMQ_TLS_CERT": f.Cert, "STRATAMQ_TLS_KEY": f.ClientKey}, "STRATAMQ_TLS_KEY="},
		{"client CA not PEM", map[string]string{"STRATAMQ_TLS_CERT": f.Cert, "STRATAMQ_TLS_KEY": f.Key, "STRATAMQ_TLS_CLIENT_CA": f.Key}, "STRATAMQ_TLS_CLIENT_CA="},
		{"client CA without TLS", map[string]string{"STRATAMQ_TLS_CERT": f.Cert, "STRATAMQ_TLS_KEY": f.Key, "STRATAMQ_TLS_MODE": "disabled", "STRATAMQ_TLS_CLIENT_CA": f.CA}, "STRATAMQ_TLS_CLIENT_CA is set but"},
		{"HTTP TLS without cert", map[string]string{"STRATAMQ_HTTP_TLS": "true"}, "STRATAMQ_HTTP_TLS needs STRATAMQ_TLS_CERT"},
		{"CA missing", map[string]string{"STRATAMQ_TLS_CLIENT": "true", "STRATAMQ_TLS_CA": missing}, "STRATAMQ_TLS_CA="},
	} {
		for _, cmd := range []string{"serve", "namesrv"} {
			if cmd == "namesrv" && tc.name == "CA missing" {
				continue // a name server dials nothing
			}
			t.Run(tc.name+"/"+cmd, func(t *testing.T) {
				env := map[string]string{"STRATAMQ_NAMESRV_LISTEN": nsAddr, "STRATAMQ_LISTEN": brAddr,
					"STRATAMQ_HTTP_LISTEN": "127.0.0.1:0", "STRATAMQ_DATA_DIR": t.TempDir()}
				for k, v := range tc.env {
					env[k] = v
				}
				var stdout, stderr bytes.Buffer
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				code := run(ctx, []string{cmd}, env, &stdout, &stderr)
				out := strings.TrimSpace(stderr.String())
				if code == 0 || strings.Count(out, "\n") > 0 || !strings.Contains(out, tc.want) {
					t.Fatalf("exit %d, stderr:\n%s\nwant a non-zero exit and one line naming %s", code, out, tc.want)
				}
				if strings.Contains(out, "listening") || strings.Contains(out, "address already in use") {
					t.Fatalf("it listened before checking: %s", out)
				}
			})
		}
	}
}
