package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/stratamq/stratamq/tier"
)

// memLog is a commitlog of records <4-byte BE size><body> in memory: a Log
// and a Local.
type memLog struct {
	mu   sync.Mutex
	base int64
	buf  []byte
	cut  []int64 // offsets Cut was called at
}

func newMemLog(base int64) *memLog { return &memLog{base: base} }

// record is a test record of n bytes whose body names it.
func record(name string, n int) []byte {
	n = max(n, 8+len(name))
	r := make([]byte, n)
	binary.BigEndian.PutUint32(r, uint32(n))
	copy(r[4:], name)
	return r
}

// add appends a record and returns its [start, end).
func (l *memLog) add(r []byte) (int64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	start := l.base + int64(len(l.buf))
	l.buf = append(l.buf, r...)
	return start, start + int64(len(r))
}

func (l *memLog) LocalMinPhysOffset() int64 { return l.base }

func (l *memLog) MaxPhysOffset() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.base + int64(len(l.buf))
}

func (l *memLog) ReadLog(_ context.Context, off int64, p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if off < l.base || off > l.base+int64(len(l.buf)) {
		return 0, fmt.Errorf("memLog: read at %d outside [%d,%d)", off, l.base, l.base+int64(len(l.buf)))
	}
	return copy(p, l.buf[off-l.base:]), nil
}

func (l *memLog) AppendRaw(off int64, b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if off != l.base+int64(len(l.buf)) {
		return fmt.Errorf("memLog: append at %d, end %d", off, l.base+int64(len(l.buf)))
	}
	for p := 0; p < len(b); {
		n := int(binary.BigEndian.Uint32(b[p:]))
		if n < 8 || p+n > len(b) {
			return fmt.Errorf("memLog: append of a partial record at %d", off+int64(p))
		}
		p += n
	}
	l.buf = append(l.buf, b...)
	return nil
}

func (l *memLog) Cut(at int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = append(l.cut, at)
	l.buf = l.buf[:at-l.base]
	return nil
}

func (l *memLog) bytesAt(off, end int64) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if off < l.base || end > l.base+int64(len(l.buf)) {
		return nil
	}
	return bytes.Clone(l.buf[off-l.base : end-l.base])
}

// faultBucket wraps a bucket with a hook on every conditional PUT.
type faultBucket struct {
	tier.Bucket
	mu   sync.Mutex
	hook func(key string) putAction
	held map[string][]byte // PUTs held back (putHold), landed by land
	puts int
}

type putAction int

const (
	putPass putAction = iota
	putFail           // fails, stores nothing
	putLose           // stores, then reports a failure (the response was lost)
	putHold           // reports a failure; lands when the test says (a late write)
	putSlow           // fails with 503 SlowDown
)

var errInjected = errors.New("injected bucket failure")

func (f *faultBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	f.mu.Lock()
	f.puts++
	act := putPass
	if f.hook != nil {
		act = f.hook(key)
	}
	f.mu.Unlock()
	switch act {
	case putFail:
		return "", errInjected
	case putSlow:
		return "", &tier.ServerError{Op: "put", Key: key, Status: 503, Code: "SlowDown", Err: errInjected}
	case putHold:
		b, err := io.ReadAll(r)
		if err != nil {
			return "", err
		}
		f.mu.Lock()
		if f.held == nil {
			f.held = map[string][]byte{}
		}
		f.held[key] = b
		f.mu.Unlock()
		return "", errInjected
	}
	etag, err := f.Bucket.PutIf(ctx, key, r, size, cond)
	if act == putLose && err == nil {
		return "", errInjected
	}
	return etag, err
}

// land writes a held PUT now, as a late write would: it lands only where
// the number is still free.
func (f *faultBucket) land(key string) error {
	f.mu.Lock()
	b, ok := f.held[key]
	delete(f.held, key)
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("no held put of %s", key)
	}
	_, err := f.Bucket.PutIf(context.Background(), key, bytes.NewReader(b), int64(len(b)), tier.IfAbsent())
	return err
}

func (f *faultBucket) putCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.puts
}

// putObj writes an object straight into b (for walk and reconcile tests).
func putObj(b tier.Bucket, h Header, payload []byte) Header {
	obj, h := encode(h, payload)
	if _, err := b.PutIf(context.Background(), Key("wal/", h.Seq), bytes.NewReader(obj), int64(len(obj)), tier.IfAbsent()); err != nil {
		panic(err)
	}
	return h
}
