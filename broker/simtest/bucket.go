package simtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// errBucketDown is what a node's bucket calls return while it is cut off
// from the bucket (or its process is dead).
var errBucketDown = errors.New("simtest: dial tcp bucket:443: connect: connection refused")

// bucketLink is one node's path to the shared bucket: partitioned or
// slowed for the node (across its incarnations), and, armed, holding its
// next write in flight so it lands late.
type bucketLink struct {
	down     atomic.Bool
	delay    atomic.Int64 // per call, virtual ns
	holdNext atomic.Int64 // the next write lands this late (ns; 0: none)
	late     sync.WaitGroup
	lateN    atomic.Int64 // writes that landed late
}

// nodeBucket is one incarnation's bucket client: it fails every call once
// its process is dead, and goes through the node's link.
type nodeBucket struct {
	tier.Bucket
	link *bucketLink
	dead *atomic.Bool
}

func (b *nodeBucket) gate(ctx context.Context) error {
	if b.dead.Load() || b.link.down.Load() {
		return errBucketDown
	}
	if d := time.Duration(b.link.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if b.dead.Load() || b.link.down.Load() {
			return errBucketDown
		}
	}
	return ctx.Err()
}

func (b *nodeBucket) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	if err := b.gate(ctx); err != nil {
		return err
	}
	return b.Bucket.ReadAt(ctx, key, p, off)
}

func (b *nodeBucket) Stat(ctx context.Context, key string) (tier.Attrs, error) {
	if err := b.gate(ctx); err != nil {
		return tier.Attrs{}, err
	}
	return b.Bucket.Stat(ctx, key)
}

func (b *nodeBucket) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	if err := b.gate(ctx); err != nil {
		return err
	}
	return b.Bucket.List(ctx, prefix, fn)
}

func (b *nodeBucket) Delete(ctx context.Context, key string) error {
	if err := b.gate(ctx); err != nil {
		return err
	}
	return b.Bucket.Delete(ctx, key)
}

func (b *nodeBucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	_, err := b.write(ctx, key, r, size, nil)
	return err
}

func (b *nodeBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	return b.write(ctx, key, r, size, &cond)
}

// write stores the object, or, with a hold armed, sends it and lets it
// land after the hold: the request is on the wire, so it lands even if
// the caller gives up or its process dies meanwhile (a PutIf's condition
// is checked when it lands, as S3 does).
func (b *nodeBucket) write(ctx context.Context, key string, r io.Reader, size int64, cond *tier.Cond) (string, error) {
	if err := b.gate(ctx); err != nil {
		return "", err
	}
	hold := time.Duration(b.link.holdNext.Swap(0))
	if hold <= 0 {
		if cond != nil {
			return b.Bucket.PutIf(ctx, key, r, size, *cond)
		}
		return "", b.Bucket.Put(ctx, key, r, size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	type result struct {
		etag string
		err  error
	}
	done := make(chan result, 1)
	b.link.late.Add(1)
	go func() {
		defer b.link.late.Done()
		time.Sleep(hold)
		var res result
		if cond != nil {
			res.etag, res.err = b.Bucket.PutIf(context.Background(), key, bytes.NewReader(body), size, *cond)
		} else {
			res.err = b.Bucket.Put(context.Background(), key, bytes.NewReader(body), size)
		}
		if res.err == nil {
			b.link.lateN.Add(1)
		}
		done <- res
	}()
	select {
	case res := <-done:
		return res.etag, res.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (b *nodeBucket) Close() error { return nil }
