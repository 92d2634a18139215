package broker

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/msgtrace"
	"github.com/stratamq/stratamq/namesrv"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// startTraceNamesrv runs a name server on loopback for the test; it returns its
// address.
func startTraceNamesrv(t *testing.T) string {
	t.Helper()
	ns := namesrv.New(namesrv.Config{Logger: discardLogger()})
	srv := remoting.NewServer(remoting.ServerConfig{Addr: "127.0.0.1:0", OnClose: ns.OnConnClose, Logger: discardLogger()}, ns)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = srv.Serve(ctx) }()
	go func() { defer wg.Done(); _ = ns.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return srv.Addr().String()
}

// routeQueues is the write queue count the name server routes for topic
// (0 when it routes none).
func routeQueues(t *testing.T, cl *remoting.Client, nsAddr, topic string) int32 {
	t.Helper()
	h := remoting.GetRouteInfoRequestHeader{Topic: topic}
	resp := invoke(t, cl, nsAddr, remoting.NewRequest(remoting.GetRouteinfoByTopic, h.Encode(), nil))
	if resp.Code != int32(remoting.Success) {
		return 0
	}
	r, err := remoting.DecodeTopicRouteData(resp.Body)
	if err != nil || len(r.QueueDatas) != 1 {
		return 0
	}
	return r.QueueDatas[0].WriteQueueNums
}

// TestTraceTopicEnable: by default (RocketMQ's traceTopicEnable is off) a
// broker has no trace topic; with STRATAMQ_TRACE_TOPIC_ENABLE a master
// creates RMQ_SYS_TRACE_TOPIC (or STRATAMQ_MSG_TRACE_TOPIC_NAME) with one
// queue and the name server routes it, so a client's trace dispatcher
// (which looks its route up and never auto-creates it) finds it; a slave
// creates none; GET_BROKER_CONFIG shows both settings. A bad name is a
// configuration error.
func TestTraceTopicEnable(t *testing.T) {
	t.Parallel()
	nsAddr := startTraceNamesrv(t)
	cl := remoting.NewClient(remoting.ClientConfig{Logger: discardLogger()})
	defer cl.Close()
	base := Config{Listen: "127.0.0.1:0", Namesrv: nsAddr, AutoCreateTopic: true, RegisterInterval: 200 * time.Millisecond}

	off := base
	off.DataDir, off.BrokerName = t.TempDir(), "broker-off"
	b, _, _ := runBroker(t, off, Deps{Logger: discardLogger()})
	if _, ok := b.topics.Get(msgtrace.DefaultTopic); ok {
		t.Fatal("the trace topic exists with STRATAMQ_TRACE_TOPIC_ENABLE off (RocketMQ's default)")
	}

	on := base
	on.DataDir, on.TraceTopicEnable = t.TempDir(), true
	b, bcl, stop := runBroker(t, on, Deps{Logger: discardLogger()})
	tc, ok := b.topics.Get(msgtrace.DefaultTopic)
	if !ok || tc.ReadQueueNums != 1 || tc.WriteQueueNums != 1 || tc.Perm != PermRead|PermWrite {
		t.Fatalf("the trace topic: %+v %v, want 1 read and write queue, perm 6", tc, ok)
	}
	waitCond(t, 10*time.Second, "the trace topic routed", func() bool { return routeQueues(t, cl, nsAddr, msgtrace.DefaultTopic) == 1 })
	resp := invoke(t, bcl, b.Addr().String(), remoting.NewRequest(remoting.GetBrokerConfig, nil, nil))
	for _, want := range []string{"traceTopicEnable=true\n", "msgTraceTopicName=RMQ_SYS_TRACE_TOPIC\n", "STRATAMQ_TRACE_TOPIC_ENABLE=true\n"} {
		if !strings.Contains(string(resp.Body), want) {
			t.Fatalf("GET_BROKER_CONFIG lacks %q:\n%s", want, resp.Body)
		}
	}
	stop()

	named := base
	named.DataDir, named.BrokerName, named.TraceTopicEnable, named.MsgTraceTopicName = t.TempDir(), "broker-named", true, "MyTraces"
	b, _, _ = runBroker(t, named, Deps{Logger: discardLogger()})
	if _, ok := b.topics.Get("MyTraces"); !ok {
		t.Fatal("STRATAMQ_MSG_TRACE_TOPIC_NAME=MyTraces: no such topic")
	}
	waitCond(t, 10*time.Second, "MyTraces routed", func() bool { return routeQueues(t, cl, nsAddr, "MyTraces") == 1 })

	slave := on
	slave.DataDir, slave.BrokerName, slave.BrokerID, slave.Role, slave.HAMaster = t.TempDir(), "broker-s", 1, RoleSlave, "127.0.0.1:1"
	b, _, _ = runBroker(t, slave, Deps{Logger: discardLogger()})
	if _, ok := b.topics.Get(msgtrace.DefaultTopic); ok {
		t.Fatal("a slave created the trace topic (it copies its master's)")
	}

	bad := Config{TraceTopicEnable: true, MsgTraceTopicName: "no spaces"}
	if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "STRATAMQ_MSG_TRACE_TOPIC_NAME") {
		t.Fatalf("a bad trace topic name: %v", err)
	}
}

