package upload_test

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// deadlineBucket records, for every write, how long its context had left
// when the write was issued, and refuses writes whose context is done.
type deadlineBucket struct {
	tier.Bucket
	mu      sync.Mutex
	longest time.Duration // the most time any write had left
	none    int           // writes without a deadline
	expired int           // writes issued with their context already done
}

func (d *deadlineBucket) note(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := ctx.Err(); err != nil {
		d.expired++
		return err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		d.none++
		return nil
	}
	d.longest = max(d.longest, time.Until(dl))
	return nil
}

func (d *deadlineBucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := d.note(ctx); err != nil {
		return err
	}
	return d.Bucket.Put(ctx, key, r, size)
}

func (d *deadlineBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, c tier.Cond) (string, error) {
	if err := d.note(ctx); err != nil {
		return "", err
	}
	return d.Bucket.PutIf(ctx, key, r, size, c)
}

func (d *deadlineBucket) Delete(ctx context.Context, key string) error {
	if err := d.note(ctx); err != nil {
		return err
	}
	return d.Bucket.Delete(ctx, key)
}

func (d *deadlineBucket) stats() (longest time.Duration, none, expired int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.longest, d.none, d.expired
}

// TestWritesEndWithTheLease (issue 29 item 6): every bucket write of the
// Uploader (object PUTs, manifest deltas, the deletes of DeleteObjects)
// runs under a deadline no later than the lease's remaining validity
// (Config.ValidFor), whatever AttemptTimeout allows; with the validity
// gone a write is never issued, and the segment uploads once the lease is
// renewed.
func TestWritesEndWithTheLease(t *testing.T) {
	const valid = 30 * time.Second
	db := &deadlineBucket{Bucket: tier.NewMem()}
	src := newSource()
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0}, jsonSegment(1, 64<<10))
	cfg := fastConfig(db, src)
	cfg.AttemptTimeout = time.Hour
	var left atomic.Int64
	left.Store(int64(valid))
	cfg.Fence = func() (int64, error) { return 1, nil }
	cfg.ValidFor = func() time.Duration { return time.Duration(left.Load()) }
	u, err := upload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, u)
	waitFor(t, "the first segment uploaded", 10*time.Second, src.allUploaded)
	removed, err := u.Trim(context.Background(), 64<<10)
	if err != nil || len(removed) != 1 {
		t.Fatalf("Trim: %v, %v", removed, err)
	}
	if err := u.DeleteObjects(context.Background(), removed); err != nil {
		t.Fatal(err)
	}
	if longest, none, _ := db.stats(); longest > valid || none > 0 {
		t.Fatalf("a write had %v left (%d without a deadline); want at most the lease's %v", longest, none, valid)
	}

	left.Store(0) // the lease ran out between the fence's answer and the write
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 64 << 10}, jsonSegment(2, 64<<10))
	u.Notify()
	waitFor(t, "a write refused for want of validity", 10*time.Second, func() bool { _, _, e := db.stats(); return e > 0 })
	if src.allUploaded() {
		t.Fatal("a segment was uploaded while the lease had no validity left")
	}
	left.Store(int64(valid))
	waitFor(t, "the segment uploaded once the lease is renewed", 10*time.Second, src.allUploaded)
}
