package broker

import (
	"bytes"
	"compress/zlib"
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// TestConsoleViewTiered: on a broker whose first segments were uploaded
// and dropped, the console's queue view splits each queue where the store
// does (the first entry at or above the local log's start, found here by
// walking the queue), its messages below that are read from the bucket
// and flagged cold, its bodies are cut to the preview, and a group's lag
// is the one rocketmq_consumer_lag_messages reports.
func TestConsoleViewTiered(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 0}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	bodies := produceTiered(t, b, cl, "ConsoleT", 300) // ≈ 2.4 MiB: 2 sealed segments
	waitCond(t, 60*time.Second, "segments uploaded and dropped", func() bool {
		return len(b.store.SealedSegments()) == 0 && b.store.LocalMinPhysOffset() > 0
	})
	ctx := context.Background()

	ts, err := b.ConsoleTopics(ctx, "ConsoleT", true)
	if err != nil || len(ts) != 1 {
		t.Fatalf("ConsoleTopics: %v %v", ts, err)
	}
	q := ts[0].Queues[0]
	localMin := b.store.LocalMinPhysOffset()
	wantLocal := int64(len(bodies))
	for i := range int64(len(bodies)) {
		phys, _, _, ok, err := b.store.QueueEntry("ConsoleT", 0, i)
		if err != nil || !ok {
			t.Fatalf("entry %d: %v %v", i, ok, err)
		}
		if phys >= localMin {
			wantLocal = i
			break
		}
	}
	if q.Min != 0 || q.Max != int64(len(bodies)) || q.LocalFrom != wantLocal || wantLocal == 0 || wantLocal == q.Max {
		t.Fatalf("queue 0: %+v, want min 0, max %d, local from %d (strictly inside)", q, len(bodies), wantLocal)
	}
	if q.BucketTo < q.LocalFrom || q.BucketTo > q.Max {
		t.Fatalf("queue 0: bucket to %d outside [local from %d, max %d]", q.BucketTo, q.LocalFrom, q.Max)
	}
	if ts[0].Messages != int64(len(bodies)) {
		t.Fatalf("topic messages %d, want %d", ts[0].Messages, len(bodies))
	}

	// A page across the boundary: cold below it, local from it, bodies cut.
	from := q.LocalFrom - 2
	msgs, next, err := b.ConsoleMessages(ctx, "ConsoleT", 0, from, 4, 100)
	if err != nil || len(msgs) != 4 || next != from+4 {
		t.Fatalf("ConsoleMessages: %d messages, next %d, %v", len(msgs), next, err)
	}
	for i, m := range msgs {
		off := from + int64(i)
		if m.QueueOffset != off || m.BodySize != len(bodies[off]) || !bytes.Equal(m.Body, bodies[off][:100]) || !m.Cut {
			t.Fatalf("message %d: offset %d, size %d, body %q", off, m.QueueOffset, m.BodySize, m.Body)
		}
		if m.Cold != (off < q.LocalFrom) {
			t.Fatalf("message %d: cold %v, local from %d", off, m.Cold, q.LocalFrom)
		}
		byID, err := b.ConsoleMessageByID(ctx, m.MsgID, ConsoleMaxPreview+1000)
		if err != nil || byID.QueueOffset != off || len(byID.Body) != ConsoleMaxPreview {
			t.Fatalf("by id %s: offset %d, %d body bytes, %v", m.MsgID, byID.QueueOffset, len(byID.Body), err)
		}
	}
	// Asking for more than the bounds gives the bounds.
	if msgs, _, err := b.ConsoleMessages(ctx, "ConsoleT", 0, 0, 1000, 1<<20); err != nil || len(msgs) != ConsoleMaxMessages || len(msgs[0].Body) != ConsoleMaxPreview {
		t.Fatalf("unbounded ask: %d messages, %v", len(msgs), err)
	}

	// A group that read 10 messages: its lag is the metric's.
	commit := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: "consoleG", Topic: "ConsoleT", QueueID: 0, CommitOffset: 10}
	if r := invoke(t, cl, b.Addr().String(), remoting.NewRequest(remoting.UpdateConsumerOffset, commit.Encode(), nil)); r.Code != int32(remoting.Success) {
		t.Fatalf("commit: %d %s", r.Code, r.Remark)
	}
	var g *ConsoleGroup
	for _, x := range b.ConsoleGroups() {
		if x.Name == "consoleG" {
			g = &x
		}
	}
	if g == nil || len(g.Queues) != 1 || g.Lag != int64(len(bodies))-10 || g.Queues[0].Committed != 10 || g.Queues[0].Max != int64(len(bodies)) {
		t.Fatalf("group: %+v", g)
	}
	found := false
	for _, l := range b.storeStats().lag {
		if l.group == "consoleG" {
			found = true
			if l.lag != g.Lag {
				t.Fatalf("metric lag %d, console %d", l.lag, g.Lag)
			}
		}
	}
	if !found {
		t.Fatal("no lag series for the group")
	}

	// The tier's figures come from TierStatus, the admin command's.
	st := b.TierStatus(ctx)
	if !st.Bucket || st.BucketSegments < 2 || st.LocalFrom != localMin || st.OldestRetained == 0 {
		t.Fatalf("tier status: %+v", st)
	}
	if r := b.TierRequests(); r.UploadObjects < 2 || r.ColdGets == 0 {
		t.Fatalf("tier requests: %+v", r)
	}
}

