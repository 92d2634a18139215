package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/tier/tiertest"
)

// TestE2ETierLocalfs, TestE2ETierS3VersityGW and TestE2ETierMinioVersityGW:
// with 4 MiB segments and STRATAMQ_LOCAL_RETENTION=0, tens of MiB produced
// through the official client leave the local disk and land in the bucket;
// a new consumer group starting from the first offset then reads every
// message byte-identical, with queue offsets contiguous across the
// bucket/local boundary (no gap, no duplicate).
func TestE2ETierLocalfs(t *testing.T) {
	t.Parallel()
	runTierE2E(t, "file://"+filepath.Join(t.TempDir(), "bucket"))
}

func TestE2ETierS3VersityGW(t *testing.T) {
	endpoint, ak, sk := tiertest.StartVersityGW(t)
	t.Setenv("AWS_ACCESS_KEY_ID", ak)
	t.Setenv("AWS_SECRET_ACCESS_KEY", sk)
	t.Setenv("AWS_REGION", "us-east-1")
	runTierE2E(t, fmt.Sprintf("s3://%s/tenant-a?endpoint=%s&region=us-east-1", tiertest.BucketName(t), endpoint))
}

func TestE2ETierMinioVersityGW(t *testing.T) {
	endpoint, ak, sk := tiertest.StartVersityGW(t)
	t.Setenv("AWS_ACCESS_KEY_ID", ak)
	t.Setenv("AWS_SECRET_ACCESS_KEY", sk)
	runTierE2E(t, fmt.Sprintf("minio://%s/%s/tenant-b?secure=false&region=us-east-1", strings.TrimPrefix(endpoint, "http://"), tiertest.BucketName(t)))
}

func runTierE2E(t *testing.T, bucketURL string) {
	dir := t.TempDir()
	s := startServe(t, dir, map[string]string{
		"STRATAMQ_BUCKET":          bucketURL,
		"STRATAMQ_SEGMENT_SIZE":    "4MiB",
		"STRATAMQ_LOCAL_RETENTION": "0",
	})
	topic := uniqueName(t, "T")
	s.createTopic(topic, 4)
	p := newClientProducer(t, s.nsAddr)
	rng := rand.New(rand.NewPCG(7, 8))
	const batches, perBatch, size = 120, 16, 12 << 10 // ≈ 23 MiB of incompressible bodies
	bodies := map[string][]byte{}
	for b := 0; b < batches; b++ {
		msgs := make([]*primitive.Message, perBatch)
		for i := range msgs {
			body := make([]byte, size-rng.IntN(2048))
			for j := range body {
				body[j] = byte(rng.UintN(256))
			}
			id := strconv.Itoa(b*perBatch + i)
			bodies[id] = body
			msgs[i] = msgWithID(topic, b*perBatch+i, body)
		}
		if _, err := p.SendSync(context.Background(), msgs...); err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
	}
	n := len(bodies)

	// The sealed segments leave the local disk once uploaded: at most the
	// active segment (and one being uploaded) stay.
	segDir := filepath.Join(dir, "store", "commitlog")
	waitFor(t, 2*time.Minute, "sealed segments uploaded and dropped locally", func() bool {
		ents, err := os.ReadDir(segDir)
		return err == nil && len(ents) <= 2
	})
	ents, _ := os.ReadDir(segDir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) == 0 || names[0] == "00000000000000000000" {
		t.Fatalf("the first segment is still local: %v", names)
	}
	t.Logf("local segments after upload: %v", names)

	r := newReceived()
	newPushConsumer(t, s.nsAddr, uniqueName(t, "replay"), topic, rmqconsumer.MessageSelector{}, r, "cold",
		rmqconsumer.WithPullBatchSize(32))
	waitFor(t, 3*time.Minute, "every message replayed from the bucket", func() bool { return r.distinct() >= n })
	r.mu.Lock()
	defer r.mu.Unlock()
	perQueue := map[int]map[int64]bool{}
	for id, want := range bodies {
		ms := r.msgs[id]
		if len(ms) == 0 {
			t.Fatalf("message %s missing", id)
		}
		m := ms[0]
		if !bytes.Equal(m.Body, want) {
			t.Fatalf("message %s body differs after the bucket round trip (%d vs %d bytes)", id, len(m.Body), len(want))
		}
		q := m.Queue.QueueId
		if perQueue[q] == nil {
			perQueue[q] = map[int64]bool{}
		}
		if perQueue[q][m.QueueOffset] {
			t.Fatalf("queue %d offset %d delivered for two ids", q, m.QueueOffset)
		}
		perQueue[q][m.QueueOffset] = true
	}
	total := 0
	for q, offs := range perQueue {
		for o := int64(0); o < int64(len(offs)); o++ {
			if !offs[o] {
				t.Fatalf("queue %d: offset %d missing (gap at the tier boundary?)", q, o)
			}
		}
		total += len(offs)
	}
	if total != n {
		t.Fatalf("replayed %d distinct queue offsets, want %d", total, n)
	}
}
