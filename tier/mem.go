package tier

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// NewMem returns an empty in-memory Bucket. It keeps the full contract and
// is meant for tests of code that uses a Bucket.
func NewMem() Bucket {
	b := &memBucket{}
	b.mu.objs = make(map[string]memObj)
	return b
}

type memObj struct {
	data    []byte // never modified after it is stored
	version uint64
}

type memBucket struct {
	// mu is held only around map access, never across a caller's Read.
	mu struct {
		sync.Mutex
		objs map[string]memObj
		next uint64 // last version handed out
	}
}

func (m *memObj) etag() string { return strconv.FormatUint(m.version, 10) }

func (b *memBucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return PutFunc(b.put).Put(ctx, key, r, size)
}

func (b *memBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond Cond) (string, error) {
	return PutFunc(b.put).PutIf(ctx, key, r, size, cond)
}

func (b *memBucket) put(ctx context.Context, key string, r io.Reader, size int64, cond *Cond) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return "", fmt.Errorf("tier: put %q: read: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, exists := b.mu.objs[key]
	if cond != nil {
		if err := cond.Check(key, exists, cur.etag()); err != nil {
			return "", err
		}
	}
	b.mu.next++
	o := memObj{data: data, version: b.mu.next}
	b.mu.objs[key] = o
	return o.etag(), nil
}

func (b *memBucket) get(ctx context.Context, key string) (memObj, error) {
	if err := ValidateKey(key); err != nil {
		return memObj{}, err
	}
	if err := ctx.Err(); err != nil {
		return memObj{}, err
	}
	b.mu.Lock()
	o, ok := b.mu.objs[key]
	b.mu.Unlock()
	if !ok {
		return memObj{}, fmt.Errorf("%w: %q", ErrNotExist, key)
	}
	return o, nil
}

func (b *memBucket) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	o, err := b.get(ctx, key)
	if err != nil {
		return err
	}
	if err := CheckRange(key, off, len(p), int64(len(o.data))); err != nil {
		return err
	}
	copy(p, o.data[off:])
	return nil
}

func (b *memBucket) Stat(ctx context.Context, key string) (Attrs, error) {
	o, err := b.get(ctx, key)
	if err != nil {
		return Attrs{}, err
	}
	return Attrs{Size: int64(len(o.data)), ETag: o.etag()}, nil
}

func (b *memBucket) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	type kv struct {
		key  string
		size int64
	}
	b.mu.Lock()
	var all []kv
	for k, o := range b.mu.objs {
		if strings.HasPrefix(k, prefix) {
			all = append(all, kv{k, int64(len(o.data))})
		}
	}
	b.mu.Unlock()
	slices.SortFunc(all, func(a, b kv) int { return strings.Compare(a.key, b.key) })
	for _, e := range all {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(e.key, e.size); err != nil {
			return err
		}
	}
	return nil
}

func (b *memBucket) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.mu.objs, key)
	b.mu.Unlock()
	return nil
}

func (b *memBucket) Close() error { return nil }
