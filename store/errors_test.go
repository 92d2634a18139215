package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

// recordingInjector fails the i-th operation and remembers which it was.
type recordingInjector struct {
	idx     *errorfs.Index
	mu      sync.Mutex
	op      errorfs.Op
	path    string
	hitOnce bool
}

func (r *recordingInjector) MaybeError(op errorfs.Op, path string) error {
	err := r.idx.MaybeError(op, path)
	if err != nil {
		r.mu.Lock()
		r.op, r.path, r.hitOnce = op, path, true
		r.mu.Unlock()
	}
	return err
}

// errorWorkload opens a store, writes across segment and consumequeue file
// boundaries, reads, flushes, writes again and closes. It returns the first
// error and the messages acknowledged before it.
func errorWorkload(fs vfs.FS) (acks []acked, err error) {
	o := testOpts(fs)
	o.SegmentSize = 4 << 10
	o.MaxMessageSize = 2 << 10
	o.CQEntriesPerFile = 4
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := s.Close(); err == nil {
			err = cerr
		}
	}()
	ctx := context.Background()
	put := func(i int) error {
		batch := []Message{msg("E", int32(i%2), fmt.Sprintf("m%d-%0400d", i, i)), msg("E", int32(i%2), fmt.Sprintf("n%d", i))}
		res, err := s.Put(ctx, batch)
		if err != nil {
			return err
		}
		acks = appendAcked(acks, batch, res)
		return nil
	}
	for i := range 12 {
		if err := put(i); err != nil {
			return acks, err
		}
	}
	if _, err := s.Get(ctx, GetRequest{Topic: "E", QueueID: 1, Offset: 0}); err != nil {
		return acks, err
	}
	if _, err := s.ReadRecord(0); err != nil {
		return acks, err
	}
	if err := s.Flush(); err != nil {
		return acks, err
	}
	for i := 12; i < 16; i++ {
		if err := put(i); err != nil {
			return acks, err
		}
	}
	if _, err := s.Get(ctx, GetRequest{Topic: "E", QueueID: 0, Offset: 1}); err != nil {
		return acks, err
	}
	return acks, nil
}

func TestStoreErrorsSurface(t *testing.T) {
	for i := int64(0); i < 5000; i++ {
		mem := vfs.NewMem()
		inj := &recordingInjector{idx: errorfs.OnIndex(i)}
		acks, err := errorWorkload(errorfs.Wrap(mem, inj))
		if !inj.hitOnce {
			if err != nil {
				t.Fatalf("i=%d: nothing injected, but %v", i, err)
			}
			t.Logf("workload succeeded after failing each of its %d operations in turn", i)
			return
		}
		if err == nil {
			t.Fatalf("i=%d: injected into %v %s, but the workload succeeded", i, inj.op, inj.path)
		}
		if !errors.Is(err, errorfs.ErrInjected) {
			t.Fatalf("i=%d: injected into %v %s, got unrelated error %v", i, inj.op, inj.path, err)
		}
		// Whatever failed, the files on disk must reopen, and every
		// acknowledged message must be there.
		s, err := Open(testOpts(mem))
		if err != nil {
			t.Fatalf("i=%d (%v %s): reopen: %v", i, inj.op, inj.path, err)
		}
		checkAcked(t, s, "E", acks)
		checkConsistent(t, s, "E", 2)
		mustClose(t, s)
	}
	t.Fatal("workload never succeeded")
}

func TestStoreDiskFull(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.MinFreeBytes = 4 << 10
	// The writer's own ENOSPC: no zeroed tail for the writes to land in
	// (TestZeroTailDiskFull covers the store with one).
	o.ZeroAhead = -1
	s := mustOpen(t, o)
	defer mustClose(t, s)
	ctx := context.Background()
	var acks []acked
	put := func(i int) error {
		m := msg("F", 0, fmt.Sprintf("%d-%01000d", i, i))
		res, err := s.Put(ctx, []Message{m})
		if err == nil {
			acks = append(acks, acked{0, res[0].QueueOffset, string(m.Body)})
		}
		return err
	}
	for i := range 5 {
		if err := put(i); err != nil {
			t.Fatal(err)
		}
	}
	// The disk fills up under the store (another process wrote to it): the
	// write itself hits ENOSPC.
	fs.SetFreeSpace(500)
	if err := put(5); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("put on a full disk: %v", err)
	}
	// Now the reserve check refuses before writing.
	fs.SetFreeSpace(5 << 10)
	if err := put(6); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("put below the reserve: %v", err)
	}
	if got := s.MaxQueueOffset("F", 0); got != 5 {
		t.Fatalf("failed puts took queue offsets: max %d", got)
	}
	// Space comes back: writes work, offsets stay dense.
	fs.SetFreeSpace(1 << 30)
	for i := 7; i < 10; i++ {
		if err := put(i); err != nil {
			t.Fatalf("put after space freed: %v", err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	checkAcked(t, s, "F", acks)
	checkConsistent(t, s, "F", 1)
}
