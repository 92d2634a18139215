package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"

	"github.com/stratamq/stratamq/proxy/nodetest"
)

// TestGRPCNodeProducerToGoConsumerFromBucket: messages the official Node.js
// 5.x Producer sends through gRPC are consumed byte-identical by the
// official Go remoting client (body, tag, keys, user properties, message
// id) when they live only in the bucket: STRATAMQ_LOCAL_RETENTION=0 and
// 1 MiB segments, so the segment holding the first messages is uploaded and
// dropped from the local disk before the consumer starts; a new group
// starting at the first offset reads them from the bucket.
func TestGRPCNodeProducerToGoConsumerFromBucket(t *testing.T) {
	t.Parallel()
	nodetest.Need(t)
	s, addr := startServeGRPC(t, map[string]string{
		"STRATAMQ_BUCKET":          "file://" + filepath.Join(t.TempDir(), "bucket"),
		"STRATAMQ_SEGMENT_SIZE":    "1MiB",
		"STRATAMQ_LOCAL_RETENTION": "0",
	})
	topic := uniqueName(t, "NB")
	s.createTopic(topic, 2)

	type plannedMsg struct {
		Kind    string            `json:"kind"`
		BodyB64 string            `json:"bodyB64"`
		Tag     string            `json:"tag,omitempty"`
		Keys    []string          `json:"keys,omitempty"`
		Props   map[string]string `json:"props,omitempty"`
	}
	rng := rand.New(rand.NewPCG(16, 1))
	const n, size = 160, 12 << 10 // ≈ 1.9 MiB: the first 1 MiB segment seals
	bodies := make([][]byte, n)
	msgs := make([]plannedMsg, n)
	for i := range msgs {
		body := make([]byte, size-rng.IntN(1024))
		for j := range body {
			body[j] = byte(rng.UintN(256))
		}
		if i%7 == 0 {
			body[0], body[1] = 0, '\n' // binary, not text
		}
		bodies[i] = body
		msgs[i] = plannedMsg{Kind: "normal", BodyB64: base64.StdEncoding.EncodeToString(body),
			Tag: "tag" + strconv.Itoa(i%3), Keys: []string{"key" + strconv.Itoa(i), "k2-" + strconv.Itoa(i)},
			Props: map[string]string{"id": strconv.Itoa(i), "color": []string{"red", "grün", ""}[i%3]}}
	}
	// The plan (≈ 2.6 MiB) is more than one program argument may hold: the
	// script reads it from a file.
	raw, err := json.Marshal(map[string]any{"endpoints": addr, "topic": topic, "messages": msgs, "timeoutMs": 120000})
	if err != nil {
		t.Fatal(err)
	}
	planFile := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(planFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	evs := runNode(t, "producer.js", planFile, 3*time.Minute)
	ids := make([]string, n)
	for _, ev := range evs {
		switch ev.Event {
		case "sent":
			ids[ev.I] = ev.MessageID
		case "error":
			t.Fatalf("node: %+v", ev)
		}
	}
	for i, id := range ids {
		if id == "" {
			t.Fatalf("message %d: no send result", i)
		}
	}

	segDir := filepath.Join(s.dir, "store", "commitlog")
	waitFor(t, 2*time.Minute, "the first segment uploaded and dropped locally", func() bool {
		ents, err := os.ReadDir(segDir)
		return err == nil && len(ents) > 0 && ents[0].Name() != "00000000000000000000"
	})

	r := newReceived()
	newPushConsumer(t, s.nsAddr, uniqueName(t, "cgb"), topic, rmqconsumer.MessageSelector{}, r, "cold",
		rmqconsumer.WithPullBatchSize(32))
	waitFor(t, 3*time.Minute, "every message at the Go consumer", func() bool { return r.distinct() >= n })

	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.msgs) != n {
		t.Fatalf("the consumer got %d distinct ids, want %d", len(r.msgs), n)
	}
	for i, p := range msgs {
		ms := r.msgs[strconv.Itoa(i)]
		if len(ms) == 0 {
			t.Fatalf("message %d missing", i)
		}
		m := ms[0]
		if !bytes.Equal(m.Body, bodies[i]) {
			t.Fatalf("message %d: body of %d bytes differs from the %d sent", i, len(m.Body), len(bodies[i]))
		}
		if m.MsgId != ids[i] {
			t.Errorf("message %d: message id %q, the Node producer got %q", i, m.MsgId, ids[i])
		}
		if m.GetTags() != p.Tag {
			t.Errorf("message %d: tag %q, want %q", i, m.GetTags(), p.Tag)
		}
		if got := m.GetKeys(); got != strings.Join(p.Keys, " ") {
			t.Errorf("message %d: keys %q, want %q", i, got, strings.Join(p.Keys, " "))
		}
		for k, v := range p.Props {
			if got, ok := m.GetProperties()[k]; !ok || got != v {
				t.Errorf("message %d: user property %s = %q (present %v), want %q", i, k, got, ok, v)
			}
		}
	}
}
