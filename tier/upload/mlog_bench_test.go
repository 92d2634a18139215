package upload_test

// The manifest at scale (issue 12 item 1): load and commit cost at 1k,
// 10k and 100k segments (each with its .idx and .kix object, so 3, 30 and
// 300 thousand objects), in one run:
//
//	go test ./tier/upload -run '^$' -bench Manifest -benchtime 128x
//
// load: a reader's LoadManifest and an Uploader's start (Run until the
// manifest is loaded) against a bucket holding a snapshot and 32 deltas
// after it. commit: one segment group (commitlog, queue index, key index
// objects) per manifest commit, through the Uploader, PairKeyIndex as the
// broker runs it; snapshots and their collection included (amortized).
// Requests and bytes count only the manifest's own objects (meta/).
// BENCH_MANIFEST_BUCKET=versitygw runs the same against versitygw on
// loopback (skipped when the binary is missing).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/tiertest"
	"github.com/stratamq/stratamq/tier/upload"
)

// metaCounter counts requests on manifest objects (keys with /meta/) and
// their bytes.
type metaCounter struct {
	tier.Bucket
	reqs, written, read atomic.Int64
}

func (c *metaCounter) meta(key string) bool { return strings.Contains(key, "/meta/") }

func (c *metaCounter) reset() { c.reqs.Store(0); c.written.Store(0); c.read.Store(0) }

func (c *metaCounter) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if c.meta(key) {
		c.reqs.Add(1)
		c.written.Add(size)
	}
	return c.Bucket.Put(ctx, key, r, size)
}

func (c *metaCounter) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	if c.meta(key) {
		c.reqs.Add(1)
		c.written.Add(size)
	}
	return c.Bucket.PutIf(ctx, key, r, size, cond)
}

func (c *metaCounter) Delete(ctx context.Context, key string) error {
	if c.meta(key) {
		c.reqs.Add(1)
	}
	return c.Bucket.Delete(ctx, key)
}

func (c *metaCounter) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	if c.meta(key) {
		c.reqs.Add(1)
		c.read.Add(int64(len(p)))
	}
	return c.Bucket.ReadAt(ctx, key, p, off)
}

func (c *metaCounter) Stat(ctx context.Context, key string) (tier.Attrs, error) {
	if c.meta(key) {
		c.reqs.Add(1)
	}
	return c.Bucket.Stat(ctx, key)
}

func (c *metaCounter) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	if c.meta(prefix) {
		c.reqs.Add(1)
	}
	return c.Bucket.List(ctx, prefix, fn)
}

func benchBucket(b *testing.B) tier.Bucket {
	if os.Getenv("BENCH_MANIFEST_BUCKET") != "versitygw" {
		return tier.NewMem()
	}
	return tiertest.VersityS3Bucket(b)
}

// seedHistory writes a manifest of n segments: a snapshot at version 1000
// and 32 deltas after it (one segment group each).
func seedHistory(b *testing.B, bkt tier.Bucket, n int) {
	ctx := context.Background()
	objs := history(n + 32)
	if err := upload.SeedSnapshot(ctx, bkt, pfx, &upload.Manifest{Version: 1000, Objects: objs[:3*n]}); err != nil {
		b.Fatal(err)
	}
	for i := range 32 {
		buf := upload.EncodeDelta(pfx, 1001+int64(i), 0, objs[3*(n+i):3*(n+i+1)])
		if _, err := bkt.PutIf(ctx, upload.DeltaKey(pfx, 1001+int64(i)), strings.NewReader(string(buf)), int64(len(buf)), tier.IfAbsent()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkManifest(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("load/segments=%d", n), func(b *testing.B) {
			c := &metaCounter{Bucket: benchBucket(b)}
			seedHistory(b, c, n)
			c.reset()
			var start time.Duration
			for b.Loop() {
				m, _, err := upload.LoadManifest(context.Background(), c, upload.ManifestKey(pfx))
				if err != nil || len(m.Objects) != 3*(n+32) {
					b.Fatalf("%v, %d objects", err, len(m.Objects))
				}
			}
			reqs, read := c.reqs.Load(), c.read.Load()
			// An Uploader's start: Run until the manifest is loaded.
			t0 := time.Now()
			u, err := upload.New(upload.Config{Bucket: c, Source: newSource(), Prefix: pfx, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			stop := startRun(b, u)
			waitFor(b, "the uploader loaded the manifest", 30*time.Second, func() bool { return u.Manifest() != nil })
			start = time.Since(t0)
			stop()
			b.ReportMetric(float64(reqs)/float64(b.N), "reqs/load")
			b.ReportMetric(float64(read)/float64(b.N), "bytes-read/load")
			b.ReportMetric(float64(start.Milliseconds()), "ms-start")
		})
	}
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("commit/segments=%d", n), func(b *testing.B) {
			c := &metaCounter{Bucket: benchBucket(b)}
			seedHistory(b, c, n)
			src := newSource()
			u, err := upload.New(upload.Config{Bucket: c, Source: src, Prefix: pfx, Concurrency: 3,
				PollInterval: time.Millisecond, PairQueueIndex: true, PairKeyIndex: true,
				MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			startRun(b, u)
			waitFor(b, "loaded", 30*time.Second, func() bool { return u.Manifest() != nil })
			c.reset()
			base := int64(n+32) << 30
			data := jsonSegment(1, 100)
			for b.Loop() {
				for _, k := range []upload.Kind{upload.KindCommitLog, upload.KindQueueIndex, upload.KindKeyIndex} {
					src.add(upload.Segment{Kind: k, Base: base}, data)
				}
				base += 1 << 30
				u.Notify()
				waitFor(b, "committed", 30*time.Second, src.allUploaded)
			}
			b.ReportMetric(float64(c.reqs.Load())/float64(b.N), "reqs/commit")
			b.ReportMetric(float64(c.written.Load())/float64(b.N), "bytes-written/commit")
		})
	}
}
