package main

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"

	"github.com/stratamq/stratamq/remoting"
)

// minQueueOffset asks a broker for a queue's min offset (GET_MIN_OFFSET).
func minQueueOffset(addr, topic string, queue int) (int64, bool) {
	resp, ok := ask(addr, remoting.NewRequest(remoting.GetMinOffset,
		map[string]string{"topic": topic, "queueId": strconv.Itoa(queue)}, nil), time.Second)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
	return n, err == nil
}

// TestE2ETopicRetention: with the official client, a topic whose own
// retention (set with `stratamq admin updateTopic -a +retention.time=2s`)
// passed expires while a topic on the broker default (unlimited) keeps its
// history: a new group on the short topic receives only what was sent
// after the expiry (its retention then set to forever, so nothing new
// expires while it consumes); the other topic keeps every message (its
// min stays 0; TestTopicRetentionExpiresWhileAnotherKeeps reads them back).
func TestE2ETopicRetention(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir(), nil)
	short, keep := uniqueName(t, "Short"), uniqueName(t, "Keep")
	for _, a := range [][]string{{"-t", short, "-a", "+retention.time=2s"}, {"-t", keep}} {
		args := append([]string{"updateTopic", "-r", "2", "-w", "2", "-b", s.brokAddr}, a...)
		if code, out, errOut := runAdminCmd(map[string]string{}, args...); code != 0 {
			t.Fatalf("admin %v: %d %s %s", args, code, out, errOut)
		}
	}
	waitFor(t, 10*time.Second, "routes", func() bool { return routeExists(s.nsAddr, short) && routeExists(s.nsAddr, keep) })
	p := newClientProducer(t, s.nsAddr)
	for i := range 20 {
		for _, topic := range []string{short, keep} {
			if _, err := p.SendSync(context.Background(), msgWithID(topic, i, []byte("old"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, 30*time.Second, "the short topic's messages expired", func() bool {
		var n int64
		for q := range 2 {
			mn, ok := minQueueOffset(s.brokAddr, short, q)
			mx, ok2 := maxQueueOffset(s.brokAddr, short, q)
			if !ok || !ok2 || mn != mx {
				return false
			}
			n += mn
		}
		return n == 20
	})
	var kept int64
	for q := range 2 {
		mn, ok := minQueueOffset(s.brokAddr, keep, q)
		mx, _ := maxQueueOffset(s.brokAddr, keep, q)
		if !ok || mn != 0 {
			t.Fatalf("the default topic's queue %d min %d (%v), want 0", q, mn, ok)
		}
		kept += mx
	}
	if kept != 20 {
		t.Fatalf("the default topic holds %d messages, want 20", kept)
	}
	if code, out, errOut := runAdminCmd(map[string]string{}, "updateTopic", "-t", short, "-r", "2", "-w", "2", "-a", "+retention.time=forever", "-b", s.brokAddr); code != 0 {
		t.Fatalf("admin updateTopic forever: %d %s %s", code, out, errOut)
	}
	for i := 100; i < 110; i++ {
		if _, err := p.SendSync(context.Background(), msgWithID(short, i, []byte("new"))); err != nil {
			t.Fatal(err)
		}
	}
	rs := newReceived()
	// CI form: the group starts from a time before everything, which the
	// broker answers with the queue's minimum (SEARCH_OFFSET_BY_TIMESTAMP
	// searches from it). STRATAMQ_LONG=1: from the first offset, below the
	// minimum: the client gets PULL_OFFSET_MOVED, sleeps 10 s, drops the
	// queue and resumes at the new minimum at its next rebalance (20 s).
	from := []rmqconsumer.Option{rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromTimestamp),
		rmqconsumer.WithConsumeTimestamp(time.Now().UTC().Add(-time.Hour).Format("20060102150405"))}
	if os.Getenv("STRATAMQ_LONG") == "1" {
		from = nil
	}
	newPushConsumer(t, s.nsAddr, uniqueName(t, "cgs"), short, rmqconsumer.MessageSelector{}, rs, "cs", from...)
	waitFor(t, 60*time.Second, "the unexpired messages consumed", func() bool { return rs.distinct() >= 10 })
	// Each queue delivers in order and the old messages precede the new:
	// had an expired one been served, it would have come first.
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for id, ms := range rs.msgs {
		if n, _ := strconv.Atoi(id); n < 100 || string(ms[0].Body) != "new" {
			t.Fatalf("expired message %s (%q) delivered", id, ms[0].Body)
		}
	}
	if len(rs.msgs) != 10 {
		t.Fatalf("%d distinct messages of the short topic delivered, want 10", len(rs.msgs))
	}
}