// TestConsoleViewKeysAndPreview: a query by key finds the messages that
// carry it; a preview never cuts a UTF-8 character in two.
func TestConsoleViewKeysAndPreview(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	body := []byte(strings.Repeat("é", 3000)) // 6000 bytes, 2 each
	for i, key := range []string{"k1", "k2", "k1"} {
		props := "KEYS\x01" + key + "\x02"
		if r := invoke(t, cl, b.Addr().String(), sendReq("KeyT", 0, append([]byte{byte('a' + i)}, body...), props)); r.Code != int32(remoting.Success) {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	ctx := context.Background()
	waitCond(t, 10*time.Second, "key index", func() bool {
		ms, err := b.ConsoleMessagesByKey(ctx, "KeyT", "k1", 10, ConsoleMaxPreview)
		return err == nil && len(ms) == 2
	})
	ms, _ := b.ConsoleMessagesByKey(ctx, "KeyT", "k1", 10, ConsoleMaxPreview)
	for _, m := range ms {
		if m.QueueOffset == 1 || !utf8.Valid(m.Body) || len(m.Body) < ConsoleMaxPreview-3 || m.BodySize != 6001 {
			t.Fatalf("key k1: offset %d, %d body bytes (valid %v), size %d", m.QueueOffset, len(m.Body), utf8.Valid(m.Body), m.BodySize)
		}
		var keys string
		for _, p := range m.Properties {
			if p.Key == "KEYS" {
				keys = p.Value
			}
		}
		if keys != "k1" {
			t.Fatalf("properties %v", m.Properties)
		}
	}
	if ms, err := b.ConsoleMessagesByKey(ctx, "KeyT", "nope", 10, 10); err != nil || len(ms) != 0 {
		t.Fatalf("unknown key: %v %v", ms, err)
	}
	at, err := b.ConsoleOffsetAtTime(ctx, "KeyT", 0, time.Now().Add(time.Hour).UnixMilli())
	if err != nil || at != 3 {
		t.Fatalf("offset at a future time: %d %v, want the max 3", at, err)
	}
}

// TestConsoleViewCompressedBody: a body the producer zlib-compressed is
// previewed decompressed, never inflated past the preview (50 MiB of
// zeros compress to a small message); one that does not decompress is
// shown as stored, saying so.
func TestConsoleViewCompressedBody(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	var zbuf bytes.Buffer
	zw := zlib.NewWriter(&zbuf)
	if _, err := zw.Write(make([]byte, 50<<20)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{zbuf.Bytes(), []byte("not zlib at all")} {
		h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: "ZipT", DefaultTopic: "TBW102", DefaultTopicQueueNums: 4,
			SysFlag: sysFlagCompressed, BornTimestamp: time.Now().UnixMilli()}
		if r := invoke(t, cl, b.Addr().String(), remoting.NewRequest(remoting.SendMessage, h.Encode(), body)); r.Code != int32(remoting.Success) {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	ms, _, err := b.ConsoleMessages(context.Background(), "ZipT", 0, 0, 10, ConsoleMaxPreview)
	if err != nil || len(ms) != 2 {
		t.Fatalf("%d messages, %v", len(ms), err)
	}
	if m := ms[0]; !m.Compressed || !m.Cut || len(m.Body) != ConsoleMaxPreview || !bytes.Equal(m.Body, make([]byte, ConsoleMaxPreview)) ||
		m.BodySize != zbuf.Len() || m.BodyError != "" {
		t.Fatalf("compressed: compressed %v cut %v, %d body bytes, size %d, error %q", m.Compressed, m.Cut, len(m.Body), m.BodySize, m.BodyError)
	}
	if m := ms[1]; !m.Compressed || string(m.Body) != "not zlib at all" || !strings.Contains(m.BodyError, "does not decompress") {
		t.Fatalf("bad zlib: %q, error %q", m.Body, m.BodyError)
	}
}

// TestConsoleViewCountsGRPC: the console's status counts the RocketMQ 5
// gRPC endpoint's traffic (calls, those not OK, messages and body bytes
// stored), the sums of the stratamq_grpc_* series /metrics exports, with
// the real endpoint (package proxy) in front of the broker.
func TestConsoleViewCountsGRPC(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	b, _, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20},
		Deps{Logger: discardLogger(), Metrics: metrics})
	if got := b.ConsoleStatus().GRPC; got != (GRPCTraffic{}) {
		t.Fatalf("before any gRPC call: %+v", got)
	}
	srv, err := proxy.New(proxy.Config{Addr: "127.0.0.1:0", Logger: discardLogger(), Metrics: metrics,
		Backend: func() proxy.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		srv.Stop(5 * time.Second)
		cancel()
		<-served
	})
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cli := apiv2.NewMessagingServiceClient(conn)
	call, done := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "console"), 10*time.Second)
	defer done()

	for i := range 3 {
		m := &apiv2.Message{Topic: &apiv2.Resource{Name: "ConsoleGRPC"}, Body: []byte("body" + strings.Repeat("x", i)),
			SystemProperties: &apiv2.SystemProperties{MessageId: "01C0" + string(rune('A'+i)), MessageType: apiv2.MessageType_NORMAL,
				BornTimestamp: timestamppb.Now()}}
		resp, err := cli.SendMessage(call, &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
		if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK {
			t.Fatalf("send %d: %v %v", i, resp.GetStatus(), err)
		}
	}
	if resp, err := cli.SendMessage(call, &apiv2.SendMessageRequest{}); err != nil || resp.GetStatus().GetCode() != apiv2.Code_BAD_REQUEST {
		t.Fatalf("an empty send: %v %v", resp.GetStatus(), err)
	}
	if resp, err := cli.QueryRoute(call, &apiv2.QueryRouteRequest{Topic: &apiv2.Resource{Name: "ConsoleGRPC"}}); err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("route: %v %v", resp.GetStatus(), err)
	}

	got := b.ConsoleStatus().GRPC
	want := GRPCTraffic{Requests: 5, Failed: 1, MessagesIn: 3, BytesIn: 4*3 + 0 + 1 + 2}
	if got != want {
		t.Fatalf("console gRPC traffic %+v, want %+v", got, want)
	}
	// The same numbers /metrics exports.
	sum := func(name string) (all, notOK int64) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				v := int64(m.GetCounter().GetValue())
				all += v
				for _, l := range m.GetLabel() {
					if l.GetName() == "code" && l.GetValue() != "OK" {
						notOK += v
					}
				}
			}
		}
		return all, notOK
	}
	if all, notOK := sum("stratamq_grpc_requests_total"); all != got.Requests || notOK != got.Failed {
		t.Errorf("stratamq_grpc_requests_total sums to %d (%d not OK), the console shows %+v", all, notOK, got)
	}
	if in, _ := sum("stratamq_grpc_messages_in_total"); in != got.MessagesIn {
		t.Errorf("stratamq_grpc_messages_in_total sums to %d, the console shows %d", in, got.MessagesIn)
	}
}
