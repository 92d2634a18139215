package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/pop"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// popClock is the POP engine's clock in tests: it moves only when told.
type popClock struct{ ms atomic.Int64 }

func newPopClock() *popClock {
	c := &popClock{}
	c.ms.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli())
	return c
}
func (c *popClock) now() time.Time        { return time.UnixMilli(c.ms.Load()) }
func (c *popClock) add(d time.Duration)   { c.ms.Add(d.Milliseconds()) }
func (c *popClock) install(b *Broker)     { b.pop.SetClock(c.now) }
func (c *popClock) hook() func(b *Broker) { return c.install }
func popCfg(t *testing.T) Config {
	return Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20}
}
func popDeps() Deps        { return Deps{Logger: discardLogger()} }
func popBody(i int) []byte { return []byte(fmt.Sprintf("message-%d", i)) }
func popBodies(ms []PopMessage) (s []string) {
	return popMap(ms, func(m PopMessage) string { return string(m.Record.Body) })
}
func popMap[T any](ms []PopMessage, f func(PopMessage) T) []T {
	out := make([]T, 0, len(ms))
	for _, m := range ms {
		out = append(out, f(m))
	}
	return out
}

// popSend sends n messages to topic's queue (with tag, if set) and
// returns their bodies.
func popSend(t *testing.T, b *Broker, cl *remoting.Client, topic string, queue, from, n int, tag string) []string {
	t.Helper()
	var bodies []string
	for i := from; i < from+n; i++ {
		props := ""
		if tag != "" {
			props = "TAGS\x01" + tag + "\x02"
		}
		if r := invoke(t, cl, b.Addr().String(), sendReq(topic, queue, popBody(i), props)); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
		bodies = append(bodies, string(popBody(i)))
	}
	return bodies
}

func popRecv(t *testing.T, b *Broker, req PopRequest) []PopMessage {
	t.Helper()
	if req.Invisible == 0 {
		req.Invisible = 30 * time.Second
	}
	ms, err := b.PopReceive(context.Background(), req)
	if err != nil {
		t.Fatalf("receive %+v: %v", req, err)
	}
	return ms
}

func popCommitted(b *Broker, group, topic string, q int32) int64 {
	off, ok := b.offsets.Query(group, topic, q)
	if !ok {
		return -1
	}
	return off
}

// TestPopReceiveAck: a receive makes messages invisible and hands out
// handles; an ack takes a message out of flight, once; the group's
// committed offset moves past contiguous acked offsets only.
func TestPopReceiveAck(t *testing.T) {
	t.Parallel()
	clock := newPopClock()
	b, cl, _ := runBrokerWith(t, popCfg(t), popDeps(), clock.hook())
	want := popSend(t, b, cl, "PopT", 0, 0, 4, "")
	got := popRecv(t, b, PopRequest{Group: "G", Topic: "PopT", MaxMessages: 10})
	if !slices.Equal(popBodies(got), want) {
		t.Fatalf("received %v, want %v", popBodies(got), want)
	}
	for i, m := range got {
		if m.Attempt != 1 || m.Record.QueueOffset != int64(i) || m.Record.Topic != "PopT" {
			t.Fatalf("message %d: attempt %d offset %d topic %s", i, m.Attempt, m.Record.QueueOffset, m.Record.Topic)
		}
		if !m.InvisibleUntil.Equal(clock.now().Add(30 * time.Second)) {
			t.Fatalf("invisible until %v, want %v", m.InvisibleUntil, clock.now().Add(30*time.Second))
		}
	}
	if again := popRecv(t, b, PopRequest{Group: "G", Topic: "PopT"}); len(again) != 0 {
		t.Fatalf("invisible messages received again: %v", popBodies(again))
	}
	// Ack 1 and 2: progress stays at 0 (0 is in flight).
	for _, i := range []int{1, 2} {
		if err := b.PopAck("G", "PopT", got[i].Handle); err != nil {
			t.Fatal(err)
		}
	}
	if c := popCommitted(b, "G", "PopT", 0); c != 0 {
		t.Fatalf("committed %d with offset 0 in flight, want 0", c)
	}
	if err := b.PopAck("G", "PopT", got[0].Handle); err != nil {
		t.Fatal(err)
	}
	if c := popCommitted(b, "G", "PopT", 0); c != 3 {
		t.Fatalf("committed %d after acking 0-2, want 3", c)
	}
	if err := b.PopAck("G", "PopT", got[0].Handle); !errors.Is(err, ErrPopHandleExpired) {
		t.Fatalf("second ack of one handle: %v, want ErrPopHandleExpired", err)
	}
	if err := b.PopAck("G", "PopT", got[3].Handle); err != nil {
		t.Fatal(err)
	}
	if c, n := popCommitted(b, "G", "PopT", 0), b.PopInflight("G"); c != 4 || n != 0 {
		t.Fatalf("after every ack: committed %d in flight %d, want 4 and 0", c, n)
	}
	// A later message is received after them, once.
	more := popSend(t, b, cl, "PopT", 0, 4, 1, "")
	if got := popRecv(t, b, PopRequest{Group: "G", Topic: "PopT"}); !slices.Equal(popBodies(got), more) {
		t.Fatalf("received %v, want %v", popBodies(got), more)
	}
}

