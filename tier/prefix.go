package tier

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// WithPrefix returns a Bucket that stores every key under prefix in b, so
// several users can share one bucket. prefix is a key ("cluster-a" or
// "a/b"); a trailing '/' is optional. Keys passed to the returned Bucket, and
// keys it reports from List, do not include the prefix. Closing it closes b.
func WithPrefix(b Bucket, prefix string) (Bucket, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	if err := ValidateKey(prefix); err != nil {
		return nil, fmt.Errorf("tier: prefix: %w", err)
	}
	return &prefixed{b: b, prefix: prefix + "/"}, nil
}

type prefixed struct {
	b      Bucket
	prefix string // ends in '/'
}

func (p *prefixed) key(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	return p.prefix + key, nil
}

func (p *prefixed) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	k, err := p.key(key)
	if err != nil {
		return err
	}
	return p.b.Put(ctx, k, r, size)
}

func (p *prefixed) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond Cond) (string, error) {
	k, err := p.key(key)
	if err != nil {
		return "", err
	}
	return p.b.PutIf(ctx, k, r, size, cond)
}

func (p *prefixed) ReadAt(ctx context.Context, key string, buf []byte, off int64) error {
	k, err := p.key(key)
	if err != nil {
		return err
	}
	return p.b.ReadAt(ctx, k, buf, off)
}

func (p *prefixed) Stat(ctx context.Context, key string) (Attrs, error) {
	k, err := p.key(key)
	if err != nil {
		return Attrs{}, err
	}
	return p.b.Stat(ctx, k)
}

func (p *prefixed) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	return p.b.List(ctx, p.prefix+prefix, func(key string, size int64) error {
		return fn(strings.TrimPrefix(key, p.prefix), size)
	})
}

func (p *prefixed) Delete(ctx context.Context, key string) error {
	k, err := p.key(key)
	if err != nil {
		return err
	}
	return p.b.Delete(ctx, k)
}

func (p *prefixed) Close() error { return p.b.Close() }
