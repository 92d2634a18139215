package store

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

// TestJumpSyncPutSlipsInBeforeTheLock: with FlushSync the group commit
// moves the log's durable end without flushMu, so a Put acknowledged
// between ResumeQueues's flush and its taking the writer lock can leave
// its consumequeue entry pending. ResumeQueues must not record a jump over
// it: else a power loss brings the queue back with the jump as a hole,
// recovery re-dispatches the acknowledged record into it, the mismatch
// truncates the queue there and drops the jump, and the promoted master
// numbers the queue below the bucket's reservation (offsets the old
// master may have handed out, handed out again).
func TestJumpSyncPutSlipsInBeforeTheLock(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var s *Store
	var armed atomic.Bool
	var slipped atomic.Int64
	slipped.Store(-1)
	inj := errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		// The rename of the checkpoint that ends ResumeQueues's
		// flushAllLocked: the last step before it takes s.mu.
		if op == errorfs.OpRename && strings.Contains(path, "/checkpoint.tmp-") && armed.CompareAndSwap(true, false) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				res, err := s.Put(ctx, []Message{msg("Q", 0, "slipped-in")})
				if err != nil {
					t.Errorf("put: %v", err)
					return
				}
				slipped.Store(res[0].QueueOffset)
			}()
			<-done // acknowledged: synced by the group commit
		}
		return nil
	})
	o := testOpts(errorfs.Wrap(mem, inj))
	o.Flush = FlushSync
	o.CQEntriesPerFile = 1000
	s = mustOpen(t, o)
	for i := range 5 {
		mustPut(t, s, msg("Q", 0, fmt.Sprint("old-", i)))
	}
	const to = 70_500
	armed.Store(true)
	if n, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: to}}}); err != nil || n != 1 {
		t.Fatalf("ResumeQueues: %d, %v", n, err)
	}
	if armed.Load() || slipped.Load() != 5 {
		t.Fatalf("precondition: the Put did not slip in (armed=%v, offset %d)", armed.Load(), slipped.Load())
	}
	q := s.queue("Q", 0)
	q.mu.RLock()
	pending := len(q.pending) / cqEntrySize
	q.mu.RUnlock()
	t.Logf("after ResumeQueues: Q max %d, %d entries pending (the slipped-in one and %d blanks)", s.MaxQueueOffset("Q", 0), pending, pending-1)

	// Power loss right after the promotion returned.
	crashed := mem.CrashClone()
	mustClose(t, s)
	o2 := testOpts(crashed)
	o2.Flush = FlushSync
	o2.CQEntriesPerFile = 1000
	s2 := mustOpen(t, o2)
	defer mustClose(t, s2)
	checkAcked(t, s2, "Q", []acked{{0, 5, "slipped-in"}})
	if got := s2.MaxQueueOffset("Q", 0); got != to {
		t.Errorf("after a power loss Q ends at %d, want the jump %d: the re-dispatched acknowledged record dropped the jump", got, to)
	}
	if r := mustPut(t, s2, msg("Q", 0, "next")); r[0].QueueOffset < to {
		t.Errorf("next record at queue offset %d, below the reservation %d: offsets handed out again", r[0].QueueOffset, to)
	}
}