// TestPopChangeInvisibleDuration: an extension replaces the handle and
// moves the deadline; the old handle is refused; the message comes back
// only after the new deadline.
func TestPopChangeInvisibleDuration(t *testing.T) {
	t.Parallel()
	clock := newPopClock()
	b, cl, _ := runBrokerWith(t, popCfg(t), popDeps(), clock.hook())
	popSend(t, b, cl, "PopX", 0, 0, 1, "")
	got := popRecv(t, b, PopRequest{Group: "G", Topic: "PopX", Invisible: 10 * time.Second})
	if len(got) != 1 {
		t.Fatalf("received %d", len(got))
	}
	clock.add(5 * time.Second)
	h2, until, err := b.PopChangeInvisible("G", "PopX", got[0].Handle, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if h2 == got[0].Handle || !until.Equal(clock.now().Add(60*time.Second)) {
		t.Fatalf("new handle %q (old %q), until %v", h2, got[0].Handle, until)
	}
	if err := b.PopAck("G", "PopX", got[0].Handle); !errors.Is(err, ErrPopHandleExpired) {
		t.Fatalf("ack with the replaced handle: %v, want ErrPopHandleExpired", err)
	}
	if _, _, err := b.PopChangeInvisible("G", "PopX", got[0].Handle, time.Second); !errors.Is(err, ErrPopHandleExpired) {
		t.Fatalf("extending with the replaced handle: %v", err)
	}
	clock.add(30 * time.Second) // past the first deadline, before the new one
	b.pop.Revive(context.Background())
	if again := popRecv(t, b, PopRequest{Group: "G", Topic: "PopX"}); len(again) != 0 {
		t.Fatalf("extended message delivered before its new deadline")
	}
	clock.add(31 * time.Second)
	b.pop.Revive(context.Background())
	again := popRecv(t, b, PopRequest{Group: "G", Topic: "PopX"})
	if len(again) != 1 || again[0].Attempt != 2 || string(again[0].Record.Body) != "message-0" {
		t.Fatalf("after the new deadline: %v attempts %v", popBodies(again), popMap(again, func(m PopMessage) int32 { return m.Attempt }))
	}
	if err := b.PopAck("G", "PopX", h2); !errors.Is(err, ErrPopHandleExpired) {
		t.Fatalf("ack with the handle of the earlier delivery: %v", err)
	}
	if err := b.PopAck("G", "PopX", again[0].Handle); err != nil {
		t.Fatal(err)
	}
}

// TestPopRedeliveryThenDLQ: a message never acked comes back after each
// invisible time with its attempt counted, and after the maximum goes to
// %DLQ%<group> through the send-back path; the group moves past it.
func TestPopRedeliveryThenDLQ(t *testing.T) {
	t.Parallel()
	clock := newPopClock()
	b, cl, _ := runBrokerWith(t, popCfg(t), popDeps(), clock.hook())
	popSend(t, b, cl, "PopD", 0, 0, 1, "TagZ")
	req := PopRequest{Group: "GD", Topic: "PopD", Invisible: 10 * time.Second, MaxAttempts: 3}
	for attempt := int32(1); attempt <= 3; attempt++ {
		got := popRecv(t, b, req)
		if len(got) != 1 || got[0].Attempt != attempt {
			t.Fatalf("delivery %d: %d messages, attempts %v", attempt, len(got), popMap(got, func(m PopMessage) int32 { return m.Attempt }))
		}
		clock.add(11 * time.Second)
		b.pop.Revive(context.Background())
	}
	// The entry is done once its DLQ copy is durable (fdatasynced here:
	// no bucket); until then it stays in flight, invisible.
	if err := b.store.Flush(); err != nil {
		t.Fatal(err)
	}
	b.pop.Revive(context.Background())
	if n := b.PopInflight("GD"); n != 0 {
		t.Fatalf("%d in flight after the last attempt expired", n)
	}
	if got := popRecv(t, b, req); len(got) != 0 {
		t.Fatalf("dead-lettered message delivered again: %v", popBodies(got))
	}
	dlq := queueRecords(t, b, DLQGroupTopicPrefix+"GD", 0)
	if len(dlq) != 1 || string(dlq[0].Body) != "message-0" {
		t.Fatalf("DLQ holds %d messages", len(dlq))
	}
	p := parseProps(dlq[0].Properties)
	if p[PropRetryTopic] != "PopD" || p[PropTags] != "TagZ" || dlq[0].ReconsumeTimes != 3 {
		t.Fatalf("DLQ message: RETRY_TOPIC %q TAGS %q reconsumeTimes %d", p[PropRetryTopic], p[PropTags], dlq[0].ReconsumeTimes)
	}
	if c := popCommitted(b, "GD", "PopD", 0); c != 1 {
		t.Fatalf("committed %d after dead-lettering, want 1", c)
	}
}

// TestPopForwardToDLQ: a consumer may dead-letter a message at once.
func TestPopForwardToDLQ(t *testing.T) {
	t.Parallel()
	b, cl, _ := runBrokerWith(t, popCfg(t), popDeps(), nil)
	popSend(t, b, cl, "PopF", 0, 0, 2, "")
	got := popRecv(t, b, PopRequest{Group: "GF", Topic: "PopF"})
	if err := b.PopForwardToDLQ(context.Background(), "GF", "PopF", got[1].Handle); err != nil {
		t.Fatal(err)
	}
	if err := b.PopAck("GF", "PopF", got[1].Handle); !errors.Is(err, ErrPopHandleExpired) {
		t.Fatalf("ack after forwarding: %v", err)
	}
	if dlq := queueRecords(t, b, DLQGroupTopicPrefix+"GF", 0); len(dlq) != 1 || string(dlq[0].Body) != "message-1" {
		t.Fatalf("DLQ: %v", dlq)
	}
}

// TestPopFIFOHoldsQueue: a FIFO receive takes a queue's messages in order
// and holds the queue while one is invisible: nothing after it is given
// out, to any receive, until it is acked or expires (then it comes first).
func TestPopFIFOHoldsQueue(t *testing.T) {
	t.Parallel()
	clock := newPopClock()
	b, cl, _ := runBrokerWith(t, popCfg(t), popDeps(), clock.hook())
	popSend(t, b, cl, "PopO", 0, 0, 3, "")
	popSend(t, b, cl, "PopO", 1, 10, 1, "")
	fifo := PopRequest{Group: "GO", Topic: "PopO", QueueID: -1, MaxMessages: 1, FIFO: true, Invisible: 10 * time.Second}
	var q0 []string
	first := popRecv(t, b, fifo)
	q0 = append(q0, popBodies(first)...)
	// Other queues are not held by queue 0.
	var other []PopMessage
	for range 4 {
		other = append(other, popRecv(t, b, fifo)...)
	}
	for _, m := range other {
		if m.Record.QueueID == 0 {
			t.Fatalf("queue 0 gave out %s while %v is in flight", m.Record.Body, q0)
		}
	}
	if len(first) != 1 || first[0].Record.QueueID != 0 && len(other) == 0 {
		t.Fatalf("first FIFO receive: %v", popBodies(first))
	}
	// Find queue 0's message (the first receive may have started at queue 1).
	if first[0].Record.QueueID != 0 {
		first = popRecv(t, b, PopRequest{Group: "GO", Topic: "PopO", QueueID: 0, MaxMessages: 1, FIFO: true, Invisible: 10 * time.Second})
		q0 = popBodies(first)
	}
	if !slices.Equal(q0, []string{"message-0"}) {
		t.Fatalf("queue 0 first gave %v", q0)
	}
	only0 := PopRequest{Group: "GO", Topic: "PopO", QueueID: 0, MaxMessages: 5, FIFO: true, Invisible: 10 * time.Second}
	if got := popRecv(t, b, only0); len(got) != 0 {
		t.Fatalf("held queue gave %v", popBodies(got))
	}
	if err := b.PopAck("GO", "PopO", first[0].Handle); err != nil {
		t.Fatal(err)
	}
	next := popRecv(t, b, only0)
	if !slices.Equal(popBodies(next), []string{"message-1", "message-2"}) {
		t.Fatalf("after the ack: %v", popBodies(next))
	}
	if err := b.PopAck("GO", "PopO", next[1].Handle); err != nil {
		t.Fatal(err)
	}
	// message-1 is still invisible: the queue stays held though message-2 is acked.
	if got := popRecv(t, b, only0); len(got) != 0 {
		t.Fatalf("held queue gave %v", popBodies(got))
	}
	popSend(t, b, cl, "PopO", 0, 3, 1, "")
	clock.add(11 * time.Second)
	b.pop.Revive(context.Background())
	again := popRecv(t, b, only0)
	if !slices.Equal(popBodies(again), []string{"message-1", "message-3"}) || again[0].Attempt != 2 || again[1].Attempt != 1 {
		t.Fatalf("after expiry: %v attempts %v, want message-1 (2) then message-3 (1)", popBodies(again), popMap(again, func(m PopMessage) int32 { return m.Attempt }))
	}
}

// TestPopTagFilter: a receive with a tag expression gets only those tags;
// the rest count as consumed for the group.
func TestPopTagFilter(t *testing.T) {
	t.Parallel()
	b, cl, _ := runBrokerWith(t, popCfg(t), popDeps(), nil)
	popSend(t, b, cl, "PopTag", 0, 0, 2, "A")
	popSend(t, b, cl, "PopTag", 0, 2, 2, "B")
	popSend(t, b, cl, "PopTag", 0, 4, 1, "A")
	got := popRecv(t, b, PopRequest{Group: "GT", Topic: "PopTag", FilterType: "TAG", FilterExpression: "A"})
	if !slices.Equal(popBodies(got), []string{"message-0", "message-1", "message-4"}) {
		t.Fatalf("tag A: %v", popBodies(got))
	}
	for _, m := range got {
		if err := b.PopAck("GT", "PopTag", m.Handle); err != nil {
			t.Fatal(err)
		}
	}
	if c := popCommitted(b, "GT", "PopTag", 0); c != 5 {
		t.Fatalf("committed %d, want 5", c)
	}
	sql := popRecv(t, b, PopRequest{Group: "GS", Topic: "PopTag", FilterType: "SQL92", FilterExpression: "TAGS = 'B'"})
	if !slices.Equal(popBodies(sql), []string{"message-2", "message-3"}) {
		t.Fatalf("SQL92 TAGS = 'B': %v", popBodies(sql))
	}
	if _, err := b.PopReceive(context.Background(), PopRequest{Group: "GS", Topic: "PopTag", QueueID: -1, Invisible: time.Second,
		FilterType: "SQL92", FilterExpression: "a = "}); !errors.Is(err, ErrPopFilter) {
		t.Fatalf("bad SQL92: %v", err)
	}
}

// TestPopLongPollWakesOnSend: a waiting receive returns as soon as a
// message arrives.
func TestPopLongPollWakesOnSend(t *testing.T) {
	b, cl, _ := runBrokerWith(t, popCfg(t), popDeps(), nil)
	popSend(t, b, cl, "PopL", 0, 0, 1, "")
	first := popRecv(t, b, PopRequest{Group: "GL", Topic: "PopL"})
	if len(first) != 1 {
		t.Fatal("first receive")
	}
	type result struct {
		ms  []PopMessage
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		ms, err := b.PopReceive(context.Background(), PopRequest{Group: "GL", Topic: "PopL", QueueID: -1, Invisible: time.Minute, Wait: 20 * time.Second})
		done <- result{ms, err}
	}()
	waitCond(t, 10*time.Second, "the receive to wait", func() bool { return b.pop.Waiters() == 1 })
	popSend(t, b, cl, "PopL", 0, 1, 1, "")
	r := <-done
	if r.err != nil || !slices.Equal(popBodies(r.ms), []string{"message-1"}) {
		t.Fatalf("long poll: %v %v", popBodies(r.ms), r.err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("the long poll took %s", d)
	}
	// Nothing arrives: it returns empty at its wait.
	ms, err := b.PopReceive(context.Background(), PopRequest{Group: "GL", Topic: "PopL", QueueID: -1, Invisible: time.Minute, Wait: 200 * time.Millisecond})
	if err != nil || len(ms) != 0 {
		t.Fatalf("empty long poll: %v %v", popBodies(ms), err)
	}
}

// TestPopInflightLimit: past the group's bound a receive gets what fits,
// then a clear error; another group is not affected; an ack makes room.
// (The broker-wide bound: TestPopInflightFairShare.)
func TestPopInflightLimit(t *testing.T) {
	t.Parallel()
	cfg := popCfg(t)
	cfg.PopMaxInflightPerGroup, cfg.PopMaxInflight = 3, 100
	b, cl, _ := runBrokerWith(t, cfg, popDeps(), nil)
	popSend(t, b, cl, "PopM", 0, 0, 8, "")
	got := popRecv(t, b, PopRequest{Group: "G1", Topic: "PopM", MaxMessages: 10})
	if len(got) != 3 {
		t.Fatalf("received %d, want the group's bound 3", len(got))
	}
	_, err := b.PopReceive(context.Background(), PopRequest{Group: "G1", Topic: "PopM", QueueID: -1, Invisible: time.Minute})
	if !errors.Is(err, ErrPopInflightLimit) || !strings.Contains(err.Error(), "STRATAMQ_POP_MAX_INFLIGHT_PER_GROUP") {
		t.Fatalf("receive past the bound: %v", err)
	}
	if g2 := popRecv(t, b, PopRequest{Group: "G2", Topic: "PopM", MaxMessages: 10}); len(g2) != 3 {
		t.Fatalf("second group received %d, want its own bound 3", len(g2))
	}
	if err := b.PopAck("G1", "PopM", got[0].Handle); err != nil {
		t.Fatal(err)
	}
	if more := popRecv(t, b, PopRequest{Group: "G1", Topic: "PopM", MaxMessages: 10}); !slices.Equal(popBodies(more), []string{"message-3"}) {
		t.Fatalf("after an ack: %v", popBodies(more))
	}
}

// TestPopHandleRefusals: malformed, forged and stale handles are refused
// with the matching error; nothing changes.
func TestPopHandleRefusals(t *testing.T) {
	t.Parallel()
	b, cl, _ := runBrokerWith(t, popCfg(t), popDeps(), nil)
	popSend(t, b, cl, "PopH", 0, 0, 1, "")
	got := popRecv(t, b, PopRequest{Group: "GH", Topic: "PopH"})
	h, err := pop.ParseHandle(got[0].Handle)
	if err != nil {
		t.Fatal(err)
	}
	forged := h
	forged.Nonce ^= 1
	other := h
	other.Offset++
	for _, c := range []struct {
		group, topic, handle string
		want                 error
	}{
		{"GH", "PopH", "", ErrPopHandle},
		{"GH", "PopH", "not a handle", ErrPopHandle},
		{"GH", "PopH", "P1_0_0_0_1_zz_PopH", ErrPopHandle},
		{"GH", "PopH", strings.Repeat("P1_", 300), ErrPopHandle},
		{"GH", "Other", got[0].Handle, ErrPopHandle},
		{"GH", "PopH", forged.String(), ErrPopHandleExpired},
		{"GH", "PopH", other.String(), ErrPopHandleExpired},
		{"NoSuchGroup", "PopH", got[0].Handle, ErrPopHandleExpired},
	} {
		if err := b.PopAck(c.group, c.topic, c.handle); !errors.Is(err, c.want) {
			t.Errorf("ack %q (group %s topic %s): %v, want %v", c.handle, c.group, c.topic, err, c.want)
		}
	}
	if n := b.PopInflight("GH"); n != 1 {
		t.Fatalf("refused acks changed the state: %d in flight", n)
	}
	if err := b.PopAck("GH", "PopH", got[0].Handle); err != nil {
		t.Fatal(err)
	}
}

// TestPopSideBySideWithPull: a remoting consumer group and a POP group
// read the same topic without disturbing each other.
func TestPopSideBySideWithPull(t *testing.T) {
	t.Parallel()
	b, cl, _ := runBrokerWith(t, popCfg(t), popDeps(), nil)
	want := popSend(t, b, cl, "PopS", 0, 0, 3, "")
	got := popRecv(t, b, PopRequest{Group: "GP", Topic: "PopS"})
	if !slices.Equal(popBodies(got), want) {
		t.Fatalf("POP: %v", popBodies(got))
	}
	resp := invoke(t, cl, b.Addr().String(), pullReq("GR", "PopS", 0, 0, 0, "*"))
	if resp.Code != int32(remoting.Success) || resp.ExtFields["nextBeginOffset"] != "3" {
		t.Fatalf("pull beside POP: %d next %s", resp.Code, resp.ExtFields["nextBeginOffset"])
	}
	for _, m := range got {
		if err := b.PopAck("GP", "PopS", m.Handle); err != nil {
			t.Fatal(err)
		}
	}
	if c, r := popCommitted(b, "GP", "PopS", 0), popCommitted(b, "GR", "PopS", 0); c != 3 || r >= 3 {
		t.Fatalf("POP group committed %d, pull group %d", c, r)
	}
}

// TestPopStateSurvivesRestart: in-flight messages, their handles and
// attempts, and the progress survive a restart on the same data dir.
func TestPopStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	clock := newPopClock()
	cfg := popCfg(t)
	b, cl, stop := runBrokerWith(t, cfg, popDeps(), clock.hook())
	popSend(t, b, cl, "PopR", 0, 0, 4, "")
	got := popRecv(t, b, PopRequest{Group: "GR", Topic: "PopR", MaxMessages: 3, Invisible: 10 * time.Second})
	if err := b.PopAck("GR", "PopR", got[0].Handle); err != nil {
		t.Fatal(err)
	}
	stop()

	b2, _, _ := runBrokerWith(t, cfg, popDeps(), clock.hook())
	if n := b2.PopInflight("GR"); n != 2 {
		t.Fatalf("%d in flight after the restart, want 2", n)
	}
	if err := b2.PopAck("GR", "PopR", got[1].Handle); err != nil {
		t.Fatalf("a handle from before the restart: %v", err)
	}
	if fresh := popRecv(t, b2, PopRequest{Group: "GR", Topic: "PopR"}); !slices.Equal(popBodies(fresh), []string{"message-3"}) {
		t.Fatalf("after the restart: %v, want only message-3 (message-2 invisible)", popBodies(fresh))
	}
	clock.add(11 * time.Second)
	b2.pop.Revive(context.Background())
	again := popRecv(t, b2, PopRequest{Group: "GR", Topic: "PopR"})
	if !slices.Equal(popBodies(again), []string{"message-2"}) || again[0].Attempt != 2 {
		t.Fatalf("after the deadline: %v attempts %v", popBodies(again), popMap(again, func(m PopMessage) int32 { return m.Attempt }))
	}
}

// TestPopStateRestoredFromBucket: a broker on an empty disk resumes the
// POP state from the bucket checkpoint: a message in flight when the first
// broker stopped is delivered again after its invisible time, read from
// the bucket, with its attempt counted; acked ones are not.
func TestPopStateRestoredFromBucket(t *testing.T) {
	t.Parallel()
	clock := newPopClock()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		CheckpointInterval: 100 * time.Millisecond}
	deps := Deps{Logger: discardLogger(), Bucket: bucket}
	b, cl, stop := runBrokerWith(t, cfg, deps, clock.hook())
	popSend(t, b, cl, "PopB", 0, 0, 3, "")
	got := popRecv(t, b, PopRequest{Group: "GB", Topic: "PopB", Invisible: 10 * time.Second})
	if len(got) != 3 {
		t.Fatalf("received %d", len(got))
	}
	if err := b.PopAck("GB", "PopB", got[0].Handle); err != nil {
		t.Fatal(err)
	}
	stop() // drain to the bucket, final checkpoint

	cfg.DataDir = t.TempDir()
	b2, _, _ := runBrokerWith(t, cfg, deps, clock.hook())
	if segs := b2.store.LocalSegments(); len(segs) > 0 && segs[0].Base <= got[2].Record.PhysOffset {
		t.Fatalf("the messages are on the new local disk")
	}
	if n := b2.PopInflight("GB"); n != 2 {
		t.Fatalf("%d in flight on the empty disk, want 2", n)
	}
	if err := b2.PopAck("GB", "PopB", got[1].Handle); err != nil {
		t.Fatalf("a handle from the first broker: %v", err)
	}
	if early := popRecv(t, b2, PopRequest{Group: "GB", Topic: "PopB"}); len(early) != 0 {
		t.Fatalf("before the deadline: %v", popBodies(early))
	}
	clock.add(11 * time.Second)
	b2.pop.Revive(context.Background())
	again := popRecv(t, b2, PopRequest{Group: "GB", Topic: "PopB"})
	if !slices.Equal(popBodies(again), []string{"message-2"}) || again[0].Attempt != 2 || !slices.Equal(again[0].Raw, got[2].Raw) {
		t.Fatalf("after the deadline: %v attempts %v", popBodies(again), popMap(again, func(m PopMessage) int32 { return m.Attempt }))
	}
	if err := b2.PopAck("GB", "PopB", again[0].Handle); err != nil {
		t.Fatal(err)
	}
	if c := popCommitted(b2, "GB", "PopB", 0); c != 3 {
		t.Fatalf("committed %d, want 3", c)
	}
}

