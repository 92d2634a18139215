package proxy_test

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/proxy/apiv2"
)

func res(name string) *apiv2.Resource { return &apiv2.Resource{Name: name} }

func textMsg(topic, id, body string) *apiv2.Message {
	tag := "TagA"
	return &apiv2.Message{Topic: res(topic), Body: []byte(body), UserProperties: map[string]string{"k1": "v1"},
		SystemProperties: &apiv2.SystemProperties{MessageId: id, Tag: &tag, Keys: []string{"key1", "key2"},
			MessageType: apiv2.MessageType_NORMAL, BornTimestamp: timestamppb.Now(), BornHost: "test-host"}}
}

// TestGRPCQueryRouteAnswersOwnEndpoint: the route names this endpoint,
// broker id 0, one queue per queue of the (auto-created) topic, each
// READ_WRITE and accepting every message type.
func TestGRPCQueryRouteAnswersOwnEndpoint(t *testing.T) {
	e := startEnv(t, envOpts{})
	resp, err := e.cli.QueryRoute(callCtx(t, "c1"), &apiv2.QueryRouteRequest{Topic: res("RouteTopic")})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("status %v", resp.GetStatus())
	}
	if len(resp.MessageQueues) == 0 {
		t.Fatal("no queue")
	}
	for i, mq := range resp.MessageQueues {
		addr := mq.GetBroker().GetEndpoints().GetAddresses()
		if mq.GetId() != int32(i) || mq.GetPermission() != apiv2.Permission_READ_WRITE || mq.GetBroker().GetId() != 0 ||
			len(addr) != 1 || addr[0].GetHost() != "127.0.0.1" ||
			len(mq.GetAcceptMessageTypes()) != 4 {
			t.Fatalf("queue %d: %v", i, mq)
		}
	}
	if got, want := resp.MessageQueues[0].GetBroker().GetEndpoints().GetAddresses()[0].GetPort(), int32(portOf(t, e)); got != want {
		t.Fatalf("route port %d, want the endpoint's %d", got, want)
	}

	// A topic name RocketMQ refuses is refused with a status, not an error.
	resp, err = e.cli.QueryRoute(callCtx(t, "c1"), &apiv2.QueryRouteRequest{Topic: res("bad topic!")})
	if err != nil || resp.GetStatus().GetCode() == apiv2.Code_OK {
		t.Fatalf("bad topic: %v %v", resp.GetStatus(), err)
	}
}

// TestGRPCHeartbeatNeedsClientID: a heartbeat with a client id is OK,
// one without gets CLIENT_ID_REQUIRED.
func TestGRPCHeartbeatNeedsClientID(t *testing.T) {
	e := startEnv(t, envOpts{})
	resp, err := e.cli.Heartbeat(callCtx(t, "c1"), &apiv2.HeartbeatRequest{ClientType: apiv2.ClientType_PRODUCER})
	if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("heartbeat: %v %v", resp.GetStatus(), err)
	}
	resp, err = e.cli.Heartbeat(callCtx(t, ""), &apiv2.HeartbeatRequest{ClientType: apiv2.ClientType_PRODUCER})
	if err != nil || resp.GetStatus().GetCode() != apiv2.Code_CLIENT_ID_REQUIRED {
		t.Fatalf("heartbeat without client id: %v %v", resp.GetStatus(), err)
	}
}

