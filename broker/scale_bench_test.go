package broker

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// openFDs counts this process's open file descriptors (Linux; -1 elsewhere).
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkScale (issue 12 item 5): what many queues and many consumer
// groups cost a broker at rest. Each case creates its topics (all queues
// written once, so each has a consumequeue file), commits an offset per
// group and queue of the first topic, and reports the open file
// descriptors and heap the broker added, and the size and time of one
// bucket checkpoint (topics, groups' offsets, per-queue ranges). b.N
// times the checkpoint.
//
//	go test ./broker -run XXX -bench 'BenchmarkScale$' -benchtime 20x
func BenchmarkScale(b *testing.B) {
	for _, tc := range []struct {
		topics, queues, groups, groupQueues int
	}{
		{1, 8, 1, 8},
		{10, 1000, 1, 8},       // 10,000 queues
		{1, 8, 1000, 8},        // 1,000 groups
		{10, 1000, 1000, 1000}, // both; each group on 1,000 queues (1 M offsets)
	} {
		b.Run(fmt.Sprintf("queues=%d/groups=%d", tc.topics*tc.queues, tc.groups), func(b *testing.B) {
			bucket := tier.NewMem()
			fds0, heap0 := openFDs(), heapInUse()
			cfg := Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 64 << 20}
			br, err := New(cfg, Deps{Logger: discardLogger(), Bucket: bucket})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- br.Run(ctx) }()
			defer func() { cancel(); <-done }()
			cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
			defer cl.Close()
			for i := range tc.topics {
				h := remoting.CreateTopicRequestHeader{Topic: fmt.Sprintf("S%02d", i), DefaultTopic: "TBW102",
					ReadQueueNums: int32(tc.queues), WriteQueueNums: int32(tc.queues), Perm: 6, TopicFilterType: "SINGLE_TAG"}
				ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
				r, err := cl.Invoke(ictx, br.Addr().String(), remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil))
				icancel()
				if err != nil || r.Code != 0 {
					b.Fatalf("create topic: %v %+v", err, r)
				}
				for q := range tc.queues {
					msg := store.Message{Topic: h.Topic, QueueID: int32(q), Body: []byte("scale"), BornTimestamp: time.Now().UnixMilli()}
					if _, err := br.store.Put(ctx, []store.Message{msg}); err != nil {
						b.Fatal(err)
					}
				}
			}
			for g := range tc.groups {
				for q := range tc.groupQueues {
					br.offsets.Commit(fmt.Sprintf("group-%04d", g), "S00", int32(q%tc.queues), 1)
				}
			}
			if err := br.store.Flush(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if err := br.dur.Checkpoint(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			var cpBytes int64
			_ = bucket.List(ctx, "", func(key string, size int64) error {
				if strings.HasSuffix(key, offsets.CheckpointKey) {
					cpBytes = size
				}
				return nil
			})
			b.ReportMetric(float64(openFDs()-fds0), "fds")
			b.ReportMetric(float64(heapInUse()-heap0)/(1<<20), "heap-MiB")
			b.ReportMetric(float64(cpBytes)/1024, "checkpoint-KiB")
		})
	}
}