// TestPopStateLostAfterSaveRedelivers: state older than the truth (a crash
// after the last save) delivers again, never loses: a receive after the
// save is redelivered from the saved next offset.
func TestPopStateLostAfterSaveRedelivers(t *testing.T) {
	t.Parallel()
	clock := newPopClock()
	cfg := popCfg(t)
	cfg.ConfigFlush = time.Hour // only the explicit save below
	b, cl, _ := runBrokerWith(t, cfg, popDeps(), clock.hook())
	popSend(t, b, cl, "PopC", 0, 0, 2, "")
	first := popRecv(t, b, PopRequest{Group: "GC", Topic: "PopC", MaxMessages: 1, Invisible: 10 * time.Second})
	if err := b.pop.Save(); err != nil {
		t.Fatal(err)
	}
	second := popRecv(t, b, PopRequest{Group: "GC", Topic: "PopC", MaxMessages: 1, Invisible: 10 * time.Second})
	if len(first) != 1 || len(second) != 1 {
		t.Fatalf("receives: %d %d", len(first), len(second))
	}
	// What a crash here leaves: the saved state (the file Save wrote).
	if err := b.pop.Load(nil, false); err != nil {
		t.Fatal(err)
	}
	if n := b.PopInflight("GC"); n != 1 {
		t.Fatalf("%d in flight, want 1", n)
	}
	fresh := popRecv(t, b, PopRequest{Group: "GC", Topic: "PopC"})
	if !slices.Equal(popBodies(fresh), popBodies(second)) {
		t.Fatalf("after losing the second receive: %v, want it again: %v", popBodies(fresh), popBodies(second))
	}
	clock.add(11 * time.Second)
	b.pop.Revive(context.Background())
	if again := popRecv(t, b, PopRequest{Group: "GC", Topic: "PopC", MaxMessages: 1}); !slices.Equal(popBodies(again), popBodies(first)) {
		t.Fatalf("the first message: %v", popBodies(again))
	}
}

