package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// arrivals records when each message (by its "id" property) reached a
// push consumer, with the message.
type arrivals struct {
	mu  sync.Mutex
	got map[string][]arrival
}

type arrival struct {
	at  time.Time
	msg *primitive.MessageExt
}

func newArrivals() *arrivals { return &arrivals{got: map[string][]arrival{}} }

func (a *arrivals) add(m *primitive.MessageExt) {
	a.mu.Lock()
	defer a.mu.Unlock()
	id := m.GetProperty("id")
	a.got[id] = append(a.got[id], arrival{at: time.Now().Truncate(time.Millisecond), msg: m})
}

func (a *arrivals) of(id string) []arrival {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]arrival(nil), a.got[id]...)
}

// startArrivalConsumer subscribes group to topic; handle says whether a
// delivery succeeded (false: retry later). It returns a stop function
// (also run at Cleanup; idempotent).
func startArrivalConsumer(t *testing.T, ns, group, topic string, a *arrivals, handle func(*primitive.MessageExt) bool, opts ...rmqconsumer.Option) func() {
	t.Helper()
	all := append([]rmqconsumer.Option{
		rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		rmqconsumer.WithGroupName(group),
		rmqconsumer.WithInstance(uniqueName(t, "ci")),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset),
		noSpanFlowControl,
	}, opts...)
	c, err := rmqconsumer.NewPushConsumer(all...)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, rmqconsumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
		res := rmqconsumer.ConsumeSuccess
		for _, m := range msgs {
			a.add(m)
			if handle != nil && !handle(m) {
				res = rmqconsumer.ConsumeRetryLater
			}
		}
		return res, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			quietGroup(ns, topic, group)
			_ = c.Shutdown()
		})
	}
	t.Cleanup(stop)
	return stop
}

// checkDelivered checks what a scheduled message looks like to the client
// once delivered: its own topic, the msgId the send returned, DELAY gone,
// REAL_TOPIC kept (as RocketMQ does).
func checkDelivered(t *testing.T, what string, m *primitive.MessageExt, topic, msgID string) {
	t.Helper()
	if m.Topic != topic || m.MsgId != msgID {
		t.Fatalf("%s: delivered as topic %q msgId %q, want %q %q", what, m.Topic, m.MsgId, topic, msgID)
	}
	if v := m.GetProperty(broker.PropDelay); v != "" {
		t.Fatalf("%s: DELAY=%s still set after delivery", what, v)
	}
	if v := m.GetProperty(broker.PropRealTopic); v != topic {
		t.Fatalf("%s: REAL_TOPIC=%q, want %q", what, v, topic)
	}
}

