package proxy_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/proxy/apiv2"
)

// rawCodec sends and receives bytes as they are, to put malformed
// protobuf on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

// TestGRPCMalformedProtobufRefused: bytes that are not a SendMessageRequest
// get INTERNAL naming the unmarshalling, and the connection keeps serving.
func TestGRPCMalformedProtobufRefused(t *testing.T) {
	e := startEnv(t, envOpts{})
	for _, junk := range [][]byte{{0xff, 0xff, 0xff, 0xff}, {0x0a, 0x7f, 0x01}, {0x0a, 0x05, 0x0a, 0x03, 0x0a, 0x80, 0x80}} {
		var out []byte
		err := e.conn.Invoke(callCtx(t, "c1"), "/apache.rocketmq.v2.MessagingService/SendMessage", &junk, &out,
			grpc.ForceCodec(rawCodec{}))
		if status.Code(err) != codes.Internal || !strings.Contains(status.Convert(err).Message(), "unmarshal") {
			t.Fatalf("malformed %x: %v, want Internal naming the unmarshalling", junk, err)
		}
	}
	resp, err := e.cli.Heartbeat(callCtx(t, "c1"), &apiv2.HeartbeatRequest{})
	if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("the connection after malformed requests: %v %v", resp, err)
	}
}

// TestGRPCOversizeRefusedNamingLimit: a request over the gRPC message
// limit gets RESOURCE_EXHAUSTED naming both sizes; a body under it but
// over the broker's message size gets MESSAGE_BODY_TOO_LARGE naming the
// broker's limit.
func TestGRPCOversizeRefusedNamingLimit(t *testing.T) {
	e := startEnv(t, envOpts{cfg: func(c *broker.Config) { c.MaxMessageSize = 4096 },
		proxy: func(c *proxy.Config) { c.MaxRecvMsgSize = 64 << 10 }})
	send := func(n int) (*apiv2.SendMessageResponse, error) {
		m := textMsg("BigTopic", "01BIG", strings.Repeat("x", n))
		return e.cli.SendMessage(callCtx(t, "c1"), &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
	}
	_, err := send(100 << 10)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "65536") {
		t.Fatalf("100 KiB request: %v, want RESOURCE_EXHAUSTED naming the 65536-byte limit", err)
	}
	resp, err := send(5000)
	if err != nil || resp.GetStatus().GetCode() != apiv2.Code_MESSAGE_BODY_TOO_LARGE || !strings.Contains(resp.GetStatus().GetMessage(), "4096") {
		t.Fatalf("5000-byte body: %v %v, want MESSAGE_BODY_TOO_LARGE naming 4096", resp.GetStatus(), err)
	}
	resp, err = send(3000)
	if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("3000-byte body: %v %v", resp.GetStatus(), err)
	}
}

// openTelemetry opens a Telemetry stream and waits for the answer to its
// settings, so the stream holds a server slot.
func openTelemetry(ctx context.Context, cli apiv2.MessagingServiceClient) (apiv2.MessagingService_TelemetryClient, error) {
	st, err := cli.Telemetry(ctx)
	if err != nil {
		return nil, err
	}
	ct := apiv2.ClientType_PRODUCER
	if err := st.Send(&apiv2.TelemetryCommand{Command: &apiv2.TelemetryCommand_Settings{Settings: &apiv2.Settings{
		ClientType: &ct, PubSub: &apiv2.Settings_Publishing{Publishing: &apiv2.Publishing{}}}}}); err != nil {
		return nil, err
	}
	if _, err := st.Recv(); err != nil {
		return nil, err
	}
	return st, nil
}

// TestGRPCStreamFloodBounded: a connection holds at most
// MaxConcurrentStreams streams (one more waits and times out, and gets a
// slot once one ends), and the server at most MaxConns connections (one
// more is not served until another closes).
func TestGRPCStreamFloodBounded(t *testing.T) {
	e := startEnv(t, envOpts{proxy: func(c *proxy.Config) { c.MaxConcurrentStreams = 4; c.MaxConns = 2 }})
	var open []context.CancelFunc
	for i := range 4 {
		ctx, cancel := context.WithCancel(callCtx(t, "flood"))
		open = append(open, cancel)
		if _, err := openTelemetry(ctx, e.cli); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	short, cancel := context.WithTimeout(callCtx(t, "flood"), 300*time.Millisecond)
	defer cancel()
	if _, err := openTelemetry(short, e.cli); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a fifth stream: %v, want it held back until the deadline", err)
	}
	open[0]()
	if _, err := openTelemetry(callCtx(t, "flood"), e.cli); err != nil {
		t.Fatalf("a stream after one ended: %v", err)
	}

	// Connections: e.conn is one; a second is served, a third waits.
	dial := func() *grpc.ClientConn {
		c, err := grpc.NewClient(e.srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	second := dial()
	if _, err := apiv2.NewMessagingServiceClient(second).Heartbeat(callCtx(t, "c2"), &apiv2.HeartbeatRequest{}); err != nil {
		t.Fatalf("a second connection: %v", err)
	}
	third := dial()
	short3, cancel3 := context.WithTimeout(callCtx(t, "c3"), 300*time.Millisecond)
	defer cancel3()
	if _, err := apiv2.NewMessagingServiceClient(third).Heartbeat(short3, &apiv2.HeartbeatRequest{}); err == nil {
		t.Fatal("a third connection was served past MaxConns=2")
	}
	second.Close()
	if _, err := apiv2.NewMessagingServiceClient(third).Heartbeat(callCtx(t, "c3"), &apiv2.HeartbeatRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("the third connection once the second closed: %v", err)
	}
	for _, c := range open {
		c()
	}
}

// TestGRPCKeepaliveEnforced: a client that pings more often than the
// enforcement policy allows is sent GOAWAY ENHANCE_YOUR_CALM.
func TestGRPCKeepaliveEnforced(t *testing.T) {
	e := startEnv(t, envOpts{})
	c, err := net.DialTimeout("tcp", e.srv.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			break // the server may have closed already
		}
	}
	for range 100 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY before: %v", err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", ga.ErrCode)
			}
			return
		}
	}
	t.Fatal("no GOAWAY within 100 frames")
}
