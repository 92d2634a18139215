package proxy_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/proxy/apiv2"
)

// env is an in-process broker with the gRPC endpoint in front of it, on
// loopback ports, and a client connection to the endpoint.
type env struct {
	b    *broker.Broker
	srv  *proxy.Server
	conn *grpc.ClientConn
	cli  apiv2.MessagingServiceClient
}

type envOpts struct {
	metrics *broker.Metrics
	cfg     func(*broker.Config)
	proxy   func(*proxy.Config)
	dial    []grpc.DialOption
}

func startEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	cfg := broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20,
		TransactionCheckInterval: 200 * time.Millisecond, TransactionTimeout: 500 * time.Millisecond}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := &env{}
	pc := proxy.Config{Addr: "127.0.0.1:0", Logger: log, Backend: func() proxy.Backend {
		if e.b == nil {
			return nil
		}
		return e.b
	}}
	if o.metrics != nil {
		pc.Metrics = o.metrics
	}
	if o.proxy != nil {
		o.proxy(&pc)
	}
	srv, err := proxy.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	b, err := broker.New(cfg, broker.Deps{Logger: log, Metrics: o.metrics, GRPC: broker.GRPCDeps{CheckTransaction: srv.CheckTransaction}})
	if err != nil {
		t.Fatal(err)
	}
	e.b = b
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- b.Run(ctx) }()
	go func() { done <- srv.Serve(ctx) }()
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, o.dial...)
	conn, err := grpc.NewClient(srv.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	e.conn = conn
	e.cli = apiv2.NewMessagingServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		srv.Stop(5 * time.Second)
		cancel()
		for range 2 {
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Error("broker or gRPC server did not stop")
				return
			}
		}
	})
	return e
}

// ctx is a call context with a deadline and a client id.
func callCtx(t *testing.T, clientID string) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", clientID, "x-mq-protocol", "v2")
}