// TestE2EDelayLevelAndTimer: with the official client, a DELAY level 2
// message (5 s) is delivered no earlier than 5 s after it was sent and
// within 6 s; a timer message (WithDelayTimestamp: TIMER_DELIVER_MS) and a
// TIMER_DELAY_SEC one at their time (never early, within 1 s); a timer past
// STRATAMQ_TIMER_MAX_DELAY is refused with MESSAGE_ILLEGAL and a remark.
func TestE2EDelayLevelAndTimer(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir(), map[string]string{"STRATAMQ_TIMER_MAX_DELAY": "1h"})
	topic := uniqueName(t, "T")
	s.createTopic(topic, 2)
	p := newClientProducer(t, s.nsAddr)
	a := newArrivals()
	startArrivalConsumer(t, s.nsAddr, uniqueName(t, "cg"), topic, a, nil)
	ctx := context.Background()

	// A plain message first: the consumer is up when the scheduled ones come.
	if _, err := p.SendSync(ctx, msgWithID(topic, 0, []byte("plain"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the plain message", func() bool { return len(a.of("0")) > 0 })

	type sent struct {
		id    string
		at    time.Time
		due   time.Time
		msgID string
	}
	send := func(id int, mod func(*primitive.Message), due time.Duration) sent {
		m := msgWithID(topic, id, []byte("scheduled-"+strconv.Itoa(id)))
		at := time.Now().Truncate(time.Millisecond) // as the broker stamps records
		mod(m)
		res, err := p.SendSync(ctx, m)
		if err != nil {
			t.Fatalf("send %d: %v", id, err)
		}
		return sent{id: strconv.Itoa(id), at: at, due: at.Add(due), msgID: res.MsgID}
	}
	level2 := send(1, func(m *primitive.Message) { m.WithDelayTimeLevel(2) }, 5*time.Second)
	var timerAt time.Time
	timer := send(2, func(m *primitive.Message) {
		timerAt = time.Now().Add(3500 * time.Millisecond)
		m.WithDelayTimestamp(timerAt)
	}, 3500*time.Millisecond)
	timer.due = timerAt.Truncate(time.Millisecond)
	delaySec := send(3, func(m *primitive.Message) { m.WithProperty(broker.PropTimerDelaySec, "2") }, 2*time.Second)

	far := msgWithID(topic, 4, []byte("too far"))
	far.WithDelayTimestamp(time.Now().Add(2 * time.Hour))
	_, err := p.SendSync(ctx, far)
	if err == nil || !strings.Contains(err.Error(), "CODE: 13") || !strings.Contains(err.Error(), "max delay") {
		t.Fatalf("a timer 2h ahead with STRATAMQ_TIMER_MAX_DELAY=1h: got %v, want MESSAGE_ILLEGAL (13) naming the max delay", err)
	}

	for _, c := range []struct {
		what string
		s    sent
		late time.Duration
	}{{"delay level 2", level2, time.Second}, {"timer (TIMER_DELIVER_MS)", timer, time.Second}, {"TIMER_DELAY_SEC", delaySec, time.Second}} {
		waitFor(t, 15*time.Second, c.what+" delivered", func() bool { return len(a.of(c.s.id)) > 0 })
		got := a.of(c.s.id)[0]
		// The delivered record was stored when it came due: no earlier
		// than the due time (the broker's clock is this process's).
		stored := time.UnixMilli(got.msg.StoreTimestamp)
		if stored.Before(c.s.due) {
			t.Fatalf("%s: stored in its topic at %s, %s before it was due", c.what, stored.Format(time.StampMilli), c.s.due.Sub(stored))
		}
		if lateBy := got.at.Sub(c.s.due); lateBy > c.late {
			t.Fatalf("%s: delivered %s after its due time, want within %s", c.what, lateBy, c.late)
		}
		t.Logf("%s: due %s after the send, stored %s late, delivered %s late", c.what, c.s.due.Sub(c.s.at),
			stored.Sub(c.s.due), got.at.Sub(c.s.due))
		checkDelivered(t, c.what, got.msg, topic, c.s.msgID)
	}
	if v := a.of(timer.id)[0].msg.GetProperty(broker.PropTimerDeliverMs); v != strconv.FormatInt(timer.due.UnixMilli(), 10) {
		t.Fatalf("timer: TIMER_DELIVER_MS=%q after delivery, want %d", v, timer.due.UnixMilli())
	}
}

// setRetryMaxTimes sets a group's retryMaxTimes on the broker
// (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, as mqadmin updateSubGroup does).
func setRetryMaxTimes(t *testing.T, brokerAddr, group string, n int32) {
	t.Helper()
	g := remoting.DefaultSubscriptionGroupConfig(group)
	g.RetryMaxTimes = n
	g.NotifyConsumerIdsChangedEnable = false
	body, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ask(brokerAddr, remoting.NewRequest(remoting.UpdateAndCreateSubscriptionGroup, nil, body), 5*time.Second); !ok {
		t.Fatal("update subscription group refused")
	}
}

// checkRetries checks a message's deliveries up to n: delivery i has
// reconsume times i, the original topic and msgId (client-go restores them
// from RETRY_TOPIC), and was stored in the retry topic no earlier than the
// backoff of level 3+(i-1) after delivery i-1 had been handled.
func checkRetries(t *testing.T, got []arrival, n int, topic, msgID string, levels []time.Duration) {
	t.Helper()
	if len(got) < n {
		t.Fatalf("%d deliveries, want %d", len(got), n)
	}
	for i := 0; i < n; i++ {
		m := got[i].msg
		if m.Topic != topic || m.MsgId != msgID || int(m.ReconsumeTimes) != i {
			t.Fatalf("delivery %d: topic %q msgId %q reconsumeTimes %d, want %q %q %d", i, m.Topic, m.MsgId, m.ReconsumeTimes, topic, msgID, i)
		}
		if i == 0 {
			continue
		}
		backoff := levels[min(2+i-1, len(levels)-1)]
		stored := time.UnixMilli(m.StoreTimestamp)
		if gap := stored.Sub(got[i-1].at); gap < backoff {
			t.Fatalf("retry %d came back %s after the failed delivery, before its backoff %s", i, gap, backoff)
		}
		if gap := got[i].at.Sub(got[i-1].at); gap > backoff+3*time.Second {
			t.Fatalf("retry %d came back %s after the failed delivery (stored in the retry topic after %s), want about its backoff %s",
				i, gap, stored.Sub(got[i-1].at), backoff)
		}
		if m.GetProperty(broker.PropOriginMessageID) != msgID || m.GetProperty(broker.PropRetryTopic) != topic {
			t.Fatalf("retry %d: ORIGIN_MESSAGE_ID %q RETRY_TOPIC %q", i, m.GetProperty(broker.PropOriginMessageID), m.GetProperty(broker.PropRetryTopic))
		}
		t.Logf("retry %d: back %s after the failed delivery (backoff %s)", i, got[i].at.Sub(got[i-1].at), backoff)
	}
}

// TestE2ERetryBackoffAndDLQ: a message the official push consumer keeps
// failing comes back after delay level 3, then 4 (small levels here), with
// reconsume times 1, 2 and its original topic and msgId; after the
// maximum (2) it is in %DLQ%<group>, where `admin dlqList` shows it and
// `admin dlqResend` sends it back to that group only (its original topic
// and msgId again, reconsume times 0).
func TestE2ERetryBackoffAndDLQ(t *testing.T) {
	t.Parallel()
	const levelStr = "1s 1s 2s 3s 1s"
	levels, err := broker.ParseDelayLevels(levelStr)
	if err != nil {
		t.Fatal(err)
	}
	s := startServe(t, t.TempDir(), map[string]string{"STRATAMQ_DELAY_LEVELS": levelStr})
	topic := uniqueName(t, "T")
	s.createTopic(topic, 2)
	group := uniqueName(t, "cg")
	setRetryMaxTimes(t, s.brokAddr, group, 2)
	// The retry topic exists before the consumer starts, so that it routes
	// and pulls it at once (a retry topic made by the first heartbeat is
	// learned at the client's next route refresh, up to 30 s later).
	s.createTopic("%RETRY%"+group, 1)
	p := newClientProducer(t, s.nsAddr)
	a := newArrivals()
	var failing sync.Map // id → true while its deliveries fail
	failing.Store("1", true)
	startArrivalConsumer(t, s.nsAddr, group, topic, a, func(m *primitive.MessageExt) bool {
		_, fail := failing.Load(m.GetProperty("id"))
		return !fail
	}, rmqconsumer.WithMaxReconsumeTimes(2))
	res, err := p.SendSync(context.Background(), msgWithID(topic, 1, []byte("fails")))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the first delivery and two retries", func() bool { return len(a.of("1")) >= 3 })
	checkRetries(t, a.of("1"), 3, topic, res.MsgID, levels)

	env := map[string]string{}
	var out string
	waitFor(t, 10*time.Second, "dlqList to show the message", func() bool {
		code, o, _ := runAdminCmd(env, "dlqList", "-g", group, "-n", s.nsAddr)
		out = o
		return code == 0 && strings.Contains(o, "msgId "+res.MsgID)
	})
	if !strings.Contains(out, ": 1 messages\n") || !strings.Contains(out, "originTopic "+topic+" reconsumeTimes 3 ") {
		t.Fatalf("dlqList:\n%s", out)
	}
	t.Logf("dlqList:\n%s", out)
	// In the DLQ: no further retry (the next backoff would be level 5, 1s).
	time.Sleep(2 * time.Second) // a bounded wait for something that must not happen
	if n := len(a.of("1")); n != 3 {
		t.Fatalf("%d deliveries after the message went to the DLQ, want 3", n)
	}

	failing.Delete("1")
	if code, o, e := runAdminCmd(env, "dlqResend", "-g", group, "-b", s.brokAddr, "--msgId", res.MsgID); code != 0 ||
		!strings.Contains(o, "1 messages resent to %RETRY%"+group) {
		t.Fatalf("dlqResend: exit %d\n%s%s", code, o, e)
	}
	waitFor(t, 20*time.Second, "the resent message", func() bool { return len(a.of("1")) >= 4 })
	m := a.of("1")[3].msg
	if m.Topic != topic || m.MsgId != res.MsgID || m.ReconsumeTimes != 0 || string(m.Body) != "fails" {
		t.Fatalf("resent message: topic %q msgId %q reconsumeTimes %d body %q", m.Topic, m.MsgId, m.ReconsumeTimes, m.Body)
	}
	if code, _, e := runAdminCmd(env, "dlqResend", "-g", group, "-b", s.brokAddr, "--msgId", "0A0B0C"); code == 0 ||
		!strings.Contains(e, "msgIds were asked for") {
		t.Fatalf("dlqResend of an unknown msgId: exit %d: %s", code, e)
	}
}

// TestE2EScheduledFromBucketAndRestore: with STRATAMQ_LOCAL_RETENTION=0
// and 1 MiB segments, a delayed message and a retry whose originals left
// the local disk are still delivered (read from the bucket), and after a
// graceful stop and a start on an empty disk from the bucket a pending
// delayed message and a pending retry are delivered at their time, with
// nothing delivered before redelivered (progress from the checkpoint).
func TestE2EScheduledFromBucketAndRestore(t *testing.T) {
	t.Parallel()
	// Level 4 (d1's) leaves the first segment 14 s to seal, upload and
	// leave the local disk first, on a loaded machine too: it took 2-4 s
	// under -race (logged below; the check after the wait fails the test
	// if it ever takes longer). It was 30 s, 16 s of waiting for d1 alone.
	const levelStr = "1s 2s 4s 15s"
	levels, _ := broker.ParseDelayLevels(levelStr)
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(t.TempDir(), "bucket")
	s := startServe(t, dir, map[string]string{
		"STRATAMQ_BUCKET": bucket, "STRATAMQ_SEGMENT_SIZE": "1MiB", "STRATAMQ_LOCAL_RETENTION": "0",
		"STRATAMQ_DELAY_LEVELS": levelStr, "STRATAMQ_CHECKPOINT_INTERVAL": "1s",
	})
	topic := uniqueName(t, "T")
	s.createTopic(topic, 2)
	group := uniqueName(t, "cg")
	s.createTopic("%RETRY%"+group, 1)
	p := newClientProducer(t, s.nsAddr)
	ctx := context.Background()
	send := func(id string, mod func(*primitive.Message)) (time.Time, string) {
		t.Helper()
		m := primitive.NewMessage(topic, []byte("body-"+id))
		m.WithProperty("id", id)
		if mod != nil {
			mod(m)
		}
		at := time.Now().Truncate(time.Millisecond) // as the broker stamps records
		res, err := p.SendSync(ctx, m)
		if err != nil {
			t.Fatalf("send %s: %v", id, err)
		}
		return at, res.MsgID
	}
	filler := func() {
		t.Helper()
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < 40; i++ { // 2.5 MiB: the segment of the messages above seals and uploads
			big := make([]byte, 64<<10) // incompressible (client-go zips bodies over 4 KiB)
			for j := range big {
				big[j] = byte(rng.UintN(256))
			}
			if _, err := p.SendSync(ctx, primitive.NewMessage(topic, big)); err != nil {
				t.Fatal(err)
			}
		}
	}
	localSegments := func() []string {
		ents, _ := os.ReadDir(filepath.Join(s.env["STRATAMQ_DATA_DIR"], "store", "commitlog"))
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}

	d1At, d1ID := send("d1", func(m *primitive.Message) { m.WithDelayTimeLevel(4) })
	_, rID := send("r", nil)
	filler()
	waitFor(t, 20*time.Second, "the first segment uploaded and dropped locally", func() bool {
		segs := localSegments()
		return len(segs) > 0 && segs[0] != "00000000000000000000"
	})
	t.Logf("the first segment left the local disk %s after d1 was sent (d1 is due after %s)", time.Since(d1At).Round(time.Millisecond), levels[3])
	if time.Since(d1At) > levels[3]-time.Second {
		t.Fatalf("the first segment left the local disk only %s after d1 was sent: d1 may have been delivered from it", time.Since(d1At))
	}

	a := newArrivals()
	failed := sync.Map{}
	handle := func(m *primitive.MessageExt) bool {
		id := m.GetProperty("id")
		if id != "r" && id != "r2" {
			return true
		}
		_, again := failed.LoadOrStore(id+"#"+strconv.Itoa(int(m.ReconsumeTimes)), true)
		return again || m.ReconsumeTimes > 0 // each fails on its first delivery only
	}
	stopConsumer := startArrivalConsumer(t, s.nsAddr, group, topic, a, handle)
	waitFor(t, 60*time.Second, "d1 and the retry of r (both from the bucket)", func() bool {
		return len(a.of("d1")) > 0 && len(a.of("r")) >= 2
	})
	t.Logf("d1 and r's retry arrived %s after d1 was sent", time.Since(d1At))
	got := a.of("d1")[0]
	if stored := time.UnixMilli(got.msg.StoreTimestamp); stored.Before(d1At.Add(levels[3])) {
		t.Fatalf("d1 stored in its topic %s after the send, before its delay %s", stored.Sub(d1At), levels[3])
	}
	checkDelivered(t, "d1", got.msg, topic, d1ID)
	checkRetries(t, a.of("r"), 2, topic, rID, levels)

	// A pending retry and a pending delayed message, then a stop and a
	// start on an empty disk.
	// r2's retry (delay level 3 + reconsume times 0 = 3: the schedule
	// topic's queue 2) must be stored before the consumer stops: a
	// send-back the stop cuts short is retried by the client in-process
	// (same record, its ReconsumeTimes raised), never by the broker.
	scheduleMax := func() int64 {
		h := remoting.QueueRequestHeader{Topic: "SCHEDULE_TOPIC_XXXX", QueueID: 2}
		r, ok := ask(s.brokAddr, remoting.NewRequest(remoting.GetMaxOffset, h.Encode(), nil), 5*time.Second)
		if !ok {
			return -1
		}
		v, _ := strconv.ParseInt(r.ExtFields["offset"], 10, 64)
		return v
	}
	before := scheduleMax()
	_, r2ID := send("r2", nil)
	waitFor(t, 20*time.Second, "r2's first delivery", func() bool { return len(a.of("r2")) > 0 })
	waitFor(t, 20*time.Second, "r2's retry stored by the broker", func() bool { return scheduleMax() > before })
	d2At, d2ID := send("d2", func(m *primitive.Message) { m.WithDelayTimeLevel(3) })
	stopConsumer() // a new one after the restart: client-go takes long to follow a restarted name server
	t0 := time.Now()
	s.stop()
	t.Logf("graceful stop took %s", time.Since(t0))
	s.env["STRATAMQ_DATA_DIR"] = t.TempDir()
	s.start()
	t.Logf("restart on an empty disk took %s", time.Since(t0))
	startArrivalConsumer(t, s.nsAddr, group, topic, a, handle)
	if !strings.Contains(s.logs.String(), "restored from the bucket") {
		t.Fatalf("the broker on the empty disk did not restore from the bucket:\n%s", s.logs.String())
	}
	retried := func(id string) bool {
		for _, d := range a.of(id) {
			if d.msg.ReconsumeTimes > 0 {
				return true
			}
		}
		return false
	}
	waitFor(t, 40*time.Second, "d2 and the retry of r2 after the restore", func() bool {
		return len(a.of("d2")) > 0 && retried("r2")
	})
	t.Logf("d2 and r2's retry arrived %s after the stop began", time.Since(t0))
	got = a.of("d2")[0]
	if stored := time.UnixMilli(got.msg.StoreTimestamp); stored.Before(d2At.Add(levels[2])) {
		t.Fatalf("d2 stored in its topic %s after the send, before its delay %s", stored.Sub(d2At), levels[2])
	}
	checkDelivered(t, "d2", got.msg, topic, d2ID)
	var retry *primitive.MessageExt
	var failedAt time.Time
	for _, d := range a.of("r2") {
		if d.msg.ReconsumeTimes == 0 && failedAt.IsZero() {
			failedAt = d.at
		}
		if d.msg.ReconsumeTimes == 1 && retry == nil {
			retry = d.msg
		}
	}
	if m := retry; m == nil || m.Topic != topic || m.MsgId != r2ID || time.UnixMilli(m.StoreTimestamp).Before(failedAt.Add(levels[2])) {
		t.Fatalf("r2's retry after the restore: %+v (failed at %s, backoff %s)", m, failedAt, levels[2])
	}
	// Nothing the schedule service delivered before the stop is stored
	// again after it: each message has as many records in its topic as
	// before (a consumer may see one twice: at-least-once consumer offsets).
	for id, want := range map[string]int{"d1": 1, "r": 2} {
		recs := map[string]bool{}
		for _, d := range a.of(id) {
			recs[d.msg.OffsetMsgId] = true
		}
		if len(recs) != want {
			t.Fatalf("%s: %d records delivered, want %d (schedule progress lost in the restore?)", id, len(recs), want)
		}
	}
}

// TestE2EOrderlyRetriesThenDLQ: rocketmq-client-go's orderly consumer
// retries a failing message locally (the queue suspended, reconsume times
// counted by the client) until its reconsume times pass
// WithMaxReconsumeTimes, then sends it back with delay level -1; the
// broker puts it in %DLQ%<group> at once (no retry topic, no delay), as
// RocketMQ does.
func TestE2EOrderlyRetriesThenDLQ(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "T")
	s.createTopic(topic, 1)
	group := uniqueName(t, "og")
	p := newClientProducer(t, s.nsAddr)
	var mu sync.Mutex
	var times []int32
	c, err := rmqconsumer.NewPushConsumer(
		rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver([]string{s.nsAddr})),
		rmqconsumer.WithGroupName(group), rmqconsumer.WithInstance(uniqueName(t, "oi")),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset),
		rmqconsumer.WithConsumerOrder(true), rmqconsumer.WithMaxReconsumeTimes(2))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, rmqconsumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			times = append(times, m.ReconsumeTimes)
		}
		return rmqconsumer.SuspendCurrentQueueAMoment, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		quietGroup(s.nsAddr, topic, group)
		_ = c.Shutdown()
	})
	res, err := p.SendSync(context.Background(), msgWithID(topic, 1, []byte("orderly")))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	var out string
	waitFor(t, 30*time.Second, "the message in the DLQ", func() bool {
		code, o, _ := runAdminCmd(env, "dlqList", "-g", group, "-b", s.brokAddr)
		out = o
		return code == 0 && strings.Contains(o, "msgId "+res.MsgID)
	})
	mu.Lock()
	got := append([]int32(nil), times...)
	mu.Unlock()
	// Local attempts with reconsume times 0..3 (3 > 2 sends it back).
	if len(got) != 4 || got[0] != 0 || got[3] != 3 {
		t.Fatalf("orderly attempts with reconsume times %v, want [0 1 2 3]", got)
	}
	if !strings.Contains(out, "originTopic "+topic+" reconsumeTimes 1 ") {
		t.Fatalf("dlqList:\n%s", out)
	}
	// Never through the retry topic: it holds nothing.
	resp, ok := ask(s.brokAddr, remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": "%RETRY%" + group, "queueId": "0"}, nil), 2*time.Second)
	if ok && resp.ExtFields["offset"] != "0" {
		t.Fatalf("the retry topic holds %s messages", resp.ExtFields["offset"])
	}
}