// TestGRPCSendMessageStores: a sent message gets its id back and a queue
// offset; a second one the next offset.
func TestGRPCSendMessageStores(t *testing.T) {
	e := startEnv(t, envOpts{})
	var last int64 = -1
	for i, id := range []string{"01AAAA", "01BBBB"} {
		m := textMsg("SendTopic", id, "hello")
		m.SystemProperties.QueueId = 0
		resp, err := e.cli.SendMessage(callCtx(t, "c1"), &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
		if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK || len(resp.Entries) != 1 {
			t.Fatalf("send %d: %v %v", i, resp, err)
		}
		en := resp.Entries[0]
		if en.GetMessageId() != id || en.GetOffset() != last+1 || en.GetTransactionId() != "" {
			t.Fatalf("send %d: entry %v, want id %s offset %d", i, en, id, last+1)
		}
		last = en.GetOffset()
	}
}

// TestGRPCUnimplementedAnswersAtOnce: an RPC the server does not serve
// answers Unimplemented (or UNSUPPORTED in its status), never hangs.
func TestGRPCUnimplementedAnswersAtOnce(t *testing.T) {
	e := startEnv(t, envOpts{})
	start := time.Now()
	resp, err := e.cli.SyncLiteSubscription(callCtx(t, "c1"), &apiv2.SyncLiteSubscriptionRequest{})
	if err != nil || resp.GetStatus().GetCode() != apiv2.Code_UNSUPPORTED {
		t.Fatalf("SyncLiteSubscription: %v %v", resp.GetStatus(), err)
	}
	// A method name the service does not have at all.
	err = e.conn.Invoke(callCtx(t, "c1"), "/apache.rocketmq.v2.MessagingService/NoSuchMethod", &apiv2.HeartbeatRequest{}, &apiv2.HeartbeatResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v, want Unimplemented", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("answers took %v", d)
	}
}

func portOf(t *testing.T, e *env) int {
	t.Helper()
	return e.srv.Addr().(*net.TCPAddr).Port
}

// TestGRPCQueryRouteAnswersClientAccessPoint: a client that names its
// access point (a load balancer, a DNS name) gets the route at it.
func TestGRPCQueryRouteAnswersClientAccessPoint(t *testing.T) {
	e := startEnv(t, envOpts{})
	ap := &apiv2.Endpoints{Scheme: apiv2.AddressScheme_DOMAIN_NAME, Addresses: []*apiv2.Address{{Host: "mq.example.net", Port: 8081}}}
	resp, err := e.cli.QueryRoute(callCtx(t, "c1"), &apiv2.QueryRouteRequest{Topic: res("APTopic"), Endpoints: ap})
	if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK || len(resp.MessageQueues) == 0 {
		t.Fatalf("%v %v", resp, err)
	}
	got := resp.MessageQueues[0].GetBroker().GetEndpoints()
	if len(got.GetAddresses()) != 1 || got.GetAddresses()[0].GetHost() != "mq.example.net" || got.GetAddresses()[0].GetPort() != 8081 ||
		got.GetScheme() != apiv2.AddressScheme_DOMAIN_NAME {
		t.Fatalf("route endpoints %v, want the client's access point", got)
	}
}

// TestGRPCConcurrentSendsStoredOnce: sends arriving together are stored
// together (broker/grpc_put.go) and each gets its own queue offset: no
// offset twice, none skipped.
func TestGRPCConcurrentSendsStoredOnce(t *testing.T) {
	e := startEnv(t, envOpts{})
	const senders, each = 16, 20
	type got struct {
		offset int64
		err    error
	}
	results := make(chan got, senders*each)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m := textMsg("ConcTopic", fmt.Sprintf("01C%02d%02d", s, i), "b")
				m.SystemProperties.QueueId = 0
				resp, err := e.cli.SendMessage(callCtx(t, "c"), &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
				if err == nil && resp.GetStatus().GetCode() != apiv2.Code_OK {
					err = fmt.Errorf("%v", resp.GetStatus())
				}
				var off int64
				if err == nil {
					off = resp.Entries[0].GetOffset()
				}
				results <- got{off, err}
			}
		}()
	}
	wg.Wait()
	close(results)
	seen := map[int64]bool{}
	for r := range results {
		if r.err != nil {
			t.Fatal(r.err)
		}
		if seen[r.offset] {
			t.Fatalf("queue offset %d handed out twice", r.offset)
		}
		seen[r.offset] = true
	}
	for i := range int64(senders * each) {
		if !seen[i] {
			t.Fatalf("queue offset %d missing of %d sends", i, senders*each)
		}
	}
}

// TestGRPCSendWithSyncFlush: with STRATAMQ_FLUSH=sync a gRPC send is
// answered after the group commit's fdatasync (store.Put returns then),
// and concurrent ones share it.
func TestGRPCSendWithSyncFlush(t *testing.T) {
	e := startEnv(t, envOpts{cfg: func(c *broker.Config) { c.Flush = "sync" }})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := e.cli.SendMessage(callCtx(t, "c"), &apiv2.SendMessageRequest{Messages: []*apiv2.Message{
				textMsg("SyncTopic", fmt.Sprintf("01S%d", i), "durable")}})
			if err == nil && resp.GetStatus().GetCode() != apiv2.Code_OK {
				err = fmt.Errorf("%v", resp.GetStatus())
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestGRPCSendBatchOneRequest: several messages of one request (the Java
// client's batch send) are stored together, one entry each, in order.
func TestGRPCSendBatchOneRequest(t *testing.T) {
	e := startEnv(t, envOpts{})
	var msgs []*apiv2.Message
	for i := range 5 {
		m := textMsg("BatchTopic", fmt.Sprintf("01BATCH%d", i), fmt.Sprintf("body-%d", i))
		m.SystemProperties.QueueId = 1
		msgs = append(msgs, m)
	}
	resp, err := e.cli.SendMessage(callCtx(t, "c"), &apiv2.SendMessageRequest{Messages: msgs})
	if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK || len(resp.Entries) != len(msgs) {
		t.Fatalf("%v %v", resp, err)
	}
	for i, en := range resp.Entries {
		if en.GetMessageId() != msgs[i].SystemProperties.MessageId || en.GetOffset() != int64(i) || en.GetStatus().GetCode() != apiv2.Code_OK {
			t.Fatalf("entry %d: %v", i, en)
		}
	}
}

// TestGRPCSendWithoutMessageIDGetsOne: a message sent without an id gets
// the UNIQ_KEY the broker made, in its entry.
func TestGRPCSendWithoutMessageIDGetsOne(t *testing.T) {
	e := startEnv(t, envOpts{})
	m := textMsg("NoIDTopic", "", "b")
	resp, err := e.cli.SendMessage(callCtx(t, "c"), &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
	if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK || len(resp.Entries[0].GetMessageId()) != 32 {
		t.Fatalf("%v %v, want a 32-hex-digit id made by the broker", resp, err)
	}
}