// TestTraceRecordsStoredIndexedExpired: trace records are ordinary
// messages: found by the traced message's msgId (a KEYS token, as clients
// set it) through QUERY_MESSAGE, uploaded to the bucket, and expired by
// the trace topic's own retention.time, which updateTopic sets although
// RMQ_SYS_TRACE_TOPIC is a system topic (others stay refused); another
// topic keeps its messages.
func TestTraceRecordsStoredIndexedExpired(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 1 << 30, TraceTopicEnable: true}
	var skew atomic.Int64
	b, cl, _ := startSkewed(t, cfg, bucket, &skew)
	addr := b.Addr().String()
	const topic = msgtrace.DefaultTopic
	if r := invoke(t, cl, addr, createTopicAttrReq(topic, "+"+RetentionAttribute+"=1m")); r.Code != 0 {
		t.Fatalf("updateTopic %s +retention.time=1m: %d %s", topic, r.Code, r.Remark)
	}
	if tc, _ := b.topics.Get(topic); tc.Attributes[RetentionAttribute] != "1m" || tc.WriteQueueNums != 1 {
		t.Fatalf("the trace topic after updateTopic: %+v", tc)
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("SCHEDULE_TOPIC_XXXX", "+"+RetentionAttribute+"=1m")); r.Code == 0 {
		t.Fatal("updateTopic changed SCHEDULE_TOPIC_XXXX: only the trace topic may be")
	}
	const n = 300
	for i := range n {
		id := fmt.Sprintf("MSG%04d", i)
		body := "Pub\x011\x01r\x01pg\x01Orders\x01" + id + "\x01\x01\x01h:1\x011\x011\x010\x01OFF\x01true\x02" + strings.Repeat("x", 4000)
		props := "KEYS\x01" + id + " order-" + fmt.Sprint(i%7) + "\x02"
		if r := invoke(t, cl, addr, sendReq(topic, 0, []byte(body), props)); r.Code != 0 {
			t.Fatalf("send trace %d: %d %s", i, r.Code, r.Remark)
		}
	}
	if r := invoke(t, cl, addr, sendReq("Keep", 0, []byte("kept"), "")); r.Code != 0 {
		t.Fatalf("send Keep: %d %s", r.Code, r.Remark)
	}
	all := int64(math.MaxInt64)
	found := func(key string) []string {
		resp := invoke(t, cl, addr, remoting.NewRequest(remoting.QueryMessage,
			(&remoting.QueryMessageRequestHeader{Topic: topic, Key: key, MaxNum: 64, EndTimestamp: all}).Encode(), nil))
		var ids []string
		for body := resp.Body; resp.Code == int32(remoting.Success) && len(body) > 0; {
			r, used, err := store.DecodeRecord(body)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := msgtrace.Decode(string(r.Body))
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range recs {
				ids = append(ids, rec.MsgID)
			}
			body = body[used:]
		}
		return ids
	}
	if got := found("MSG0123"); fmt.Sprint(got) != "[MSG0123]" {
		t.Fatalf("QUERY_MESSAGE on the trace topic by msgId MSG0123: %v", got)
	}
	if err := b.store.SealActive(); err != nil {
		t.Fatal(err)
	}
	b.tier.Uploader().Notify()
	end := b.store.MaxPhysOffset()
	waitCond(t, 30*time.Second, "the trace records uploaded", func() bool {
		cl := b.tier.Uploader().Manifest().CommitLog()
		return len(cl) > 0 && cl[len(cl)-1].End() == end
	})
	if got := b.store.MinQueueOffset(topic, 0); got != 0 {
		t.Fatalf("the trace topic's min %d before its retention passed", got)
	}
	skew.Store(int64(2 * time.Minute))
	waitCond(t, 30*time.Second, "the trace records expired", func() bool { return b.store.MinQueueOffset(topic, 0) == n })
	skew.Store(0)
	if got := b.store.MinQueueOffset("Keep", 0); got != 0 {
		t.Fatalf("Keep's min %d: the trace topic's retention expired another topic", got)
	}
}
