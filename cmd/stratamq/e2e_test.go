package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/stratamq/stratamq/remoting"
)

func newClientProducer(t *testing.T, ns string, opts ...rmqproducer.Option) rocketmq.Producer {
	t.Helper()
	all := append([]rmqproducer.Option{
		rmqproducer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		rmqproducer.WithGroupName(uniqueName(t, "pg")),
		rmqproducer.WithInstanceName(uniqueName(t, "pi")),
		rmqproducer.WithRetry(2),
		rmqproducer.WithSendMsgTimeout(10 * time.Second),
	}, opts...)
	p, err := rocketmq.NewProducer(all...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

// received collects messages delivered to push consumers, by body id.
type received struct {
	mu   sync.Mutex
	msgs map[string][]*primitive.MessageExt // UNIQ_KEY/msgId → deliveries
	by   map[string]map[string]bool         // consumer → ids
	n    atomic.Int64
}

func newReceived() *received {
	return &received{msgs: map[string][]*primitive.MessageExt{}, by: map[string]map[string]bool{}}
}

func (r *received) add(who string, m *primitive.MessageExt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := m.GetProperty("id")
	if id == "" {
		id = string(m.Body)
	}
	r.msgs[id] = append(r.msgs[id], m)
	if r.by[who] == nil {
		r.by[who] = map[string]bool{}
	}
	r.by[who][id] = true
	r.n.Add(1)
}

func (r *received) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// newPushConsumer starts an official push consumer, shut down in Cleanup.
// Tests must have received every message sent to it before Cleanup runs:
// rocketmq-client-go's Shutdown closes each process queue's channel while a
// pull that just returned messages may still be sending on it (an unguarded
// close in the client, reported by -race), so shutting a consumer down while
// messages still arrive makes the test fail on the client's race. Cleanup
// also quiets the group first (see quietGroup). The client's instance name
// is who qualified by the test's name: rocketmq-client-go shares one client
// per instance name in a process (and refuses a second name server for
// it), and the end-to-end tests run in parallel.
// noSpanFlowControl raises the official push consumer's flow control by
// offset span to the most it takes (65,535; default: pause a queue whose
// unconsumed messages span more than 2,000 offsets), which no test's
// backlog reaches. Its warning reads the process queue's tree without the
// lock its consuming goroutines hold to remove from it (a data race
// inside rocketmq-client-go, reported under -race against whichever test
// runs then); tests only need its count and size limits.
var noSpanFlowControl = rmqconsumer.WithConsumeConcurrentlyMaxSpan(65535)

func newPushConsumer(t *testing.T, ns, group, topic string, sel rmqconsumer.MessageSelector, r *received, who string, opts ...rmqconsumer.Option) rocketmq.PushConsumer {
	t.Helper()
	all := append([]rmqconsumer.Option{
		rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		rmqconsumer.WithGroupName(group),
		rmqconsumer.WithInstance(who + "-" + strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset),
		noSpanFlowControl,
	}, opts...)
	c, err := rocketmq.NewPushConsumer(all...)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, sel, func(ctx context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
		for _, m := range msgs {
			r.add(who, m)
		}
		return rmqconsumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		quietGroup(ns, topic, group)
		_ = c.Shutdown()
	})
	return c
}

// quietGroup turns NOTIFY_CONSUMER_IDS_CHANGED off for group on the
// brokers that serve topic, best effort (a broker may already be gone).
// Cleanup calls it before each Shutdown: when one consumer of a group
// leaves, the broker tells the others, and rocketmq-client-go reads its
// closed flag while handling that notice without synchronising with its
// own Shutdown, which writes it. A notice arriving while the next consumer
// shuts down then fails the test under -race.
func quietGroup(ns, topic, group string) {
	resp, ok := ask(ns, remoting.NewRequest(remoting.GetRouteinfoByTopic, map[string]string{"topic": topic}, nil), time.Second)
	if !ok {
		return
	}
	route, err := remoting.DecodeTopicRouteData(resp.Body)
	if err != nil {
		return
	}
	g := remoting.DefaultSubscriptionGroupConfig(group)
	g.NotifyConsumerIdsChangedEnable = false
	body, err := json.Marshal(g)
	if err != nil {
		return
	}
	for _, bd := range route.BrokerDatas {
		if addr, ok := bd.BrokerAddrs[0]; ok {
			ask(addr, remoting.NewRequest(remoting.UpdateAndCreateSubscriptionGroup, nil, body), 2*time.Second)
		}
	}
}

func msgWithID(topic string, id int, body []byte) *primitive.Message {
	m := primitive.NewMessage(topic, body)
	m.WithProperty("id", strconv.Itoa(id))
	return m
}

// TestE2ESendModesAndAttributes: sync, async, oneway and batch sends through
// the official client land, and a consumer sees every message once with
// keys, tags and user properties intact.
func TestE2ESendModesAndAttributes(t *testing.T) {
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "T")
	s.createTopic(topic, 4)
	p := newClientProducer(t, s.nsAddr)
	ctx := context.Background()

	id := 0
	next := func(mode string) *primitive.Message {
		id++
		m := msgWithID(topic, id, []byte(fmt.Sprintf("%s-%d", mode, id)))
		m.WithTag("Tag" + mode)
		m.WithKeys([]string{"k" + strconv.Itoa(id), "shared"})
		m.WithProperty("mode", mode)
		return m
	}
	for i := 0; i < 20; i++ {
		res, err := p.SendSync(ctx, next("sync"))
		if err != nil {
			t.Fatalf("SendSync: %v", err)
		}
		if res.Status != primitive.SendOK || len(res.OffsetMsgID) != 32 || res.MsgID == "" {
			t.Fatalf("bad send result %+v", res)
		}
	}
	var wg sync.WaitGroup
	var asyncErr atomic.Value
	for i := 0; i < 20; i++ {
		wg.Add(1)
		err := p.SendAsync(ctx, func(ctx context.Context, res *primitive.SendResult, err error) {
			defer wg.Done()
			if err != nil {
				asyncErr.Store(err)
			}
		}, next("async"))
		if err != nil {
			t.Fatalf("SendAsync: %v", err)
		}
	}
	wg.Wait()
	if e := asyncErr.Load(); e != nil {
		t.Fatalf("async send failed: %v", e)
	}
	for i := 0; i < 20; i++ {
		if err := p.SendOneWay(ctx, next("oneway")); err != nil {
			t.Fatalf("SendOneWay: %v", err)
		}
	}
	for b := 0; b < 4; b++ {
		batch := make([]*primitive.Message, 10)
		for i := range batch {
			batch[i] = next("batch")
		}
		res, err := p.SendSync(ctx, batch...)
		if err != nil {
			t.Fatalf("batch SendSync: %v", err)
		}
		if res.Status != primitive.SendOK {
			t.Fatalf("batch status %v", res.Status)
		}
	}
	total := id

	r := newReceived()
	newPushConsumer(t, s.nsAddr, uniqueName(t, "cg"), topic, rmqconsumer.MessageSelector{}, r, "c1")
	waitFor(t, 60*time.Second, "all messages consumed", func() bool { return r.distinct() >= total })
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 1; i <= total; i++ {
		ms := r.msgs[strconv.Itoa(i)]
		if len(ms) == 0 {
			t.Fatalf("message %d missing", i)
		}
		m := ms[0]
		mode := m.GetProperty("mode")
		if want := fmt.Sprintf("%s-%d", mode, i); string(m.Body) != want {
			t.Fatalf("message %d body %q want %q", i, m.Body, want)
		}
		if m.GetTags() != "Tag"+mode {
			t.Fatalf("message %d tag %q want Tag%s", i, m.GetTags(), mode)
		}
		if m.GetKeys() != "k"+strconv.Itoa(i)+" shared" {
			t.Fatalf("message %d keys %q", i, m.GetKeys())
		}
		if m.StoreHost == "" || m.QueueOffset < 0 || m.CommitLogOffset < 0 {
			t.Fatalf("message %d lacks broker fields: %+v", i, m)
		}
	}
}

