package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// mt is "+message.type=v".
func mt(v string) string { return "+" + remoting.MessageTypeAttribute + "=" + v }

// TestTopicMessageTypeAttribute: UPDATE_AND_CREATE_TOPIC sets, changes and
// removes a topic's message.type; a value RocketMQ refuses is refused with
// a remark naming the values it takes, and MIXED is refused with
// RocketMQ's INVALID_PARAMETER unless the broker allows it
// (STRATAMQ_ENABLE_MIXED_MESSAGE_TYPE); a refused change leaves the topic
// as it was.
func TestTopicMessageTypeAttribute(t *testing.T) {
	t.Parallel()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20}
	b, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger()})
	addr := b.Addr().String()
	typeOf := func(topic string) (string, bool) {
		tc, _ := b.topics.Get(topic)
		v, ok := tc.Attributes[remoting.MessageTypeAttribute]
		return v, ok
	}
	for _, v := range []string{"NORMAL", "FIFO", "DELAY", "TRANSACTION", "UNSPECIFIED"} {
		topic := "MT" + v
		if r := invoke(t, cl, addr, createTopicAttrReq(topic, mt(v))); r.Code != 0 {
			t.Fatalf("create %s with message.type=%s: %d %s", topic, v, r.Code, r.Remark)
		}
		if got, _ := typeOf(topic); got != v {
			t.Fatalf("%s: message.type %q, want %s", topic, got, v)
		}
	}
	for _, v := range []string{"fifo", "Normal", "", "PRIORITY", "LITE"} {
		r := invoke(t, cl, addr, createTopicAttrReq("MTBad", mt(v)))
		if r.Code != int32(remoting.SystemError) || !strings.Contains(r.Remark, "want one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED") {
			t.Fatalf("message.type=%q: %d %q, want SYSTEM_ERROR naming the values", v, r.Code, r.Remark)
		}
	}
	if _, ok := b.topics.Get("MTBad"); ok {
		t.Fatal("a refused message.type created the topic")
	}
	// A refused change keeps the topic's type.
	if r := invoke(t, cl, addr, createTopicAttrReq("MTFIFO", mt("fifo"))); r.Code == 0 {
		t.Fatal("update to message.type=fifo accepted")
	}
	r := invoke(t, cl, addr, createTopicAttrReq("MTFIFO", mt("MIXED")))
	if r.Code != int32(remoting.InvalidParameter) || !strings.Contains(r.Remark, "MIXED message type is not supported") {
		t.Fatalf("MIXED without STRATAMQ_ENABLE_MIXED_MESSAGE_TYPE: %d %q", r.Code, r.Remark)
	}
	if got, _ := typeOf("MTFIFO"); got != "FIFO" {
		t.Fatalf("after refused changes: message.type %q, want FIFO", got)
	}
	// Changed, then removed (the topic takes every kind again).
	if r := invoke(t, cl, addr, createTopicAttrReq("MTFIFO", mt("NORMAL"))); r.Code != 0 {
		t.Fatalf("FIFO to NORMAL: %d %s", r.Code, r.Remark)
	}
	if got, _ := typeOf("MTFIFO"); got != "NORMAL" {
		t.Fatalf("message.type %q, want NORMAL", got)
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("MTFIFO", "-"+remoting.MessageTypeAttribute)); r.Code != 0 {
		t.Fatalf("remove message.type: %d %s", r.Code, r.Remark)
	}
	if got, ok := typeOf("MTFIFO"); ok {
		t.Fatalf("message.type %q after its removal", got)
	}
	stop()

	// A broker that allows MIXED takes it.
	cfg.EnableMixedMessageType = true
	b, cl, _ = runBroker(t, cfg, Deps{Logger: discardLogger()})
	if r := invoke(t, cl, b.Addr().String(), createTopicAttrReq("MTMixed", mt("MIXED"))); r.Code != 0 {
		t.Fatalf("MIXED with STRATAMQ_ENABLE_MIXED_MESSAGE_TYPE: %d %s", r.Code, r.Remark)
	}
	if tc, _ := b.topics.Get("MTMixed"); tc.MessageType() != remoting.MessageTypeMixed {
		t.Fatalf("MTMixed: %v", tc.Attributes)
	}
	// The topics made before the restart kept their types.
	if tc, _ := b.topics.Get("MTDELAY"); tc.MessageType() != remoting.MessageTypeDelay {
		t.Fatalf("MTDELAY after a restart: %v", tc.Attributes)
	}
}

