package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// countingBucket counts write requests (Put, PutIf) to a bucket, in all
// and those of the log (segments, their indexes, the manifest) apart from
// the metadata written by time (checkpoints, the lease).
type countingBucket struct {
	tier.Bucket
	puts, logPuts atomic.Int64
	segsDone      atomic.Int64 // commitlog object PUTs that landed
	mu            sync.Mutex
	byKey         map[string]int // PUTs of each key
	// manifestGate, while set (holdManifests), holds every manifest
	// write until it is closed.
	manifestGate atomic.Pointer[chan struct{}]
}

// holdManifests holds manifest writes until the returned func is called.
func (c *countingBucket) holdManifests() (release func()) {
	ch := make(chan struct{})
	c.manifestGate.Store(&ch)
	return func() { c.manifestGate.Store(nil); close(ch) }
}

func (c *countingBucket) gate(ctx context.Context, key string) error {
	if g := c.manifestGate.Load(); g != nil && strings.Contains(key, "/meta/manifest") {
		select {
		case <-*g:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (c *countingBucket) landed(key string, err error) {
	if err == nil && strings.Contains(key, "/commitlog/") {
		c.segsDone.Add(1)
	}
}

func (c *countingBucket) count(key string) {
	c.puts.Add(1)
	if strings.Contains(key, "/commitlog/") || strings.Contains(key, "/meta/manifest") {
		c.logPuts.Add(1)
	}
	c.mu.Lock()
	if c.byKey == nil {
		c.byKey = map[string]int{}
	}
	c.byKey[key]++
	c.mu.Unlock()
}

func (c *countingBucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := c.gate(ctx, key); err != nil {
		return err
	}
	c.count(key)
	err := c.Bucket.Put(ctx, key, r, size)
	c.landed(key, err)
	return err
}

func (c *countingBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	if err := c.gate(ctx, key); err != nil {
		return "", err
	}
	c.count(key)
	etag, err := c.Bucket.PutIf(ctx, key, r, size, cond)
	c.landed(key, err)
	return etag, err
}

// BenchmarkBrokerTierPUTsPerGiB writes 1 GiB of 1 KiB JSON-like messages
// over 8 queues through the broker's store with the default segment size,
// lets the tier upload everything (segments with their queue and key
// indexes, manifest deltas and snapshots), and reports the log's bucket
// write requests per GiB, the metadata PUTs (checkpoints, lease) the run
// made besides, and the compression ratio.
// Object PUTs are counted at the Bucket interface (a multipart upload of a
// part-size object would add its part requests).
//
//	go test ./broker -run XXX -bench TierPUTsPerGiB -benchtime 1x
func BenchmarkBrokerTierPUTsPerGiB(b *testing.B) {
	for range b.N {
		bucket := &countingBucket{Bucket: tier.NewMem()}
		cfg := Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, LocalRetention: 0}
		br, err := New(cfg, Deps{Logger: discardLogger(), Bucket: bucket})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- br.Run(ctx) }()
		// A known topic: checkpoints reserve queue offsets for its queues.
		br.topics.Put(remoting.TopicConfig{TopicName: "PutCount", ReadQueueNums: 8, WriteQueueNums: 8, Perm: PermRead | PermWrite})
		const total = 1 << 30
		const size = 1024
		batch := make([]store.Message, 32)
		written := 0
		for i := 0; written < total; i++ {
			for j := range batch {
				n := i*len(batch) + j
				body := []byte(fmt.Sprintf(`{"order":%d,"customer":"c-%05d","status":"PAID","amount":%d.%02d,"items":[{"sku":"SKU-%04d","qty":%d}],"note":"`, n, n%50000, n%997, n%100, n%3000, n%7+1))
				for len(body) < size-2 {
					body = append(body, "lorem ipsum dolor sit amet "[len(body)%27])
				}
				body = append(body, '"', '}')
				batch[j] = store.Message{Topic: "PutCount", QueueID: int32(n % 8), Body: body, BornTimestamp: time.Now().UnixMilli()}
				written += size
			}
			for q := range 8 {
				var part []store.Message
				for _, m := range batch {
					if m.QueueID == int32(q) {
						part = append(part, m)
					}
				}
				// Past the checkpoint's reservation the store refuses until
				// the next checkpoint (the broker checkpoints early when a
				// write comes near it): wait for it, as a producer would retry.
				for deadline := time.Now().Add(time.Minute); ; {
					_, err := br.store.Put(ctx, part)
					if err == nil {
						break
					}
					if !errors.Is(err, store.ErrReserved) || time.Now().After(deadline) {
						b.Fatal(err)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		}
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		if err := br.tier.Drain(dctx); err != nil {
			b.Fatal(err)
		}
		dcancel()
		stats := br.tier.Uploader().Stats()
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		gib := float64(br.store.MaxPhysOffset()) / (1 << 30)
		b.ReportMetric(float64(bucket.logPuts.Load())/gib, "PUTs/GiB")
		// Checkpoints and lease renewals come with time (every
		// STRATAMQ_CHECKPOINT_INTERVAL, and early while writes outrun the
		// offsets reserved), not with bytes: this fast a write makes many.
		b.ReportMetric(float64(bucket.puts.Load()-bucket.logPuts.Load()), "metadata-PUTs")
		b.ReportMetric(time.Since(start).Seconds(), "seconds")
		b.ReportMetric(float64(stats.LogicalBytes)/float64(max(stats.Bytes, 1)), "compression")
	}
}
