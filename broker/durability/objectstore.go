package durability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/tier"
)

// NewObjectStore adapts b, a Bucket already under the broker's prefix
// (<prefix>/<cluster>/<brokerName>/), to the object store offsets keeps its
// checkpoints and lease in. tier errors are mapped to offsets' sentinels and
// stay matchable (ErrNotExist → ErrObjectNotFound, ErrPreconditionFailed →
// ErrPrecondition).
func NewObjectStore(b tier.Bucket) offsets.ObjectStore { return checkpointBucket{b: b} }

type checkpointBucket struct {
	b tier.Bucket
	// validFor, if set, bounds every write but the lease's own by the
	// lease's remaining validity (LeaseBound).
	validFor func() time.Duration
}

// LeaseBound is cs (NewObjectStore's) with every write bounded by
// lease: a checkpoint PUT or history delete that cannot finish while the
// lease is valid is cancelled, so a deposed holder's write is never
// issued, and is over on its side, once a successor may hold the lease. A
// request the server received in time may still be applied late; the
// checkpoint is conditional on the ETag its writer last saw, so a late
// one fails once the successor wrote, and one applied before that is
// adopted by the successor (offsets.Checkpointer: an older epoch's write
// never fences a newer holder). The lease's own writes are conditional
// and never bounded by it (a renewal after a lapse must still land).
func LeaseBound(cs offsets.ObjectStore, lease *offsets.Lease) offsets.ObjectStore {
	c, ok := cs.(checkpointBucket)
	if !ok || lease == nil {
		return cs
	}
	c.validFor = lease.ValidFor
	return c
}

// bound returns ctx bounded by the lease for a write of key.
func (c checkpointBucket) bound(ctx context.Context, key string) (context.Context, context.CancelFunc) {
	if c.validFor == nil || key == offsets.LeaseKey {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, max(c.validFor(), 0))
}

// getAttempts bounds Get's retries when the object changes while it is read.
const getAttempts = 8

// Get reads one consistent version: Stat, ReadAt the whole size, Stat again;
// if the object changed in between (other ETag or size, or ReadAt found it
// shorter or gone), it starts over. A Bucket has no single "get with ETag"
// call, and an ETag paired with another version's bytes would let a
// conditional write succeed on data it never saw.
func (c checkpointBucket) Get(ctx context.Context, key string) ([]byte, string, error) {
	for range getAttempts {
		a, err := c.b.Stat(ctx, key)
		if err != nil {
			return nil, "", c.mapErr("stat", key, err)
		}
		p := make([]byte, a.Size)
		err = c.b.ReadAt(ctx, key, p, 0)
		if errors.Is(err, tier.ErrNotExist) || errors.Is(err, tier.ErrRange) {
			continue // replaced or deleted meanwhile
		}
		if err != nil {
			return nil, "", c.mapErr("read", key, err)
		}
		b, err := c.b.Stat(ctx, key)
		if errors.Is(err, tier.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, "", c.mapErr("stat", key, err)
		}
		if b.ETag == a.ETag && b.Size == a.Size {
			return p, a.ETag, nil
		}
	}
	return nil, "", fmt.Errorf("broker: checkpoint store: %q changed while being read, %d times", key, getAttempts)
}

func (c checkpointBucket) Put(ctx context.Context, key string, data []byte, ifAbsent bool, ifMatch string) (string, error) {
	ctx, cancel := c.bound(ctx, key)
	defer cancel()
	r, n := bytes.NewReader(data), int64(len(data))
	var (
		etag string
		err  error
	)
	switch {
	case ifAbsent && ifMatch != "":
		return "", fmt.Errorf("broker: checkpoint store: put %q: both if-absent and if-match", key)
	case ifAbsent:
		etag, err = c.b.PutIf(ctx, key, r, n, tier.IfAbsent())
	case ifMatch != "":
		etag, err = c.b.PutIf(ctx, key, r, n, tier.IfMatch(ifMatch))
	default:
		// Unconditional (offsets does not write these itself; tests do):
		// the ETag is read back, so a racing writer's may be returned.
		if err = c.b.Put(ctx, key, r, n); err == nil {
			var a tier.Attrs
			a, err = c.b.Stat(ctx, key)
			etag = a.ETag
		}
	}
	if err != nil {
		return "", c.mapErr("put", key, err)
	}
	return etag, nil
}

func (c checkpointBucket) Delete(ctx context.Context, key string) error {
	ctx, cancel := c.bound(ctx, key)
	defer cancel()
	if err := c.b.Delete(ctx, key); err != nil {
		return c.mapErr("delete", key, err)
	}
	return nil
}

func (c checkpointBucket) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	err := c.b.List(ctx, prefix, func(key string, _ int64) error {
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		return nil, c.mapErr("list", prefix, err)
	}
	return keys, nil
}

func (c checkpointBucket) mapErr(op, key string, err error) error {
	switch {
	case errors.Is(err, tier.ErrNotExist):
		return fmt.Errorf("%w: %s %q: %w", offsets.ErrObjectNotFound, op, key, err)
	case errors.Is(err, tier.ErrPreconditionFailed):
		return fmt.Errorf("%w: %s %q: %w", offsets.ErrPrecondition, op, key, err)
	}
	return fmt.Errorf("broker: checkpoint store: %s %q: %w", op, key, err)
}
