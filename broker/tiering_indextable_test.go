package broker

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// manifestReads counts reads of the manifest's objects.
type manifestReads struct {
	tier.Bucket
	n atomic.Int64
}

func (m *manifestReads) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	if strings.Contains(key, "/meta/manifest") {
		m.n.Add(1)
	}
	return m.Bucket.ReadAt(ctx, key, p, off)
}

func (m *manifestReads) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	if strings.Contains(prefix, "meta/manifest") {
		m.n.Add(1)
	}
	return m.Bucket.List(ctx, prefix, fn)
}

// TestColdIndexTableOncePerManifest: the table of queue and key index
// objects the cold indexes look objects up in is built once per manifest,
// and a broker started on an empty data dir does not read the manifest
// from the bucket again for it while its uploader has not loaded it yet.
// Before, both cost O(history) on every queue index read: Uploader.Manifest
// returns a new copy each time, so the table (keyed by that pointer) was
// rebuilt on every read, and until the uploader had loaded the manifest
// each read loaded it from the bucket (LoadManifest) first. A first cold
// read right after a start binary-searches the queue index objects, so it
// paid that some 17 times at 100,000 segments (BenchmarkBrokerColdStart).
func TestColdIndexTableOncePerManifest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bucket := &manifestReads{Bucket: tier.NewMem()}
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 64 << 10, LocalRetention: 0}
	b1, _, stop := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	for i := range 3 {
		if _, err := b1.store.Put(ctx, []store.Message{{Topic: "T", QueueID: int32(i % 2), Body: []byte("history")}}); err != nil {
			t.Fatal(err)
		}
		if err := b1.store.SealActive(); err != nil {
			t.Fatal(err)
		}
	}
	stop() // graceful: everything uploaded

	// New only: the uploader (Run) has not loaded the manifest.
	cfg.DataDir = t.TempDir()
	b2, err := New(cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	bucket.n.Store(0)
	kt1, err := b2.tier.IndexObjects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kt2, err := b2.tier.IndexObjects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if nq, nk := kt1.Counts(); nq != 3 || nk != 3 {
		t.Fatalf("table lists %d queue index and %d key index objects, want 3 and 3", nq, nk)
	}
	if n := bucket.n.Load(); n != 0 {
		t.Errorf("before the uploader loaded the manifest: %d manifest reads from the bucket, want 0 (the manifest read at start serves)", n)
	}
	if kt1 != kt2 {
		t.Error("before the uploader loaded the manifest: the table was built again for the same manifest")
	}

	// Run: the uploader loads the manifest; the table is built once for it.
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b2.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitCond(t, 10*time.Second, "the uploader loaded the manifest", func() bool { return b2.tier.Uploader().Manifest() != nil })
	kt3, err := b2.tier.IndexObjects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kt4, err := b2.tier.IndexObjects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if kt3 != kt4 {
		t.Error("with the uploader's manifest: the table was built again for the same manifest")
	}

	// A new segment listed: the next lookup sees it.
	if _, err := b2.store.Put(ctx, []store.Message{{Topic: "T", QueueID: 0, Body: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	base := b2.store.LocalSegments()[len(b2.store.LocalSegments())-1].Base
	if err := b2.store.SealActive(); err != nil {
		t.Fatal(err)
	}
	b2.tier.Uploader().Notify()
	waitCond(t, 30*time.Second, "the new segment's queue index in the table", func() bool {
		b2.tier.Uploader().Flush()
		kt, err := b2.tier.IndexObjects(ctx)
		if err != nil {
			return false
		}
		o, _ := kt.QueueIndex(base)
		return o.Key != ""
	})
}
