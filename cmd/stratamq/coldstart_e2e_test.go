package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
)

// offsetOfMsgID is the commitlog offset inside an offset message id.
func offsetOfMsgID(t *testing.T, id string) int64 {
	t.Helper()
	if len(id) != 32 {
		t.Fatalf("offset msg id %q", id)
	}
	n, err := strconv.ParseInt(id[16:], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestE2EColdStartFromBucketAfterSIGTERM: produce N, consume them with
// group G, stop the broker gracefully, delete the data dir, start a new
// broker on the same bucket: the topic is there with its queues, G resumes
// where it stopped, a fresh group reads all N byte-identical from the
// bucket, and new messages get new, higher offsets.
func TestE2EColdStartFromBucketAfterSIGTERM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bucketDir := filepath.Join(t.TempDir(), "bucket")
	s := startServe(t, dir, map[string]string{
		"STRATAMQ_BUCKET":              "file://" + bucketDir,
		"STRATAMQ_SEGMENT_SIZE":        "4MiB",
		"STRATAMQ_CHECKPOINT_INTERVAL": "1s",
	})
	topic := uniqueName(t, "T")
	s.createTopic(topic, 4)
	p := newClientProducer(t, s.nsAddr)
	rng := rand.New(rand.NewPCG(11, 12))
	bodies := map[string][]byte{}
	var maxOld int64
	const n = 1200 // ≈ 5 MiB: more than one segment
	for i := 0; i < n; i++ {
		body := make([]byte, 3000+rng.IntN(2000))
		for j := range body {
			body[j] = byte(rng.UintN(256))
		}
		bodies[strconv.Itoa(i)] = body
		res, err := p.SendSync(context.Background(), msgWithID(topic, i, body))
		if err != nil {
			t.Fatal(err)
		}
		maxOld = max(maxOld, offsetOfMsgID(t, res.OffsetMsgID))
	}
	group := uniqueName(t, "G")
	r := newReceived()
	c := newPushConsumer(t, s.nsAddr, group, topic, rmqconsumer.MessageSelector{}, r, "g1")
	waitFor(t, 60*time.Second, "G consumed everything", func() bool { return r.distinct() >= n })
	waitCommitted(t, c, s.brokAddr, group, topic, 4, n)
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	_ = p.Shutdown()

	s.stop() // SIGTERM path: drain, seal, upload, checkpoint, release the lease
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.start()
	t.Logf("restarted on an empty data dir, routed after %v", time.Since(start))

	if !routeExists(s.nsAddr, topic) {
		t.Fatal("topic lost")
	}
	p2 := newClientProducer(t, s.nsAddr)
	const m = 40
	for i := n; i < n+m; i++ {
		body := []byte("after-restore-" + strconv.Itoa(i))
		bodies[strconv.Itoa(i)] = body
		res, err := p2.SendSync(context.Background(), msgWithID(topic, i, body))
		if err != nil {
			t.Fatal(err)
		}
		if off := offsetOfMsgID(t, res.OffsetMsgID); off <= maxOld {
			t.Fatalf("new message got commitlog offset %d, not past the old maximum %d (offset reuse)", off, maxOld)
		}
		if res.MessageQueue.QueueId < 0 || res.MessageQueue.QueueId > 3 {
			t.Fatalf("queue %d: the topic lost its 4 queues", res.MessageQueue.QueueId)
		}
	}
	// G resumes where it stopped: only the new messages.
	r2 := newReceived()
	newPushConsumer(t, s.nsAddr, group, topic, rmqconsumer.MessageSelector{}, r2, "g2")
	waitFor(t, 60*time.Second, "G got the new messages", func() bool { return r2.distinct() >= m })
	r2.mu.Lock()
	var old []string // id@queue/offset
	for id, ms := range r2.msgs {
		if i, _ := strconv.Atoi(id); i < n {
			old = append(old, fmt.Sprintf("%s@q%d/%d", id, ms[0].Queue.QueueId, ms[0].QueueOffset))
		}
	}
	if len(old) > 0 {
		r2.mu.Unlock()
		t.Fatalf("G re-received old messages %v (of %d): it did not resume at its committed offset", old, len(r2.msgs))
	}
	r2.mu.Unlock()
	// A fresh group reads everything, old messages from the bucket.
	r3 := newReceived()
	newPushConsumer(t, s.nsAddr, uniqueName(t, "F"), topic, rmqconsumer.MessageSelector{}, r3, "f1")
	waitFor(t, 90*time.Second, "a fresh group read all messages", func() bool { return r3.distinct() >= n+m })
	r3.mu.Lock()
	defer r3.mu.Unlock()
	for id, want := range bodies {
		ms := r3.msgs[id]
		if len(ms) == 0 || !bytes.Equal(ms[0].Body, want) {
			t.Fatalf("message %s missing or different after the cold start", id)
		}
	}
}
