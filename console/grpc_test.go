package console

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
)

// TestConsoleCountsGRPC: the overview page shows the gRPC endpoint's
// traffic (issue 16: the console counts gRPC traffic too): a broker with
// its metrics and the real endpoint (package proxy) in front, two
// messages sent and one refused send through it, and a remoting send,
// which the gRPC rows do not count.
func TestConsoleCountsGRPC(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	metrics := broker.NewMetrics(prometheus.NewRegistry())
	b, err := broker.New(broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20},
		broker.Deps{Logger: log, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := proxy.New(proxy.Config{Addr: "127.0.0.1:0", Logger: log, Metrics: metrics, Backend: func() proxy.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- b.Run(ctx) }()
	go func() { done <- srv.Serve(ctx) }()
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	t.Cleanup(func() {
		cl.Close()
		srv.Stop(5 * time.Second)
		cancel()
		for range 2 {
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("broker or gRPC endpoint did not stop within 30s")
				return
			}
		}
	})
	tb := &testBroker{b: b, cl: cl}
	h := newHandler(tb)
	if _, body, _ := get(t, h, http.MethodGet, "/"); !strings.Contains(body, `id="st-grpc-requests">0<`) {
		t.Fatalf("overview before any gRPC call:\n%s", body)
	}

	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cli := apiv2.NewMessagingServiceClient(conn)
	call, stop := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "console"), 10*time.Second)
	defer stop()
	for i, body := range []string{"hello", "world!"} {
		m := &apiv2.Message{Topic: &apiv2.Resource{Name: "ConsoleG"}, Body: []byte(body),
			SystemProperties: &apiv2.SystemProperties{MessageId: "01C1" + string(rune('A'+i)), MessageType: apiv2.MessageType_NORMAL,
				BornTimestamp: timestamppb.Now()}}
		resp, err := cli.SendMessage(call, &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
		if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK {
			t.Fatalf("send %d: %v %v", i, resp.GetStatus(), err)
		}
	}
	if resp, err := cli.SendMessage(call, &apiv2.SendMessageRequest{}); err != nil || resp.GetStatus().GetCode() != apiv2.Code_BAD_REQUEST {
		t.Fatalf("an empty send: %v %v", resp.GetStatus(), err)
	}
	tb.send(t, "ConsoleG", 0, []byte("remoting"), "")

	code, body, _ := get(t, h, http.MethodGet, "/")
	for _, want := range []string{`id="st-grpc-requests">3<`, `id="st-grpc-failed">1<`, `id="st-grpc-in">2<`, `id="st-grpc-bytes">11 <`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("overview: %d, no %s:\n%s", code, want, body)
		}
	}
}