// TestE2EClusteringSharesQueues: two push consumers of one group split the
// topic's queues; once the group has rebalanced, every message reaches
// exactly one of them. (During a rebalance RocketMQ is at-least-once: a
// queue moving between clients may be delivered twice. The test first waits,
// with probe messages, until queue ownership is settled.)
func TestE2EClusteringSharesQueues(t *testing.T) {
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "T")
	s.createTopic(topic, 4)
	group := uniqueName(t, "cg")
	r := newReceived()
	newPushConsumer(t, s.nsAddr, group, topic, rmqconsumer.MessageSelector{}, r, "c1")
	newPushConsumer(t, s.nsAddr, group, topic, rmqconsumer.MessageSelector{}, r, "c2")
	waitFor(t, 30*time.Second, "two consumers in the group", func() bool { return len(consumerIDs(t, s.brokAddr, group)) == 2 })

	p := newClientProducer(t, s.nsAddr, rmqproducer.WithQueueSelector(rmqproducer.NewManualQueueSelector()))
	owners := func(round int) (map[int]string, bool) {
		for q := 0; q < 4; q++ {
			m := primitive.NewMessage(topic, []byte("probe"))
			m.WithProperty("id", fmt.Sprintf("probe-%d-%d", round, q))
			m.Queue = &primitive.MessageQueue{Topic: topic, BrokerName: "broker-a", QueueId: q}
			if _, err := p.SendSync(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 30*time.Second, "probes delivered", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			for q := 0; q < 4; q++ {
				if len(r.msgs[fmt.Sprintf("probe-%d-%d", round, q)]) == 0 {
					return false
				}
			}
			return true
		})
		r.mu.Lock()
		defer r.mu.Unlock()
		own := map[int]string{}
		once := true
		for q := 0; q < 4; q++ {
			id := fmt.Sprintf("probe-%d-%d", round, q)
			n := 0
			for who, ids := range r.by {
				if ids[id] {
					own[q] = who
					n++
				}
			}
			once = once && n == 1
		}
		return own, once
	}
	var prev map[int]string
	settled := false
	for round := 0; round < 30 && !settled; round++ {
		own, once := owners(round)
		distinctOwners := map[string]bool{}
		for _, w := range own {
			distinctOwners[w] = true
		}
		settled = once && len(distinctOwners) == 2 && fmt.Sprint(own) == fmt.Sprint(prev)
		prev = own
	}
	if !settled {
		t.Fatalf("queue ownership never settled between two consumers: %v", prev)
	}

	p2 := newClientProducer(t, s.nsAddr)
	const n = 200
	for i := 0; i < n; i++ {
		if _, err := p2.SendSync(context.Background(), msgWithID(topic, i, []byte("m"+strconv.Itoa(i)))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 60*time.Second, "all messages consumed", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := 0; i < n; i++ {
			if len(r.msgs[strconv.Itoa(i)]) == 0 {
				return false
			}
		}
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	per := map[string]int{}
	for i := 0; i < n; i++ {
		id := strconv.Itoa(i)
		ms := r.msgs[id]
		if len(ms) != 1 {
			t.Fatalf("message %s delivered %d times", id, len(ms))
		}
		for who, ids := range r.by {
			if ids[id] {
				per[who]++
			}
		}
	}
	if per["c1"] == 0 || per["c2"] == 0 || per["c1"]+per["c2"] != n {
		t.Fatalf("queues not shared: %v", per)
	}
}

// TestE2EBroadcasting: every broadcasting consumer gets every message.
func TestE2EBroadcasting(t *testing.T) {
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "T")
	s.createTopic(topic, 4)
	group := uniqueName(t, "bg")
	r1, r2 := newReceived(), newReceived()
	newPushConsumer(t, s.nsAddr, group, topic, rmqconsumer.MessageSelector{}, r1, "b1", rmqconsumer.WithConsumerModel(rmqconsumer.BroadCasting))
	newPushConsumer(t, s.nsAddr, group, topic, rmqconsumer.MessageSelector{}, r2, "b2", rmqconsumer.WithConsumerModel(rmqconsumer.BroadCasting))
	waitFor(t, 30*time.Second, "two consumers in the group", func() bool { return len(consumerIDs(t, s.brokAddr, group)) == 2 })
	p := newClientProducer(t, s.nsAddr)
	const n = 100
	for i := 0; i < n; i++ {
		if _, err := p.SendSync(context.Background(), msgWithID(topic, i, []byte("m"))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 60*time.Second, "both consumers got everything", func() bool { return r1.distinct() >= n && r2.distinct() >= n })
}

// TestE2ETagFilter: a TagA || TagC subscription receives exactly those tags.
func TestE2ETagFilter(t *testing.T) {
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "T")
	s.createTopic(topic, 2)
	p := newClientProducer(t, s.nsAddr)
	tags := []string{"TagA", "TagB", "TagC", "TagD"}
	want := 0
	for i := 0; i < 80; i++ {
		tag := tags[i%4]
		if tag == "TagA" || tag == "TagC" {
			want++
		}
		m := msgWithID(topic, i, []byte(tag))
		m.WithTag(tag)
		if _, err := p.SendSync(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	r := newReceived()
	newPushConsumer(t, s.nsAddr, uniqueName(t, "cg"), topic, rmqconsumer.MessageSelector{Type: rmqconsumer.TAG, Expression: "TagA || TagC"}, r, "c1")
	waitFor(t, 60*time.Second, "tagged messages consumed", func() bool { return r.distinct() >= want })
	// Produce a sentinel after the filtered ones and wait for it, so any
	// wrongly delivered message would have arrived too.
	m := msgWithID(topic, 1000, []byte("TagA"))
	m.WithTag("TagA")
	if _, err := p.SendSync(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "sentinel", func() bool { return r.distinct() >= want+1 })
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, ms := range r.msgs {
		if tg := ms[0].GetTags(); tg != "TagA" && tg != "TagC" {
			t.Fatalf("message %s with tag %q delivered to TagA || TagC", id, tg)
		}
	}
}

// TestE2EResumeAfterRestart: a group that consumed and committed resumes at
// its committed offset after the broker restarts on the same data dir.
func TestE2EResumeAfterRestart(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "T")
	s.createTopic(topic, 4)
	group := uniqueName(t, "cg")
	p := newClientProducer(t, s.nsAddr)
	for i := 0; i < 100; i++ {
		if _, err := p.SendSync(context.Background(), msgWithID(topic, i, []byte("first"))); err != nil {
			t.Fatal(err)
		}
	}
	r1 := newReceived()
	c1 := newPushConsumer(t, s.nsAddr, group, topic, rmqconsumer.MessageSelector{}, r1, "c1")
	waitFor(t, 60*time.Second, "first 100 consumed", func() bool { return r1.distinct() >= 100 })
	waitCommitted(t, c1, s.brokAddr, group, topic, 4, 100)
	if err := c1.Shutdown(); err != nil {
		t.Fatal(err)
	}
	_ = p.Shutdown()
	s.restart()

	p2 := newClientProducer(t, s.nsAddr)
	for i := 100; i < 150; i++ {
		if _, err := p2.SendSync(context.Background(), msgWithID(topic, i, []byte("second"))); err != nil {
			t.Fatal(err)
		}
	}
	r2 := newReceived()
	newPushConsumer(t, s.nsAddr, group, topic, rmqconsumer.MessageSelector{}, r2, "c2")
	waitFor(t, 60*time.Second, "second 50 consumed", func() bool { return r2.distinct() >= 50 })
	r2.mu.Lock()
	defer r2.mu.Unlock()
	var redelivered []string
	for id, ms := range r2.msgs {
		if string(ms[0].Body) != "second" {
			redelivered = append(redelivered, fmt.Sprintf("%s@q%d/%d", id, ms[0].Queue.QueueId, ms[0].QueueOffset))
		}
	}
	if len(redelivered) > 0 {
		t.Fatalf("redelivered after restart (group did not resume at its committed offset): %v", redelivered)
	}
}

// TestE2ESyncFlushSends: with STRATAMQ_FLUSH=sync (acks written after the
// group commit's fdatasync, off the request goroutine) the official client's
// sync, async and batch sends are acknowledged and every message is consumed.
func TestE2ESyncFlushSends(t *testing.T) {
	s := startServe(t, t.TempDir(), map[string]string{"STRATAMQ_FLUSH": "sync"})
	topic := uniqueName(t, "T")
	s.createTopic(topic, 4)
	p := newClientProducer(t, s.nsAddr)
	id := 0
	for i := 0; i < 50; i++ {
		if _, err := p.SendSync(context.Background(), msgWithID(topic, id, []byte("sync"))); err != nil {
			t.Fatal(err)
		}
		id++
	}
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := 0; i < 50; i++ {
		wg.Add(1)
		err := p.SendAsync(context.Background(), func(ctx context.Context, res *primitive.SendResult, err error) {
			defer wg.Done()
			if err != nil {
				failed.Store(err)
			}
		}, msgWithID(topic, id, []byte("async")))
		if err != nil {
			t.Fatal(err)
		}
		id++
	}
	wg.Wait()
	if e := failed.Load(); e != nil {
		t.Fatal(e)
	}
	batch := make([]*primitive.Message, 20)
	for i := range batch {
		batch[i] = msgWithID(topic, id, []byte("batch"))
		id++
	}
	if _, err := p.SendSync(context.Background(), batch...); err != nil {
		t.Fatal(err)
	}
	r := newReceived()
	newPushConsumer(t, s.nsAddr, uniqueName(t, "cg"), topic, rmqconsumer.MessageSelector{}, r, "c1")
	waitFor(t, 60*time.Second, "all sync-flushed messages consumed", func() bool { return r.distinct() >= id })
}
