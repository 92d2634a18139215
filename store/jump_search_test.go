package store

import (
	"context"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestJumpSearchesOverHolesAndBlanks: TestStoreOffsetByTime's
// table, with the records spread over a queue that starts past 0 and has
// holes (gaps between files: AppendRaw after a flush) and blanks (a gap
// inside one AppendRaw batch) between them. OffsetByTime must give the
// same records (exact first, else the nearer, ties to the earlier), and
// QueueOffsetAtTime the first offset from which every record is at or
// after the time; both also across a restart (files, not pending).
func TestJumpSearchesOverHolesAndBlanks(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.CQEntriesPerFile = 64
	s := mustOpen(t, o)
	times := []int64{100, 200, 200, 200, 300, 400, 1000}
	qoffs := []int64{100, 1000, 1001, 1002, 5000, 5003, 9000}
	// Batches: {100} | hole | {1000,1001,1002} | hole | {5000, blanks, 5003} | hole | {9000}
	batches := [][]int{{0}, {1, 2, 3}, {4, 5}, {6}}
	phys := int64(0)
	for _, b := range batches {
		var raw []byte
		for _, i := range b {
			raw = append(raw, encodeTestRecord(Message{Topic: "TS", QueueID: 2, Body: []byte{byte(i)}}, qoffs[i], phys+int64(len(raw)), times[i])...)
		}
		if err := s.AppendRaw(phys, raw); err != nil {
			t.Fatal(err)
		}
		phys += int64(len(raw))
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	byTime := []struct{ ts, want int64 }{
		{50, 0}, {100, 0}, {149, 0}, {150, 0}, {151, 1}, {200, 1}, {250, 3}, {260, 4}, {999, 6}, {5000, 6},
		{1000, 6}, {700, 5}, {701, 6}, {-10, 0}, {400, 5}, {399, 5}, {301, 4}, {350, 4}, {351, 5}, {201, 3}, {1 << 50, 6},
	}
	// QueueOffsetAtTime: the first offset from which every record is at or
	// after ts (just past the last older record; min when none is older,
	// max when all are).
	atTime := []struct{ ts, want int64 }{
		{50, 100}, {100, 100}, {101, 101}, {200, 101}, {201, 1003}, {300, 1003}, {301, 5001}, {400, 5001}, {401, 5004}, {1000, 5004}, {1001, 9001},
	}
	check := func(s *Store, when string) {
		t.Helper()
		if mn, mx := s.MinQueueOffset("TS", 2), s.MaxQueueOffset("TS", 2); mn != 100 || mx != 9001 {
			t.Fatalf("%s: queue [%d, %d), want [100, 9001)", when, mn, mx)
		}
		for _, c := range byTime {
			got, err := s.OffsetByTimeContext(ctx, "TS", 2, c.ts)
			if err != nil || got != qoffs[c.want] {
				t.Errorf("%s: OffsetByTime(%d) = %d, %v; want %d", when, c.ts, got, err, qoffs[c.want])
			}
		}
		for _, c := range atTime {
			got, err := s.QueueOffsetAtTime(ctx, "TS", 2, c.ts)
			if err != nil || got != c.want {
				t.Errorf("%s: QueueOffsetAtTime(%d) = %d, %v; want %d", when, c.ts, got, err, c.want)
			}
		}
		// visibleEnd: the slave holds records up to 5000.
		held := int64(0)
		for _, r := range readAcrossHoles(t, s, "TS", 2) {
			if r.QueueOffset == 5000 {
				held = r.PhysOffset + int64(r.Size)
			}
		}
		if got, err := s.VisibleMaxQueueOffset(ctx, "TS", 2, held); err != nil || got != 5001 {
			t.Errorf("%s: VisibleMaxQueueOffset(held to 5000) = %d, %v; want 5001", when, got, err)
		}
	}
	check(s, "open")
	mustClose(t, s)
	s = mustOpen(t, o)
	defer mustClose(t, s)
	check(s, "reopened")

	// A trailing hole (a jump with nothing after it): OffsetByTime gives
	// the same records (QueueOffsetAtTime does not:
	// TestJumpRetentionWithATrailingHoleDropsTheQueue).
	if _, err := s.ResumeQueues(map[string]map[int32]QueueRange{"TS": {2: {Max: 20_000}}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range byTime {
		if got, err := s.OffsetByTimeContext(ctx, "TS", 2, c.ts); err != nil || got != qoffs[c.want] {
			t.Errorf("jumped: OffsetByTime(%d) = %d, %v; want %d", c.ts, got, err, qoffs[c.want])
		}
	}
}
