package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/proxy/nodetest"
	"github.com/stratamq/stratamq/remoting"
)

// consumeEvent is one line of proxy/nodetest/simple_consumer.js.
type consumeEvent struct {
	Event     string            `json:"event"`
	MessageID string            `json:"messageId"`
	BodyB64   string            `json:"bodyB64"`
	Attempt   int32             `json:"attempt"`
	Tag       string            `json:"tag"`
	Keys      []string          `json:"keys"`
	Props     map[string]string `json:"props"`
	Message   string            `json:"message"`
}

// runConsumeScript runs simple_consumer.js with plan; its events, the
// test failed on an "error" event or a run that does not finish.
func runConsumeScript(t *testing.T, plan any, timeout time.Duration) []consumeEvent {
	t.Helper()
	return nodetest.Run[consumeEvent](t, "simple_consumer.js", plan, timeout, true)
}

// TestGRPCGoProducerToNodeSimpleConsumerFromBucket: messages the official
// Go remoting client sends are received byte-identical by the official
// Node.js SimpleConsumer over gRPC (body, tag, keys, user properties,
// message id), also those that live only in the bucket
// (STRATAMQ_LOCAL_RETENTION=0: their segment was uploaded and dropped from
// the local disk before the consumer ran). The POP group starts where an
// operator reset it (offset 0, over remoting), as a replay would.
func TestGRPCGoProducerToNodeSimpleConsumerFromBucket(t *testing.T) {
	t.Parallel()
	nodetest.Need(t)
	s, addr := startServeGRPC(t, map[string]string{
		"STRATAMQ_BUCKET":          "file://" + filepath.Join(t.TempDir(), "bucket"),
		"STRATAMQ_SEGMENT_SIZE":    "1MiB",
		"STRATAMQ_LOCAL_RETENTION": "0",
	})
	topic, group := uniqueName(t, "X"), uniqueName(t, "GX")
	const queues = 2
	s.createTopic(topic, queues)
	// The group starts at the queues' beginning (a POP group new to a
	// queue whose first message is no longer local starts at its end).
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	for q := range int32(queues) {
		h := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: q, CommitOffset: 0}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := cl.Invoke(ctx, s.brokAddr, remoting.NewRequest(remoting.UpdateConsumerOffset, h.Encode(), nil))
		cancel()
		if err != nil || resp.Code != int32(remoting.Success) {
			t.Fatalf("reset the group's offset: %v %+v", err, resp)
		}
	}

	p := newClientProducer(t, s.nsAddr)
	rng := rand.New(rand.NewPCG(16, 5))
	const n, size = 160, 12 << 10 // ≈ 1.9 MiB: the first 1 MiB segment seals
	want := map[string][]byte{}
	for b := 0; b < n; b += 16 {
		var msgs []*primitive.Message
		for i := b; i < b+16; i++ {
			body := make([]byte, size-rng.IntN(1024))
			for j := range body {
				body[j] = byte(rng.UintN(256))
			}
			if i%5 == 0 {
				body = bytes.Repeat([]byte("compressible "), 800) // client-go compresses bodies over 4 KiB
			}
			m := msgWithID(topic, i, body)
			m.WithTag("tag" + strconv.Itoa(i%3))
			m.WithKeys([]string{"key" + strconv.Itoa(i)})
			want[strconv.Itoa(i)] = body
			msgs = append(msgs, m)
		}
		if _, err := p.SendSync(context.Background(), msgs...); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	segDir := filepath.Join(s.dir, "store", "commitlog")
	waitFor(t, 2*time.Minute, "the first segment uploaded and dropped locally", func() bool {
		ents, err := os.ReadDir(segDir)
		return err == nil && len(ents) > 0 && ents[0].Name() != "00000000000000000000"
	})

	evs := runConsumeScript(t, map[string]any{"endpoints": addr, "group": group, "topic": topic, "mode": "drain",
		"expect": n, "awaitMs": 3000, "timeoutMs": 120000}, 3*time.Minute)
	got := map[string]bool{}
	for _, ev := range evs {
		if ev.Event != "received" {
			continue
		}
		id := ev.Props["id"]
		body, err := base64.StdEncoding.DecodeString(ev.BodyB64)
		if err != nil || !bytes.Equal(body, want[id]) {
			t.Fatalf("message id %q: body of %d bytes differs from the %d sent", id, len(body), len(want[id]))
		}
		i, _ := strconv.Atoi(id)
		if ev.Tag != "tag"+strconv.Itoa(i%3) || len(ev.Keys) != 1 || ev.Keys[0] != "key"+id || ev.MessageID == "" || ev.Attempt != 1 {
			t.Fatalf("message %s: tag %q keys %v id %q attempt %d", id, ev.Tag, ev.Keys, ev.MessageID, ev.Attempt)
		}
		got[id] = true
	}
	if len(got) != n {
		t.Fatalf("received %d distinct messages of %d", len(got), n)
	}
}
