package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestBrokerTierPUTsPerSegment counts the log's bucket writes for a burst
// of segments (1 MiB here; the count per segment is what a GiB of 256 MiB
// segments costs, times 4): each segment is one object put once, holding
// its queue and key index, and the manifest deltas are fewer than the
// segments (uploads that finish while others run share one), so a
// segment costs at most 2 PUTs: at most 8 per GiB at the default segment
// size (README "Cost"; was 17.3: three objects and a delta per segment).
func TestBrokerTierPUTsPerSegment(t *testing.T) {
	t.Parallel()
	bucket := &countingBucket{Bucket: tier.NewMem()}
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 0}
	b, _, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	ctx := context.Background()
	// Manifest writes are held until three segment objects have landed:
	// those uploads then finish while a manifest write is under way, and
	// must be listed together by the next one (deterministically, however
	// loaded the machine is).
	release := bucket.holdManifests()
	var releaseOnce sync.Once
	defer releaseOnce.Do(release)
	const total = 16 << 20
	batch := make([]store.Message, 16)
	for i, written := 0, 0; written < total; i++ {
		for j := range batch {
			body := []byte(fmt.Sprintf("%08d|%s", i*len(batch)+j, strings.Repeat("payload ", 1000)))
			batch[j] = store.Message{Topic: "Puts", QueueID: int32(j % 4), Body: body, BornTimestamp: time.Now().UnixMilli()}
			written += len(body)
		}
		for deadline := time.Now().Add(time.Minute); ; {
			_, err := b.store.Put(ctx, batch)
			if err == nil {
				break
			}
			if !errors.Is(err, store.ErrReserved) || time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond) // a producer's retry until the next checkpoint
		}
	}
	waitCond(t, time.Minute, "three segment objects uploaded", func() bool { return bucket.segsDone.Load() >= 3 })
	releaseOnce.Do(release)
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := b.tier.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	m := b.tier.Uploader().Manifest()
	segs := m.CommitLog()
	if len(segs) < 12 || segs[len(segs)-1].End() != b.store.MaxPhysOffset() {
		t.Fatalf("%d segments listed, ending at %d of %d", len(segs), segs[len(segs)-1].End(), b.store.MaxPhysOffset())
	}
	// The bucket holds one object per segment, with both indexes inside.
	if got := bucketSegments(t, bucket.Bucket); len(got) != len(segs) {
		t.Fatalf("bucket holds %d segment objects, the manifest lists %d", len(got), len(segs))
	}
	var objects, manifest int
	bucket.mu.Lock()
	for key, n := range bucket.byKey {
		switch {
		case strings.Contains(key, "/commitlog/"):
			if n != 1 {
				t.Errorf("%s put %d times", key, n)
			}
			objects += n
		case strings.Contains(key, "/meta/manifest"):
			manifest += n
		}
	}
	bucket.mu.Unlock()
	logPuts := int(bucket.logPuts.Load())
	t.Logf("%d segments: %d object PUTs, %d manifest PUTs (%.2f per segment: %.1f per GiB at 256 MiB segments)",
		len(segs), objects, manifest, float64(logPuts)/float64(len(segs)), 4*float64(logPuts)/float64(len(segs)))
	if objects != len(segs) || objects+manifest != logPuts {
		t.Fatalf("%d object PUTs and %d manifest PUTs (%d log PUTs) for %d segments: want one object each", objects, manifest, logPuts, len(segs))
	}
	if manifest >= len(segs) {
		t.Fatalf("%d manifest PUTs for %d segments: uploads that finished together were not listed together", manifest, len(segs))
	}
	for _, o := range segs {
		for _, k := range []upload.Kind{upload.KindQueueIndex, upload.KindKeyIndex} {
			if _, ok := o.Section(k); !ok {
				t.Fatalf("%s listed without its %s", o.Key, k)
			}
		}
	}
}
