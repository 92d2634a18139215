package broker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// BenchmarkBrokerColdStart: a bucket holding N sealed segments (and their
// queue and key indexes, a manifest and a checkpoint); a broker on an
// empty data dir is started on it. Reported: time from New to ready
// (listening, lease held, metadata restored) and to the first cold read
// (a pull of queue offset 0, served from the bucket). N is 1,000, or each
// of STRATAMQ_BENCH_SEGMENTS (comma-separated) in one run: issue 12's
// "a simulated year" is 100,000.
//
//	go test ./broker -run XXX -bench ColdStart -benchtime 3x
//	STRATAMQ_BENCH_SEGMENTS=1000,10000,100000 go test ./broker -run XXX -bench ColdStart -benchtime 1x -timeout 60m
func BenchmarkBrokerColdStart(b *testing.B) {
	counts := []int{1000}
	if v := os.Getenv("STRATAMQ_BENCH_SEGMENTS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("STRATAMQ_BENCH_SEGMENTS=%q: want counts, comma-separated", v)
			}
			counts = append(counts, n)
		}
	}
	for _, n := range counts {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) { benchColdStart(b, n) })
	}
}

func benchColdStart(b *testing.B, segments int) {
	bucket := tier.NewMem()
	seed := Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, LocalRetention: 0,
		ShutdownTimeout: 2 * time.Minute}
	br, err := New(seed, Deps{Logger: discardLogger(), Bucket: bucket})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	br.topics.Put(remoting.TopicConfig{TopicName: "History", ReadQueueNums: 4, WriteQueueNums: 4, Perm: PermRead | PermWrite})
	for i := 0; i < segments; i++ {
		var msgs []store.Message
		for j := 0; j < 8; j++ {
			msgs = append(msgs, store.Message{Topic: "History", QueueID: int32(j % 4), Body: []byte(fmt.Sprintf("segment %d message %d", i, j)),
				BornTimestamp: time.Now().UnixMilli()})
		}
		if _, err := br.store.Put(ctx, msgs); err != nil {
			b.Fatal(err)
		}
		if err := br.store.SealActive(); err != nil {
			b.Fatal(err)
		}
	}
	cancel() // graceful: uploads every segment and index, final checkpoint
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	objs := 0
	_ = bucket.List(context.Background(), "", func(string, int64) error { objs++; return nil })
	b.Logf("bucket holds %d objects", objs)

	b.ResetTimer()
	var ready, firstRead time.Duration
	for range b.N {
		start := time.Now()
		cfg := Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true}
		nb, err := New(cfg, Deps{Logger: discardLogger(), Bucket: bucket})
		if err != nil {
			b.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(context.Background())
		rdone := make(chan error, 1)
		go func() { rdone <- nb.Run(rctx) }()
		ready += time.Since(start)
		res, err := nb.store.Get(context.Background(), store.GetRequest{Topic: "History", QueueID: 0, Offset: 0, MaxMsgs: 1})
		if err != nil || res.Status != store.Found {
			b.Fatalf("first cold read: %v %v", err, res.Status)
		}
		firstRead += time.Since(start)
		b.StopTimer()
		rcancel()
		if err := <-rdone; err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(ready.Milliseconds())/float64(b.N), "ms-to-ready")
	b.ReportMetric(float64(firstRead.Milliseconds())/float64(b.N), "ms-to-first-cold-read")
}
