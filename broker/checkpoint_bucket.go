package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/tier"
)

// newCheckpointStore adapts b, a Bucket already under the broker's prefix
// (<prefix>/<cluster>/<brokerName>/), to the object store offsets keeps its
// checkpoints and lease in. tier errors are mapped to offsets' sentinels and
// stay matchable (ErrNotExist → ErrObjectNotFound, ErrPreconditionFailed →
// ErrPrecondition).
func newCheckpointStore(b tier.Bucket) offsets.ObjectStore { return checkpointBucket{b: b} }

type checkpointBucket struct{ b tier.Bucket }

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
