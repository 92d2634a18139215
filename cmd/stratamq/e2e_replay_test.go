//go:build !race

// The official client's pull consumer writes its group name on every
// PullFrom while its rebalance goroutine reads it (a data race inside
// rocketmq-client-go), so this test runs in the README's second, race-free
// test pass.

package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// TestE2EReplayFromZeroInOrder: thousands of messages pulled back from
// offset 0, per queue in send order, bodies byte-identical — including
// random binary bodies, client-compressed bodies and a 3.9 MiB body.
func TestE2EReplayFromZeroInOrder(t *testing.T) {
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "T")
	s.createTopic(topic, 4)
	p := newClientProducer(t, s.nsAddr)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 3000
	bodies := make([][]byte, 0, n+3)
	sent := map[int][]int{} // queue → ids in send order
	send := func(body []byte) {
		id := len(bodies)
		bodies = append(bodies, body)
		res, err := p.SendSync(context.Background(), msgWithID(topic, id, body))
		if err != nil {
			t.Fatalf("send %d (%d bytes): %v", id, len(body), err)
		}
		sent[res.MessageQueue.QueueId] = append(sent[res.MessageQueue.QueueId], id)
	}
	for i := 0; i < n; i++ {
		b := make([]byte, 1+rng.IntN(600))
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		send(b)
	}
	// ≥ 4 KiB bodies are zlib-compressed by client-go; repetitive so it shrinks.
	send(bytes.Repeat([]byte("compressible json {\"k\":\"v\"} "), 400))
	big := make([]byte, 3900*1024)
	for j := range big {
		big[j] = byte(rng.UintN(256))
	}
	send(big)
	send([]byte{0})

	got := replayAll(t, s.nsAddr, topic)
	for q, ids := range sent {
		msgs := got[q]
		if len(msgs) != len(ids) {
			t.Fatalf("queue %d: replayed %d messages, sent %d", q, len(msgs), len(ids))
		}
		for i, id := range ids {
			m := msgs[i]
			if m.QueueOffset != int64(i) {
				t.Fatalf("queue %d: message %d has queue offset %d", q, i, m.QueueOffset)
			}
			if m.GetProperty("id") != strconv.Itoa(id) {
				t.Fatalf("queue %d offset %d: id %s, want %d (order broken)", q, i, m.GetProperty("id"), id)
			}
			if !bytes.Equal(m.Body, bodies[id]) {
				t.Fatalf("queue %d offset %d: body differs (%d vs %d bytes)", q, i, len(m.Body), len(bodies[id]))
			}
		}
	}
}

// replayAll pulls every queue of topic from offset 0 with the official pull
// consumer and returns the messages per queue in offset order.
func replayAll(t *testing.T, ns, topic string) map[int][]*primitive.MessageExt {
	t.Helper()
	pc, err := rocketmq.NewPullConsumer(
		rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		rmqconsumer.WithGroupName(uniqueName(t, "replay")),
		rmqconsumer.WithInstance(uniqueName(t, "ri")),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Subscribe(topic, rmqconsumer.MessageSelector{}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer pc.Shutdown()
	mqs, err := pc.GetTopicRouteInfo(topic)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(mqs, func(i, j int) bool { return mqs[i].QueueId < mqs[j].QueueId })
	out := map[int][]*primitive.MessageExt{}
	deadline := time.Now().Add(2 * time.Minute)
	for _, mq := range mqs {
		var off int64
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := pc.PullFrom(ctx, mq, off, 32)
			cancel()
			if err != nil {
				t.Fatalf("PullFrom(%d, %d): %v", mq.QueueId, off, err)
			}
			if res.Status == primitive.PullNoNewMsg || res.Status == primitive.PullNoMsgMatched && res.NextBeginOffset == off {
				break
			}
			if res.Status != primitive.PullFound {
				t.Fatalf("PullFrom(%d, %d): status %v", mq.QueueId, off, res.Status)
			}
			out[mq.QueueId] = append(out[mq.QueueId], res.GetMessageExts()...)
			if res.NextBeginOffset <= off {
				t.Fatalf("PullFrom(%d, %d): next offset %d does not advance", mq.QueueId, off, res.NextBeginOffset)
			}
			off = res.NextBeginOffset
			if off >= res.MaxOffset {
				break // at the end: another pull would be held by long polling
			}
		}
	}
	return out
}
