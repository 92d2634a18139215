package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// downBucket fails every request with 503 while down is set (a bucket
// outage), counting the refusals.
type downBucket struct {
	tier.Bucket
	down     atomic.Bool
	refusals atomic.Int64
}

func (d *downBucket) fail(op, key string) error {
	if !d.down.Load() {
		return nil
	}
	d.refusals.Add(1)
	return &tier.ServerError{Op: op, Key: key, Status: 503, Code: "ServiceUnavailable", Err: errors.New("outage")}
}

func (d *downBucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := d.fail("put", key); err != nil {
		return err
	}
	return d.Bucket.Put(ctx, key, r, size)
}

func (d *downBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, c tier.Cond) (string, error) {
	if err := d.fail("put", key); err != nil {
		return "", err
	}
	return d.Bucket.PutIf(ctx, key, r, size, c)
}

func (d *downBucket) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	if err := d.fail("get", key); err != nil {
		return err
	}
	return d.Bucket.ReadAt(ctx, key, p, off)
}

func (d *downBucket) Stat(ctx context.Context, key string) (tier.Attrs, error) {
	if err := d.fail("head", key); err != nil {
		return tier.Attrs{}, err
	}
	return d.Bucket.Stat(ctx, key)
}

func (d *downBucket) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	if err := d.fail("list", prefix); err != nil {
		return err
	}
	return d.Bucket.List(ctx, prefix, fn)
}

func (d *downBucket) Delete(ctx context.Context, key string) error {
	if err := d.fail("delete", key); err != nil {
		return err
	}
	return d.Bucket.Delete(ctx, key)
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestBrokerTierOutageMemoryBounded (issue 9 item 7): through a bucket
// outage sealed segments pile up on local disk, but the broker's heap does
// not grow with their number: no queue index blob is kept per pending
// segment and no upload worker holds a compressed segment in memory (it is
// spooled under <data dir>/spool). Once the bucket is back everything
// uploads, and no spool file is left behind (nor one left by a crash).
//
// STRATAMQ_LONG=1 compares 20 with 200 pending segments instead of 3 with 18.
func TestBrokerTierOutageMemoryBounded(t *testing.T) {
	few, many := 3, 18
	if os.Getenv("STRATAMQ_LONG") != "" {
		few, many = 20, 200
	}
	bucket := &downBucket{Bucket: tier.NewMem()}
	dir := t.TempDir()
	spool := filepath.Join(dir, "spool")
	if err := os.MkdirAll(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(spool, "upload-crashed.seg")
	if err := os.WriteFile(leftover, []byte("left by a crash"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Checkpoints fail through the outage, so the offsets reserved by the
	// last one must cover everything written meanwhile (the long form
	// writes ~460 k messages per queue).
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 64 << 10, LocalRetention: 0, CacheSize: 1 << 20, ReserveQueueMin: 1 << 20}
	b, _, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	waitCond(t, 10*time.Second, "the uploader loaded the manifest", func() bool { return b.tier.Uploader().Manifest() != nil })
	bucket.down.Store(true)

	// Small messages: the queue index of a segment is then largest
	// relative to its bytes.
	ctx := context.Background()
	body := []byte("0123456789abcdef")
	batch := make([]store.Message, 2048)
	for i := range batch {
		batch[i] = store.Message{Topic: "Outage", QueueID: int32(i % 4), Body: body}
	}
	sealed := 0
	start := time.Now()
	fill := func(n int) {
		t.Helper()
		for sealed < n {
			if _, err := b.store.Put(ctx, batch); err != nil {
				t.Fatal(err)
			}
			// Consumequeue entries not yet written to their files are
			// held in memory whatever the bucket does (and the buffer
			// keeps its size): write them out often, as the flusher would
			// at a realistic rate.
			if err := b.store.Flush(); err != nil {
				t.Fatal(err)
			}
			sealed = len(b.store.SealedSegments())
		}
		// Every sealed segment is listed pending (the uploader has scanned
		// them all; each one's queue index is built into its object when
		// it is encoded), and uploads are being refused.
		b.tier.Uploader().Notify()
		waitCond(t, 30*time.Second, fmt.Sprintf("%d sealed segments pending", n), func() bool {
			return b.tier.Uploader().Stats().Pending >= int64(n) && bucket.refusals.Load() > 0
		})
		t.Logf("%d segments pending after %v", n, time.Since(start))
	}
	fill(few)
	h1 := liveHeap()
	fill(many)
	h2 := liveHeap()
	growth := h2 - h1
	t.Logf("live heap with %d pending segments: %.1f MiB; with %d: %.1f MiB (growth %.1f KiB)",
		few, float64(h1)/(1<<20), many, float64(h2)/(1<<20), float64(growth)/1024)
	// A queue index of one of these segments is ~180 KiB: keeping them
	// grew the heap by 2.2-2.7 MiB here.
	const bound = 1 << 20
	if growth > bound {
		t.Fatalf("live heap grew by %d KiB from %d to %d pending segments (bound %d KiB): memory grows with the outage",
			growth>>10, few, many, bound>>10)
	}

	bucket.down.Store(false)
	waitCond(t, 120*time.Second, "everything uploaded and dropped after the outage", func() bool {
		b.tier.Uploader().Notify()
		b.tier.Uploader().Flush()
		return len(b.store.SealedSegments()) == 0 && b.tier.Uploader().Stats().Pending == 0
	})
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a spool file left by a crash is still there after start: %v", err)
	}
	t.Logf("uploaded after %v", time.Since(start))
	names, err := os.ReadDir(spool)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 0 {
		t.Fatalf("spool files left after the uploads: %v", names)
	}
}