// TestPopForgetsDeletedTopicAndGroup: deleting a topic or a group (with
// its offsets) drops their messages in flight and leaves no offset
// behind.
func TestPopForgetsDeletedTopicAndGroup(t *testing.T) {
	t.Parallel()
	b, cl, _ := runBrokerWith(t, popCfg(t), popDeps(), nil)
	addr := b.Addr().String()
	popSend(t, b, cl, "PopDel", 0, 0, 2, "")
	popRecv(t, b, PopRequest{Group: "GDel1", Topic: "PopDel"})
	got := popRecv(t, b, PopRequest{Group: "GDel2", Topic: "PopDel"})
	if b.PopInflight("") != 4 {
		t.Fatalf("%d in flight", b.PopInflight(""))
	}
	req := remoting.NewRequest(remoting.DeleteSubscriptionGroup, map[string]string{"groupName": "GDel2", "cleanOffset": "true"}, nil)
	if r := invoke(t, cl, addr, req); r.Code != 0 {
		t.Fatalf("delete group: %d %s", r.Code, r.Remark)
	}
	if n, c := b.PopInflight("GDel2"), popCommitted(b, "GDel2", "PopDel", 0); n != 0 || c != -1 {
		t.Fatalf("deleted group: %d in flight, committed %d", n, c)
	}
	if err := b.PopAck("GDel2", "PopDel", got[0].Handle); !errors.Is(err, ErrPopHandleExpired) {
		t.Fatalf("ack after the group was deleted: %v", err)
	}
	req = remoting.NewRequest(remoting.DeleteTopicInBroker, map[string]string{"topic": "PopDel"}, nil)
	if r := invoke(t, cl, addr, req); r.Code != 0 {
		t.Fatalf("delete topic: %d %s", r.Code, r.Remark)
	}
	if n, c := b.PopInflight(""), popCommitted(b, "GDel1", "PopDel", 0); n != 0 || c != -1 {
		t.Fatalf("deleted topic: %d in flight, committed %d", n, c)
	}
}
