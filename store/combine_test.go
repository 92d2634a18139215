package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

// clWrites counts commitlog WriteAt calls and, when armed, fails the next
// one with fail.
type clWrites struct {
	n      atomic.Int64
	mu     sync.Mutex
	fail   error
	failAt int64
}

func (c *clWrites) MaybeError(op errorfs.Op, path string) error {
	if op != errorfs.OpFileWriteAt || filepath.Base(filepath.Dir(path)) != "commitlog" {
		return nil
	}
	n := c.n.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil && n == c.failAt {
		err := c.fail
		c.fail = nil
		return err
	}
	return nil
}

// failOn fails the k-th commitlog write from now (1: the next) with err.
func (c *clWrites) failOn(k int64, err error) {
	c.mu.Lock()
	c.fail, c.failAt = err, c.n.Load()+k
	c.mu.Unlock()
}

// waitFor polls cond (bounded) for a state another goroutine reaches
// without sleeping on the store's side.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond)
	}
}

type putOutcome struct {
	res []PutResult
	err error
}

// putsBehindLeader runs the Puts of batches so that the first leads a round
// of its own while all the others wait in the commit queue, in order; they
// are then written together by the next round. It returns each Put's outcome.
func putsBehindLeader(t *testing.T, s *Store, batches [][]Message, beforeRelease func()) []putOutcome {
	t.Helper()
	out := make([]putOutcome, len(batches))
	var wg sync.WaitGroup
	put := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].res, out[i].err = s.Put(context.Background(), batches[i])
		}()
	}
	queued := func() (bool, int) {
		s.cq.mu.Lock()
		defer s.cq.mu.Unlock()
		return s.cq.leading, len(s.cq.q)
	}
	s.mu.Lock() // the leader blocks in writeRound
	put(0)
	waitFor(t, "a leader", func() bool { l, _ := queued(); return l })
	for i := 1; i < len(batches); i++ {
		put(i)
		waitFor(t, fmt.Sprintf("put %d queued", i), func() bool { _, n := queued(); return n == i })
	}
	if beforeRelease != nil {
		beforeRelease()
	}
	s.mu.Unlock()
	wg.Wait()
	return out
}

func combineStore(t *testing.T, segSize int64) (*Store, *clWrites, *vfs.Mem) {
	mem := vfs.NewMem()
	cw := &clWrites{}
	o := testOpts(errorfs.Wrap(mem, cw))
	o.ZeroAhead = -1 // count (and fail) the writer's commitlog writes only, not the zero-filler's
	if segSize > 0 {
		o.SegmentSize = segSize
		o.MaxMessageSize = int(segSize / 2)
	}
	s := mustOpen(t, o)
	return s, cw, mem
}

func TestPutCombinesQueuedWriters(t *testing.T) {
	s, cw, _ := combineStore(t, 0)
	defer mustClose(t, s)
	const n = 16
	batches := make([][]Message, n)
	for i := range batches {
		batches[i] = []Message{msg("C", int32(i%2), fmt.Sprintf("c%d", i))}
	}
	batches[5] = append(batches[5], msg("C", 1, "c5b"), msg("C", 0, "c5c"))
	before := cw.n.Load()
	out := putsBehindLeader(t, s, batches, nil)
	if got := cw.n.Load() - before; got != 2 {
		t.Fatalf("%d commitlog writes for %d Puts, want 2 (the leader's, then one for the rest)", got, n)
	}
	var acks []acked
	next := map[int32]int64{}
	var phys int64
	for i, o := range out {
		if o.err != nil {
			t.Fatalf("put %d: %v", i, o.err)
		}
		for k, r := range o.res {
			m := batches[i][k]
			if r.PhysOffset != phys || r.QueueOffset != next[m.QueueID] {
				t.Fatalf("put %d msg %d: %+v, want phys %d queue offset %d (acceptance order)", i, k, r, phys, next[m.QueueID])
			}
			phys += int64(r.Size)
			next[m.QueueID]++
			acks = append(acks, acked{m.QueueID, r.QueueOffset, string(m.Body)})
		}
	}
	if s.MaxPhysOffset() != phys {
		t.Fatalf("log ends at %d, records end at %d", s.MaxPhysOffset(), phys)
	}
	checkAcked(t, s, "C", acks)
	checkConsistent(t, s, "C", 2)
}

func TestPutCombinedRoundAcrossSegments(t *testing.T) {
	s, _, _ := combineStore(t, 4<<10)
	defer mustClose(t, s)
	batches := make([][]Message, 20)
	for i := range batches {
		batches[i] = []Message{msg("R", 0, fmt.Sprintf("%d-%0900d", i, i))}
	}
	// One Put bigger than a segment: its records span segments.
	batches[7] = nil
	for k := range 6 {
		batches[7] = append(batches[7], msg("R", 0, fmt.Sprintf("big%d-%0900d", k, k)))
	}
	out := putsBehindLeader(t, s, batches, nil)
	var acks []acked
	var qoff int64
	for i, o := range out {
		if o.err != nil {
			t.Fatalf("put %d: %v", i, o.err)
		}
		for k, r := range o.res {
			if r.QueueOffset != qoff {
				t.Fatalf("put %d msg %d: queue offset %d, want %d", i, k, r.QueueOffset, qoff)
			}
			qoff++
			acks = append(acks, acked{0, r.QueueOffset, string(batches[i][k].Body)})
		}
	}
	if len(s.LocalSegments()) < 5 {
		t.Fatalf("only %d segments", len(s.LocalSegments()))
	}
	checkAcked(t, s, "R", acks)
	checkConsistent(t, s, "R", 1)
}

