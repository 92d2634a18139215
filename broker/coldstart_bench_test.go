package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// BenchmarkBrokerColdStart1000Segments: a bucket holding 1,000 sealed
// segments (and their queue indexes, a manifest and a checkpoint); a broker
// on an empty data dir is started on it. Reported: time from New to ready
// (listening, lease held, metadata restored) and to the first cold read
// (a pull of queue offset 0, served from the bucket).
//
//	go test ./broker -run XXX -bench ColdStart -benchtime 3x
func BenchmarkBrokerColdStart1000Segments(b *testing.B) {
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
	const segments = 1000
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
