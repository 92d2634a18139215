package simtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/tier"
)

// errBucketDown is what a node's bucket calls return while it is cut off
// from the bucket (or its process is dead): a transport error, as an S3
// client reports it (retryable).
var errBucketDown error = &net.OpError{Op: "dial", Net: "tcp", Addr: tcpAddr("10.0.8.1:443"), Err: syscall.ECONNREFUSED}

// bucketLink is one node's path to the shared bucket: partitioned or
// flaky for the node (across its incarnations), and, armed, holding its
// next write in flight so it lands late.
//
// Nothing here makes a caller wait on virtual time: a caller may hold a
// mutex across a bucket call (durability.Keeper.save holds saveMu across the
// lease write), and while another goroutine waits for that mutex synctest
// does not advance time, so a delayed answer would never come. A slow
// bucket is therefore modelled by its effects: calls that fail (flaky) and
// writes that time out at the client yet land later (LateWrite).
type bucketLink struct {
	down     atomic.Bool
	flaky    atomic.Bool  // three calls in four fail
	calls    atomic.Int64 // calls while flaky
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
	if b.link.flaky.Load() && b.link.calls.Add(1)%4 != 0 {
		return errSlowDown
	}
	return ctx.Err()
}

// errSlowDown is a flaky bucket's answer.
var errSlowDown = &tier.ServerError{Status: 503, Code: "SlowDown", Err: errors.New("simtest: please reduce your request rate")}

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

// write stores the object, or, with a hold armed, times out at the
// client at once while the request, already on the wire, lands after the
// hold, even if its process died meanwhile (a PutIf's condition is
// checked when it lands, as S3 does).
func (b *nodeBucket) write(ctx context.Context, key string, r io.Reader, size int64, cond *tier.Cond) (string, error) {
	if err := b.gate(ctx); err != nil {
		return "", err
	}
	// The lease and checkpoints are written every few hundred ms and are
	// conditional (a late one fails its condition): hold the next write
	// of data instead, a segment object or a manifest delta (item 6's
	// danger).
	var hold time.Duration
	if !strings.HasSuffix(key, offsets.LeaseKey) && !strings.Contains(key, "meta/checkpoint") {
		hold = time.Duration(b.link.holdNext.Swap(0))
	}
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
	b.link.late.Add(1)
	go func() {
		defer b.link.late.Done()
		time.Sleep(hold)
		var err error
		if cond != nil {
			_, err = b.Bucket.PutIf(context.Background(), key, bytes.NewReader(body), size, *cond)
		} else {
			err = b.Bucket.Put(context.Background(), key, bytes.NewReader(body), size)
		}
		if err == nil {
			b.link.lateN.Add(1)
		}
	}()
	return "", errLateTimeout
}

// errLateTimeout is what the client of a write that lands late sees: its
// HTTP attempt timed out (retryable).
var errLateTimeout error = &net.OpError{Op: "read", Net: "tcp", Addr: tcpAddr("10.0.8.1:443"), Err: os.ErrDeadlineExceeded}

func (b *nodeBucket) Close() error { return nil }