// A Put refused for space in a combined round fails alone and takes no
// queue offset.
func TestPutCombinedSpaceRefusalFailsOnlyItsPut(t *testing.T) {
	mem := vfs.NewMem()
	o := testOpts(mem)
	o.MinFreeBytes = 4 << 10
	s := mustOpen(t, o)
	defer mustClose(t, s)
	mem.SetFreeSpace(4<<10 + 3<<10)
	small := func(i int) []Message { return []Message{msg("S", 0, fmt.Sprintf("s%d", i))} }
	big := []Message{msg("S", 0, strings.Repeat("x", 7<<10))}
	out := putsBehindLeader(t, s, [][]Message{small(0), small(1), big, small(3)}, nil)
	if !errors.Is(out[2].err, ErrDiskFull) {
		t.Fatalf("big put: %v, want ErrDiskFull", out[2].err)
	}
	for i, want := range map[int]int64{0: 0, 1: 1, 3: 2} {
		if out[i].err != nil || out[i].res[0].QueueOffset != want {
			t.Fatalf("put %d: %+v %v, want queue offset %d", i, out[i].res, out[i].err, want)
		}
	}
	checkConsistent(t, s, "S", 1)
}

// ENOSPC on a combined write fails the Puts of that write (not sticky): the
// write is cut off, no queue offset is taken, and later Puts continue.
func TestPutCombinedWriteENOSPC(t *testing.T) {
	s, cw, _ := combineStore(t, 0)
	defer mustClose(t, s)
	m := func(i int) []Message { return []Message{msg("D", int32(i%2), fmt.Sprintf("d%d", i))} }
	acks := []acked{{0, mustPut(t, s, m(0)[0])[0].QueueOffset, "d0"}}
	end := s.MaxPhysOffset()
	cw.failOn(2, syscall.ENOSPC) // the leader writes alone, then the rest together
	out := putsBehindLeader(t, s, [][]Message{m(1), m(2), m(3), m(4)}, nil)
	if out[0].err != nil {
		t.Fatalf("leader: %v", out[0].err)
	}
	acks = append(acks, acked{1, out[0].res[0].QueueOffset, "d1"})
	for i := 1; i < 4; i++ {
		if !errors.Is(out[i].err, ErrDiskFull) {
			t.Fatalf("combined put %d: %v, want ErrDiskFull", i, out[i].err)
		}
	}
	end += int64(out[0].res[0].Size)
	if got := s.MaxPhysOffset(); got != end {
		t.Fatalf("log end %d after the failed combined write, want %d", got, end)
	}
	if s.MaxQueueOffset("D", 0) != 1 || s.MaxQueueOffset("D", 1) != 1 {
		t.Fatalf("failed write took queue offsets: %d %d", s.MaxQueueOffset("D", 0), s.MaxQueueOffset("D", 1))
	}
	res := mustPut(t, s, m(5)[0])
	if res[0].PhysOffset != end || res[0].QueueOffset != 1 {
		t.Fatalf("put after the failed write: %+v, want phys %d queue offset 1", res[0], end)
	}
	acks = append(acks, acked{1, 1, "d5"})
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	checkAcked(t, s, "D", acks)
	checkConsistent(t, s, "D", 2)
}

// Any other write error in a combined round fails its Puts and is sticky.
func TestPutCombinedWriteErrorSticky(t *testing.T) {
	s, cw, _ := combineStore(t, 0)
	defer s.Close()
	m := func(i int) []Message { return []Message{msg("E", 0, fmt.Sprintf("e%d", i))} }
	cw.failOn(2, syscall.EIO)
	out := putsBehindLeader(t, s, [][]Message{m(0), m(1), m(2)}, nil)
	if out[0].err != nil {
		t.Fatalf("leader: %v", out[0].err)
	}
	for i := 1; i < 3; i++ {
		if !errors.Is(out[i].err, syscall.EIO) || errors.Is(out[i].err, ErrDiskFull) {
			t.Fatalf("combined put %d: %v, want the EIO", i, out[i].err)
		}
	}
	if _, err := s.Put(context.Background(), m(3)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("put after a sticky error: %v", err)
	}
}

// A single-message Put allocates only its result: the caller's message
// slice stays on its stack on both the leader and the queued path.
func TestPutAllocs(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	m := msg("A", 0, "x")
	n := testing.AllocsPerRun(200, func() {
		if _, err := s.Put(context.Background(), []Message{m}); err != nil {
			t.Fatal(err)
		}
	})
	if n > 1 {
		t.Fatalf("%v allocations per single-message Put, want 1 (the result)", n)
	}
}
