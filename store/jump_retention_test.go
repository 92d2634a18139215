package store

import (
	"context"
	"testing"
)

// TestJumpRetentionWithATrailingHoleDropsTheQueue: right after a
// promotion a jumped queue ends in its hole (no record written since), so
// a bisection's first probe lands in that trailing hole (almost the whole
// [min, max) range: 65,536 offsets against a few records). QueueOffsetAtTime
// must call a probe with no record after it "not older", or the answer is
// the jump whatever the cutoff, and per-topic retention
// (broker/retention.ExpireTopics) raises the queue's min past records
// newer than the cutoff (OffsetTooSmall for consumers; reclaim deletes
// their files).
func TestJumpRetentionWithATrailingHoleDropsTheQueue(t *testing.T) {
	ctx := context.Background()
	s, old := jumpedQueue(t)
	const to = jumpTo
	// No record written since the promotion: Q ends in the hole.
	cutoff := old[2].StoreTimestamp // records 0 and 1 are older
	got, err := s.QueueOffsetAtTime(ctx, "Q", 0, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if got != 2 {
		t.Errorf("QueueOffsetAtTime(record 2's time) = %d, want 2", got)
	}
	// What per-topic retention does with it.
	if err := s.RaiseQueueMins([]QueueMin{{Topic: "Q", QueueID: 0, Min: got}}); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < 5; i++ {
		r, err := s.Get(ctx, GetRequest{Topic: "Q", QueueID: 0, Offset: int64(i), MaxMsgs: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != Found {
			t.Errorf("record %d (newer than the retention cutoff) gone after the retention pass: %v next=%d", i, r.Status, r.NextBeginOffset)
		}
	}
}