// grpcEndpoint serves the gRPC endpoint (package proxy) in front of b
// until the test ends and returns a client of it.
func grpcEndpoint(t *testing.T, b *Broker) apiv2.MessagingServiceClient {
	t.Helper()
	srv, err := proxy.New(proxy.Config{Addr: "127.0.0.1:0", Logger: discardLogger(), Backend: func() proxy.Backend { return b }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop(5 * time.Second)
		cancel()
		<-served
	})
	return apiv2.NewMessagingServiceClient(conn)
}

// grpcMsg is one v2 message of kind (NORMAL, FIFO, DELAY, TRANSACTION)
// to topic.
func grpcMsg(topic, kind, id string) *apiv2.Message {
	sp := &apiv2.SystemProperties{MessageId: id, BornTimestamp: timestamppb.Now(), QueueId: 0}
	switch kind {
	case "NORMAL":
		sp.MessageType = apiv2.MessageType_NORMAL
	case "FIFO":
		sp.MessageType, sp.MessageGroup = apiv2.MessageType_FIFO, new(string)
		*sp.MessageGroup = "g1"
	case "DELAY":
		sp.MessageType, sp.DeliveryTimestamp = apiv2.MessageType_DELAY, timestamppb.New(time.Now().Add(time.Hour))
	case "TRANSACTION":
		sp.MessageType = apiv2.MessageType_TRANSACTION
	}
	return &apiv2.Message{Topic: &apiv2.Resource{Name: topic}, Body: []byte("body " + id), SystemProperties: sp}
}

