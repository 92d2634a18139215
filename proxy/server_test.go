package proxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/infra/tlsconf"
	"github.com/stratamq/stratamq/infra/tlsconf/tlstest"
	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
)

// TestGRPCMetricsCountTraffic: gRPC calls are counted by method and
// status, and messages stored through gRPC count in the broker's
// rocketmq_messages_in_total and in stratamq_grpc_messages_in_total.
func TestGRPCMetricsCountTraffic(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := startEnv(t, envOpts{metrics: broker.NewMetrics(reg)})
	for i := range 3 {
		m := textMsg("MetricTopic", "01M"+string(rune('A'+i)), "body")
		resp, err := e.cli.SendMessage(callCtx(t, "c"), &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
		if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK {
			t.Fatal(resp, err)
		}
	}
	e.cli.SendMessage(callCtx(t, "c"), &apiv2.SendMessageRequest{}) // BAD_REQUEST
	count := func(name string, labels ...string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.GetMetric() {
				for i := 0; i < len(labels); i += 2 {
					found := false
					for _, lp := range m.GetLabel() {
						if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
							found = true
						}
					}
					if !found {
						continue next
					}
				}
				return m.GetCounter().GetValue()
			}
		}
		return 0
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"stratamq_grpc_requests_total", []string{"method", "SendMessage", "code", "OK"}, 3},
		{"stratamq_grpc_requests_total", []string{"method", "SendMessage", "code", "BAD_REQUEST"}, 1},
		{"stratamq_grpc_messages_in_total", []string{"topic", "MetricTopic"}, 3},
		{"rocketmq_messages_in_total", []string{"topic", "MetricTopic"}, 3},
	} {
		if got := count(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// TestGRPCTLSModes: with the broker's TLS in permissive mode the endpoint
// serves TLS clients (ALPN h2) and plain ones on the same port; enforcing
// refuses plain ones.
func TestGRPCTLSModes(t *testing.T) {
	files := tlstest.Write(t, t.TempDir())
	srvTLS, err := tlsconf.Server(tlsconf.ServerOptions{CertFile: files.Cert, KeyFile: files.Key})
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tlsDial := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}))
	ok := func(e *env, opt grpc.DialOption) error {
		c, err := grpc.NewClient(e.srv.Addr().String(), opt)
		if err != nil {
			return err
		}
		defer c.Close()
		resp, err := apiv2.NewMessagingServiceClient(c).QueryRoute(callCtx(t, "tls"), &apiv2.QueryRouteRequest{Topic: res("TLSTopic")})
		if err == nil && resp.GetStatus().GetCode() != apiv2.Code_OK {
			t.Fatalf("status %v", resp.GetStatus())
		}
		return err
	}
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	perm := startEnv(t, envOpts{proxy: func(c *proxy.Config) { c.TLS, c.TLSMode = srvTLS, remoting.TLSPermissive }})
	if err := ok(perm, tlsDial); err != nil {
		t.Errorf("permissive, TLS client: %v", err)
	}
	if err := ok(perm, plain); err != nil {
		t.Errorf("permissive, plain client: %v", err)
	}
	enf := startEnv(t, envOpts{proxy: func(c *proxy.Config) { c.TLS, c.TLSMode = srvTLS, remoting.TLSEnforcing }})
	if err := ok(enf, tlsDial); err != nil {
		t.Errorf("enforcing, TLS client: %v", err)
	}
	if err := ok(enf, plain); err == nil {
		t.Errorf("enforcing, plain client: served")
	}
}
