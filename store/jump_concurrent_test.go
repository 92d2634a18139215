package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestJumpConcurrentWithFlushAndReaders: ResumeQueues (flushMu + mu,
// I/O under both) while writers Put, a flusher flushes and readers read
// across the hole; a follower fed the master's log by AppendRaw while its
// own flusher and readers run. Run under -race. Checks: Put offsets per
// queue strictly increase and the first one after the jump is the jump;
// readers never fail, never see a queue offset twice or out of order; the
// follower ends with the master's numbering and no blank entries.
func TestJumpConcurrentWithFlushAndReaders(t *testing.T) {
	ctx := context.Background()
	fsX, fsY := vfs.NewMem(), vfs.NewMem()
	ox, oy := testOpts(fsX), testOpts(fsY)
	ox.CQEntriesPerFile, oy.CQEntriesPerFile = 16, 16
	x := mustOpen(t, ox)
	defer func() { mustClose(t, x) }()
	y := mustOpen(t, oy)
	defer func() { mustClose(t, y) }()

	const queues = 4
	const to = 1_000
	for q := range int32(queues) {
		for i := range 20 {
			mustPut(t, x, msg("Q", q, fmt.Sprint("pre-", i)))
		}
	}
	var streamed atomic.Int64
	stream := func() error {
		from, end := streamed.Load(), x.MaxPhysOffset()
		if end <= from {
			return nil
		}
		for _, sg := range x.LocalSegments() {
			lo, hi := max(from, sg.Base), min(end, sg.Base+sg.Length)
			if lo >= hi {
				continue
			}
			b := make([]byte, hi-lo)
			rec, err := fsX.OpenFile(sg.Path, 0, 0)
			if err != nil {
				return err
			}
			err = readFull(rec, b, lo-sg.Base)
			rec.Close()
			if err != nil {
				return err
			}
			if err := y.AppendRaw(lo, b); err != nil {
				return fmt.Errorf("AppendRaw(%d): %w", lo, err)
			}
		}
		streamed.Store(end)
		return nil
	}
	if err := stream(); err != nil {
		t.Fatal(err)
	}
	if err := y.Flush(); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	reader := func(s *Store) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for q := range int32(queues) {
				off, last := s.MinQueueOffset("Q", q), int64(-1)
				for range 200 {
					r, err := s.Get(ctx, GetRequest{Topic: "Q", QueueID: q, Offset: off, MaxMsgs: 8})
					if err != nil {
						fail(err)
						return
					}
					if r.Status == Found {
						for _, b := range r.Records {
							rec, _, err := DecodeRecord(b)
							if err != nil {
								fail(err)
								return
							}
							if rec.QueueOffset <= last {
								fail(fmt.Errorf("Q/%d: offset %d after %d", q, rec.QueueOffset, last))
								return
							}
							last = rec.QueueOffset
						}
					} else if r.Status != OffsetFoundNull && r.Status != NoMatchedMessage {
						break
					}
					if r.NextBeginOffset <= off {
						break
					}
					off = r.NextBeginOffset
				}
				if _, err := s.QueueOffsetAtPhys(ctx, "Q", q, s.MaxPhysOffset()/2); err != nil {
					fail(err)
					return
				}
			}
		}
	}
	flusher := func(s *Store) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.Flush(); err != nil {
				fail(err)
				return
			}
		}
	}
	wg.Add(4)
	go reader(x)
	go reader(y)
	go flusher(x)
	go flusher(y)

	lastOff := make([]int64, queues)
	var mu sync.Mutex
	var pw sync.WaitGroup
	pw.Add(queues)
	jumped := make(chan struct{})
	for q := range int32(queues) {
		go func() {
			defer pw.Done()
			for i := range 60 {
				if i == 20 {
					<-jumped
				}
				res, err := x.Put(ctx, []Message{msg("Q", q, fmt.Sprint("w-", i))})
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				if res[0].QueueOffset <= lastOff[q] {
					fail(fmt.Errorf("Q/%d: Put got %d after %d", q, res[0].QueueOffset, lastOff[q]))
				}
				if i == 20 && res[0].QueueOffset < to {
					fail(fmt.Errorf("Q/%d: first Put after the jump at %d, want >= %d", q, res[0].QueueOffset, to))
				}
				lastOff[q] = res[0].QueueOffset
				mu.Unlock()
				if i%5 == 0 {
					if err := func() error { mu.Lock(); defer mu.Unlock(); return stream() }(); err != nil {
						fail(err)
						return
					}
				}
			}
		}()
	}
	rg := map[int32]QueueRange{}
	for q := range int32(queues) {
		rg[q] = QueueRange{Max: to}
	}
	// Let some Puts of the first batch run, then jump.
	if _, err := x.ResumeQueues(map[string]map[int32]QueueRange{"Q": rg}); err != nil {
		t.Fatal(err)
	}
	close(jumped)
	pw.Wait()
	mu.Lock()
	if err := stream(); err != nil {
		t.Fatal(err)
	}
	mu.Unlock()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := y.Flush(); err != nil {
		t.Fatal(err)
	}
	for q := range int32(queues) {
		if a, b := x.MaxQueueOffset("Q", q), y.MaxQueueOffset("Q", q); a != b {
			t.Errorf("Q/%d: master ends at %d, follower at %d", q, a, b)
		}
		xs, ys := readAcrossHoles(t, x, "Q", q), readAcrossHoles(t, y, "Q", q)
		if len(xs) != len(ys) || len(xs) != 80 {
			t.Errorf("Q/%d: master reads %d records, follower %d, want 80", q, len(xs), len(ys))
			continue
		}
		for i := range xs {
			if xs[i].QueueOffset != ys[i].QueueOffset || xs[i].PhysOffset != ys[i].PhysOffset {
				t.Errorf("Q/%d record %d: master %d@%d, follower %d@%d", q, i, xs[i].QueueOffset, xs[i].PhysOffset, ys[i].QueueOffset, ys[i].PhysOffset)
				break
			}
		}
	}
	// Reopen both: the numbering survives.
	for _, c := range []struct {
		s *Store
		o Options
	}{{x, ox}, {y, oy}} {
		want := make([]int64, queues)
		for q := range int32(queues) {
			want[q] = c.s.MaxQueueOffset("Q", q)
		}
		mustClose(t, c.s)
		s := mustOpen(t, c.o)
		for q := range int32(queues) {
			if got := s.MaxQueueOffset("Q", q); got != want[q] {
				t.Errorf("Q/%d after reopen ends at %d, want %d", q, got, want[q])
			}
		}
		if c.s == x {
			x = s
		} else {
			y = s
		}
	}
}
