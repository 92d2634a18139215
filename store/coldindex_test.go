package store

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// hintingIndex is a fakeIndex that takes read-ahead hints
// (ColdReadAhead) and keeps them to be resolved by the test.
type hintingIndex struct {
	*fakeIndex
	mu      sync.Mutex
	pending []func(context.Context) (int64, bool, error)
	calls   int
}

func (h *hintingIndex) PrefetchLog(next func(ctx context.Context) (int64, bool, error)) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pending = append(h.pending, next)
	h.calls++
	return true
}

// resolve runs the hints given so far, as the reader's goroutine would,
// and adds the offsets they name to got.
func (h *hintingIndex) resolve(t *testing.T, got map[int64]bool) {
	t.Helper()
	h.mu.Lock()
	p := h.pending
	h.pending = nil
	h.mu.Unlock()
	for _, next := range p {
		off, ok, err := next(context.Background())
		if err != nil {
			t.Fatalf("hint: %v", err)
		}
		if ok {
			got[off] = true
		}
	}
}

// TestStoreColdIndexHintsNextSegment: a restored store replaying every
// queue from the cold index hints, for each queue and each segment it
// moves on to, the commitlog offset of the queue's first record there,
// before the read that returns that record; once per segment and queue.
func TestStoreColdIndexHintsNextSegment(t *testing.T) {
	f := newRestoreFixture(t, 600)
	h := &hintingIndex{fakeIndex: f.idx}
	o := f.opts(vfs.NewMem())
	o.ColdIndex = h
	b := mustOpen(t, o)
	defer mustClose(t, b)
	bases := map[int64]bool{}
	for _, sg := range f.a.SealedSegments() {
		bases[sg.Base] = true
	}
	segOf := func(phys int64) int64 {
		best := int64(-1)
		for base := range bases {
			if base <= phys && base > best {
				best = base
			}
		}
		return best
	}
	hinted := map[int64]bool{}
	next := map[qref]int64{}
	lastSeg := map[qref]int64{}
	for _, q := range restoreQueues {
		next[q] = b.MinQueueOffset(q.topic, q.id)
		lastSeg[q] = -1
	}
	crossings := 0
	for more := true; more; {
		more = false
		for _, q := range restoreQueues {
			if next[q] >= f.ck[q.topic][q.id].Max {
				continue
			}
			more = true
			r, err := b.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: next[q], MaxMsgs: 4})
			if err != nil || r.Status != Found {
				t.Fatalf("%v@%d: %v %v", q, next[q], r.Status, err)
			}
			h.resolve(t, hinted)
			for _, rec := range r.Records {
				phys := int64(binary.BigEndian.Uint64(rec[offPhysOffset:]))
				seg := segOf(phys)
				if seg != lastSeg[q] {
					if lastSeg[q] >= 0 {
						crossings++
						if !hinted[phys] {
							t.Fatalf("%v: its first record in segment %d (at %d) was not hinted", q, seg, phys)
						}
					}
					lastSeg[q] = seg
				}
			}
			next[q] = r.NextBeginOffset
		}
	}
	if crossings < len(bases) {
		t.Fatalf("only %d crossings over %d segments: the test shows little", crossings, len(bases))
	}
	if h.calls > len(bases)*len(restoreQueues) {
		t.Fatalf("%d hints for %d segments and %d queues: more than one per segment and queue", h.calls, len(bases), len(restoreQueues))
	}
	t.Logf("%d crossings, %d hints, %d offsets hinted", crossings, h.calls, len(hinted))
}