// TestGRPCSendRefusedByTopicMessageType: a gRPC send of a kind its topic's
// message.type does not take is refused whole with the Proxy's code
// (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE) and remark, and stores nothing;
// sends of the topic's kind are stored; a topic without the attribute
// takes every kind; remoting sends are not checked (as RocketMQ's broker
// does not check them). The route answers name what each topic takes.
func TestGRPCSendRefusedByTopicMessageType(t *testing.T) {
	t.Parallel()
	b, cl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20},
		Deps{Logger: discardLogger(), Bucket: tier.NewMem()})
	addr := b.Addr().String()
	kinds := []string{"NORMAL", "FIFO", "DELAY", "TRANSACTION"}
	for _, k := range kinds {
		if r := invoke(t, cl, addr, createTopicAttrReq("Typed"+k, mt(k))); r.Code != 0 {
			t.Fatalf("create Typed%s: %d %s", k, r.Code, r.Remark)
		}
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("Untyped", "")); r.Code != 0 {
		t.Fatalf("create Untyped: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("Nothing", mt("UNSPECIFIED"))); r.Code != 0 {
		t.Fatalf("create Nothing: %d %s", r.Code, r.Remark)
	}
	cli := grpcEndpoint(t, b)
	call := func() context.Context {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "msgtype"), 30*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	n := 0
	send := func(topic, kind string) *apiv2.SendMessageResponse {
		t.Helper()
		n++
		resp, err := cli.SendMessage(call(), &apiv2.SendMessageRequest{Messages: []*apiv2.Message{grpcMsg(topic, kind, fmt.Sprintf("0A%04X", n))}})
		if err != nil {
			t.Fatalf("send %s to %s: %v", kind, topic, err)
		}
		return resp
	}
	stored := func(topic string) int64 { return b.store.MaxQueueOffset(topic, 0) }
	for _, topicKind := range kinds {
		topic := "Typed" + topicKind
		for _, k := range kinds {
			before := stored(topic)
			resp := send(topic, k)
			st := resp.GetStatus()
			if k == topicKind {
				if st.GetCode() != apiv2.Code_OK {
					t.Fatalf("%s to %s: %v, want OK", k, topic, st)
				}
				continue
			}
			want := fmt.Sprintf("TopicMessageType validate failed, the expected type is %s, but actual type is %s", topicKind, k)
			if st.GetCode() != apiv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE || st.GetMessage() != want || len(resp.GetEntries()) != 0 {
				t.Fatalf("%s to %s: %v (%d entries), want MESSAGE_PROPERTY_CONFLICT_WITH_TYPE %q", k, topic, st, len(resp.GetEntries()), want)
			}
			if got := stored(topic); got != before {
				t.Fatalf("a refused %s send to %s stored something: max offset %d, was %d", k, topic, got, before)
			}
		}
	}
	for _, k := range kinds {
		if st := send("Untyped", k).GetStatus(); st.GetCode() != apiv2.Code_OK {
			t.Fatalf("%s to a topic without message.type: %v", k, st)
		}
		if st := send("Nothing", k).GetStatus(); st.GetCode() != apiv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE {
			t.Fatalf("%s to an UNSPECIFIED topic: %v", k, st)
		}
	}
	// A recall needs a topic that takes DELAY: a delayed message sent to
	// Untyped is not recalled once the topic is NORMAL, and is once it is
	// DELAY.
	delayed := send("Untyped", "DELAY")
	handle := delayed.GetEntries()[0].GetRecallHandle()
	if handle == "" {
		t.Fatalf("the delayed send has no recall handle: %v", delayed)
	}
	recall := func() *apiv2.Status {
		t.Helper()
		resp, err := cli.RecallMessage(call(), &apiv2.RecallMessageRequest{Topic: &apiv2.Resource{Name: "Untyped"}, RecallHandle: handle})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("Untyped", mt("NORMAL"))); r.Code != 0 {
		t.Fatalf("Untyped to NORMAL: %d %s", r.Code, r.Remark)
	}
	if st := recall(); st.GetCode() != apiv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE ||
		st.GetMessage() != "TopicMessageType validate failed, the expected type is NORMAL, but actual type is DELAY" {
		t.Fatalf("recall on a NORMAL topic: %v", st)
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("Untyped", mt("DELAY"))); r.Code != 0 {
		t.Fatalf("Untyped to DELAY: %d %s", r.Code, r.Remark)
	}
	if st := recall(); st.GetCode() != apiv2.Code_OK {
		t.Fatalf("recall on a DELAY topic: %v", st)
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("Untyped", "-"+remoting.MessageTypeAttribute)); r.Code != 0 {
		t.Fatalf("Untyped untyped again: %d %s", r.Code, r.Remark)
	}

	// Over remoting a message with a message group (FIFO) goes to a
	// NORMAL topic: RocketMQ's broker does not check types.
	before := stored("TypedNORMAL")
	if r := invoke(t, cl, addr, sendReq("TypedNORMAL", 0, []byte("remoting fifo"), "__SHARDINGKEY\x01g1\x02")); r.Code != 0 {
		t.Fatalf("remoting FIFO send to a NORMAL topic: %d %s", r.Code, r.Remark)
	}
	if stored("TypedNORMAL") != before+1 {
		t.Fatal("the remoting send was not stored")
	}

	// The route answers: what the topic takes, on every queue.
	accept := func(topic string) []apiv2.MessageType {
		t.Helper()
		resp, err := cli.QueryRoute(call(), &apiv2.QueryRouteRequest{Topic: &apiv2.Resource{Name: topic}})
		if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK || len(resp.GetMessageQueues()) == 0 {
			t.Fatalf("route of %s: %v %v", topic, resp.GetStatus(), err)
		}
		got := resp.GetMessageQueues()[0].GetAcceptMessageTypes()
		for _, q := range resp.GetMessageQueues() {
			if !slices.Equal(q.GetAcceptMessageTypes(), got) {
				t.Fatalf("route of %s: queues accept %v and %v", topic, got, q.GetAcceptMessageTypes())
			}
		}
		return got
	}
	for _, k := range kinds {
		if got, want := accept("Typed"+k), []apiv2.MessageType{apiv2.MessageType(apiv2.MessageType_value[k])}; !slices.Equal(got, want) {
			t.Fatalf("Typed%s accepts %v, want %v", k, got, want)
		}
	}
	all := []apiv2.MessageType{apiv2.MessageType_NORMAL, apiv2.MessageType_FIFO, apiv2.MessageType_DELAY, apiv2.MessageType_TRANSACTION}
	if got := accept("Untyped"); !slices.Equal(got, all) {
		t.Fatalf("Untyped accepts %v, want %v", got, all)
	}
	if got := accept("Nothing"); !slices.Equal(got, []apiv2.MessageType{apiv2.MessageType_MESSAGE_TYPE_UNSPECIFIED}) {
		t.Fatalf("Nothing accepts %v", got)
	}
	asg, err := cli.QueryAssignment(call(), &apiv2.QueryAssignmentRequest{Topic: &apiv2.Resource{Name: "TypedFIFO"},
		Group: &apiv2.Resource{Name: "mtg"}})
	if err != nil || len(asg.GetAssignments()) != 1 ||
		!slices.Equal(asg.GetAssignments()[0].GetMessageQueue().GetAcceptMessageTypes(), []apiv2.MessageType{apiv2.MessageType_FIFO}) {
		t.Fatalf("assignment of TypedFIFO: %v %v", asg, err)
	}
}

