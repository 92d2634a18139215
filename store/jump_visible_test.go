package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestJumpVisibleEndTrailingHoleAfterHiddenRecords: a promoted master
// whose queue ends in the jump's hole (nothing written since the
// promotion) while its last records below the jump are not yet held by
// the slave (MaxPhys below them) reports the first hidden record as the
// visible end, not the jump: GET_MAX_OFFSET and resetOffset's
// min(off, VisibleMaxQueueOffset) must not send a consumer past records
// that become visible later.
func TestJumpVisibleEndTrailingHoleAfterHiddenRecords(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.CQEntriesPerFile = 1000
	s := mustOpen(t, o)
	defer mustClose(t, s)
	var res []PutResult
	for i := range 10 {
		res = append(res, mustPut(t, s, msg("Q", 0, fmt.Sprint("old-", i)))...)
	}
	const to = 65_541
	if _, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: to}}}); err != nil {
		t.Fatal(err)
	}
	held := res[4].PhysOffset + int64(res[4].Size) // the slave holds records 0..4 only
	got, err := s.VisibleMaxQueueOffset(ctx, "Q", 0, held)
	if err != nil {
		t.Fatal(err)
	}
	if got != 5 {
		t.Errorf("VisibleMaxQueueOffset with records 5..9 not held and the jump's hole after them: %d, want 5", got)
	}
	// Get from 0 returning 2 records asks visibleEnd for MaxOffset too.
	r, err := s.Get(ctx, GetRequest{Topic: "Q", QueueID: 0, Offset: 0, MaxMsgs: 2, MaxPhys: held})
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxOffset != 5 {
		t.Errorf("Get(0, 2 msgs, MaxPhys=end of record 4): MaxOffset %d, want 5", r.MaxOffset)
	}
}
