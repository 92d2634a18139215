package main

import (
	"context"
	"encoding/json"
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
	a.got[id] = append(a.got[id], arrival{at: time.Now(), msg: m})
}

func (a *arrivals) of(id string) []arrival {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]arrival(nil), a.got[id]...)
}

// startArrivalConsumer subscribes group to topic; handle says whether a
// delivery succeeded (false: retry later).
func startArrivalConsumer(t *testing.T, ns, group, topic string, a *arrivals, handle func(*primitive.MessageExt) bool, opts ...rmqconsumer.Option) {
	t.Helper()
	all := append([]rmqconsumer.Option{
		rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		rmqconsumer.WithGroupName(group),
		rmqconsumer.WithInstance(group),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset),
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
	t.Cleanup(func() {
		quietGroup(ns, topic, group)
		_ = c.Shutdown()
	})
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
		at := time.Now()
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