// TestTopicMessageTypeKeptAcrossRestoreAndPromotion: a topic's message.type
// is kept like its other attributes: after a restart, after a restore on
// an empty disk from the bucket's checkpoint, and on a slave that takes
// over; the gRPC endpoint of each still refuses a send of another kind.
func TestTopicMessageTypeKeptAcrossRestoreAndPromotion(t *testing.T) {
	t.Parallel()
	refuses := func(b *Broker, what string) {
		t.Helper()
		if tc, _ := b.topics.Get("KeptFIFO"); tc.MessageType() != remoting.MessageTypeFIFO {
			t.Fatalf("%s: KeptFIFO's attributes %v", what, tc.Attributes)
		}
		r, err := b.Route(context.Background(), "KeptFIFO", false)
		if err != nil || r.MessageType != remoting.MessageTypeFIFO {
			t.Fatalf("%s: route %+v %v", what, r, err)
		}
	}
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		CheckpointInterval: 200 * time.Millisecond}
	b, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	if r := invoke(t, cl, b.Addr().String(), createTopicAttrReq("KeptFIFO", mt("FIFO"))); r.Code != 0 {
		t.Fatalf("create KeptFIFO: %d %s", r.Code, r.Remark)
	}
	stop()
	b, _, stop = runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	refuses(b, "after a restart")
	stop()
	cfg.DataDir = t.TempDir()
	b, _, _ = runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	refuses(b, "after a restore on an empty disk")
	st := grpcEndpoint(t, b)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "kept"), 30*time.Second)
	defer cancel()
	resp, err := st.SendMessage(ctx, &apiv2.SendMessageRequest{Messages: []*apiv2.Message{grpcMsg("KeptFIFO", "NORMAL", "0B0001")}})
	if err != nil || resp.GetStatus().GetCode() != apiv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE {
		t.Fatalf("restored: a NORMAL send to the FIFO topic: %v %v", resp.GetStatus(), err)
	}

	// A slave copies the master's topics; promoted, it keeps the type.
	mem := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	acfg.LeaseTTL, bcfg.LeaseTTL = time.Minute, time.Minute
	ma := runNode(t, acfg, Deps{Bucket: mem})
	sb := runNode(t, bcfg, Deps{Bucket: mem})
	waitCond(t, 20*time.Second, "the master to see its slave", func() bool {
		m := ma.Broker()
		return ma.role() == RoleSyncMaster && sb.role() == RoleSlave && m != nil && m.haSlaves() == 1
	})
	rcl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer rcl.Close()
	if r := invoke(t, rcl, acfg.Listen, createTopicAttrReq("KeptFIFO", mt("FIFO"))); r.Code != 0 {
		t.Fatalf("create KeptFIFO on the master: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 20*time.Second, "the slave to copy KeptFIFO", func() bool {
		tc, ok := sb.Broker().topics.Get("KeptFIFO")
		return ok && tc.MessageType() == remoting.MessageTypeFIFO
	})
	if r := invoke(t, rcl, bcfg.Listen, remoting.NewRequest(remoting.PromoteBroker, nil, nil)); r.Code != int32(remoting.Success) {
		t.Fatalf("promote the slave: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 30*time.Second, "the slave to take over", func() bool {
		return sb.role() == RoleSyncMaster && sb.Broker() != nil
	})
	refuses(sb.Broker(), "on the promoted slave")
}
