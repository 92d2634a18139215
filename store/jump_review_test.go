package store

// A queue jumped past the bucket's history (ResumeQueues: a hole in the
// middle of the queue) seen by every reader and by restarts: the cases a
// storage review of the first version of jumps found broken.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// putSpaced puts n records of topic/qid, a few milliseconds apart (distinct
// store times), and returns their results.
func putSpaced(t *testing.T, s *Store, topic string, qid int32, tag string, n int) []PutResult {
	t.Helper()
	var out []PutResult
	for i := range n {
		time.Sleep(3 * time.Millisecond)
		out = append(out, mustPut(t, s, msg(topic, qid, fmt.Sprintf("%s-%d", tag, i)))...)
	}
	return out
}

// jumpedQueue is a store (1,000 entries per consumequeue file) whose queue
// Q/0 holds five records a few milliseconds apart, then jumps to 65,541
// (ResumeQueues); it returns the store and the records' results.
func jumpedQueue(t *testing.T) (*Store, []PutResult) {
	t.Helper()
	o := testOpts(vfs.NewMem())
	o.CQEntriesPerFile = 1000
	s := mustOpen(t, o)
	t.Cleanup(func() { mustClose(t, s) })
	old := putSpaced(t, s, "Q", 0, "old", 5)
	if _, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: jumpTo}}}); err != nil {
		t.Fatal(err)
	}
	return s, old
}

// jumpTo is where jumpedQueue's queue jumps.
const jumpTo = 65_541

// TestJumpOffsetAtTimeSkipsRecordsBeforeTheHole: QueueOffsetAtTime
// (per-topic retention's cutoff search, the console) and OffsetByTime
// (SEARCH_OFFSET_BY_TIMESTAMP, resetOffsetByTime) bisect over [min, max);
// a probe in the jump's hole must be judged by the record after it, or the
// search ends at the jump and per-topic retention raises the queue's min
// past records newer than its cutoff (lost).
func TestJumpOffsetAtTimeSkipsRecordsBeforeTheHole(t *testing.T) {
	ctx := context.Background()
	s, old := jumpedQueue(t)
	const to = jumpTo
	putSpaced(t, s, "Q", 0, "new", 3)

	cutoff := old[2].StoreTimestamp
	got, err := s.QueueOffsetAtTime(ctx, "Q", 0, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	byTime, err := s.OffsetByTimeContext(ctx, "Q", 0, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if got != 2 || byTime != 2 {
		t.Errorf("first offset stored at/after record 2's time: QueueOffsetAtTime=%d OffsetByTime=%d, want 2 (the hole [5,%d) is taken as 'older' in a bisection that is no longer monotone)", got, byTime, to)
	}
	// What per-topic retention does with it (broker/retention.ExpireTopics).
	if err := s.RaiseQueueMins([]QueueMin{{Topic: "Q", QueueID: 0, Min: got}}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Get(ctx, GetRequest{Topic: "Q", QueueID: 0, Offset: 2, MaxMsgs: 32})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != Found {
		t.Errorf("record 2 (newer than the retention cutoff) is gone after the retention pass: %v next=%d", r.Status, r.NextBeginOffset)
	}
}

// TestJumpVisibleEndTreatsTheHoleAsHidden: with the jump's hole in the
// middle of the queue and one record past it not yet held by the slave, a
// sync master's GET_MAX_OFFSET (VisibleMaxQueueOffset) is the first record
// not held, not the hole's start tens of thousands of offsets below
// records consumers already read.
func TestJumpVisibleEndTreatsTheHoleAsHidden(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.CQEntriesPerFile = 1000
	s := mustOpen(t, o)
	defer mustClose(t, s)
	for i := range 5 {
		mustPut(t, s, msg("Q", 0, fmt.Sprint("old-", i)))
	}
	const to = 65_541
	if _, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: to}}}); err != nil {
		t.Fatal(err)
	}
	var res []PutResult
	for i := range 3 {
		res = append(res, mustPut(t, s, msg("Q", 0, fmt.Sprint("new-", i)))...)
	}
	held := res[0].PhysOffset + int64(res[0].Size) // the slave holds record `to` only
	got, err := s.VisibleMaxQueueOffset(ctx, "Q", 0, held)
	if err != nil {
		t.Fatal(err)
	}
	if got != to+1 {
		t.Errorf("VisibleMaxQueueOffset with the slave holding record %d: %d, want %d", to, got, to+1)
	}
	// A Get past the queue's end is sent to visibleEnd(min, max) too.
	r, err := s.Get(ctx, GetRequest{Topic: "Q", QueueID: 0, Offset: to + 10, MaxMsgs: 4, MaxPhys: held})
	if err != nil {
		t.Fatal(err)
	}
	if r.NextBeginOffset != to+1 {
		t.Errorf("Get past the end with the slave holding record %d: %v next=%d, want next=%d", to, r.Status, r.NextBeginOffset, to+1)
	}
}

// TestJumpSecondJumpLostOnRestart: a queue jumped twice with no record
// written in between (two promotions of the same copy) comes back from a
// clean restart at the second jump, as ResumeQueues promised.
func TestJumpSecondJumpLostOnRestart(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.CQEntriesPerFile = 1000
	s := mustOpen(t, o)
	for i := range 5 {
		mustPut(t, s, msg("Q", 0, fmt.Sprint("old-", i)))
	}
	for _, to := range []int64{65_541, 131_077} {
		if n, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: to}}}); err != nil || n != 1 {
			t.Fatalf("ResumeQueues(%d): %d, %v", to, n, err)
		}
	}
	if got := s.MaxQueueOffset("Q", 0); got != 131_077 {
		t.Fatalf("before the restart Q ends at %d, want 131077", got)
	}
	mustClose(t, s)
	s = mustOpen(t, o)
	defer mustClose(t, s)
	if got := s.MaxQueueOffset("Q", 0); got != 131_077 {
		t.Errorf("after a clean restart Q ends at %d, want 131077 (the second jump's file was removed as an empty trailing file)", got)
	}
	if r := mustPut(t, s, msg("Q", 0, "next")); r[0].QueueOffset != 131_077 {
		t.Errorf("next record at %d, want 131077", r[0].QueueOffset)
	}
}

// TestJumpReclaimedPrefixLosesTheJump: once reclaim has taken every file
// before the jump (their records dropped to the tier: routine on a tiered
// broker), a power loss that loses the records past the jump while their
// consumequeue entries are on disk must not renumber the queue below the
// jump (offsets the bucket's history may have handed out).
func TestJumpReclaimedPrefixLosesTheJump(t *testing.T) {
	cold, idx := newFakeCold(), newFakeIndex()
	fs := vfs.NewMem()
	o := tieredOpts(fs, cold)
	o.ColdIndex = idx
	s := mustOpen(t, o)
	for i := range 5 {
		mustPut(t, s, msg("Q", 1, fmt.Sprintf("q-%d", i)))
	}
	for i := range 40 {
		mustPut(t, s, msg("Fill", 0, fmt.Sprintf("f-%03d-%s", i, strings.Repeat("f", 150))))
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	const to = 500
	if _, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Q": {1: {Max: to}}}); err != nil {
		t.Fatal(err)
	}
	var res []PutResult
	for i := range 3 {
		res = append(res, mustPut(t, s, msg("Q", 1, fmt.Sprint("new-", i)))...)
	}
	if res[0].QueueOffset != to {
		t.Fatalf("first record after the jump at %d, want %d", res[0].QueueOffset, to)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// Upload and drop every sealed segment (Q's records 0..4 among them):
	// reclaim takes the file of Q's entries below the jump.
	for _, sg := range s.SealedSegments() {
		blob, err := s.BuildSegmentIndex(sg.Base)
		if err != nil {
			t.Fatal(err)
		}
		if err := cold.upload(fs, sg); err != nil {
			t.Fatal(err)
		}
		idx.mu.Lock()
		idx.blobs[sg.Base] = blob
		idx.mu.Unlock()
		if err := s.DropSegment(sg.Base); err != nil {
			t.Fatalf("drop %d: %v", sg.Base, err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	q := s.queue("Q", 1)
	q.mu.RLock()
	first := int64(-1)
	if len(q.files) > 0 {
		first = q.files[0].start
	}
	ce := q.coldEnd.Load()
	q.mu.RUnlock()
	t.Logf("after reclaim: Q's first local file starts at %d, coldEnd %d", first, ce)
	if first != to {
		t.Skipf("precondition: reclaim did not take Q's files below the jump (first file %d)", first)
	}

	// Power loss: the consumequeue entries past the jump are on disk, the
	// log loses the records they point at.
	crashed := fs.CrashClone()
	mustClose(t, s)
	segs := crashedSegments(t, crashed, o)
	last := segs[len(segs)-1]
	if err := truncateFile(crashed, last.path, res[0].PhysOffset-last.base); err != nil {
		t.Fatal(err)
	}
	o2 := o
	o2.FS = crashed
	s = mustOpen(t, o2)
	defer mustClose(t, s)
	if got := s.MaxQueueOffset("Q", 1); got != to {
		t.Errorf("after losing the records past the jump Q ends at %d, want %d: the jump was lost with the reclaimed file before it", got, to)
	}
	if r := mustPut(t, s, msg("Q", 1, "again")); r[0].QueueOffset < to {
		t.Errorf("record after recovery at queue offset %d, below the jump %d: offsets handed out again", r[0].QueueOffset, to)
	}
}

// TestJumpSegmentIndexLosesAnEmptyJump: a segment sealed after a jump,
// holding no record of the jumped queue, carries the jump as the queue's
// next offset in its index directory (nextAt), as for a queue resumed cold;
// else a slave restored from the bucket at that segment's end starts the
// queue at the hole's start and takes the master's next record as tens of
// thousands of blank entries.
func TestJumpSegmentIndexLosesAnEmptyJump(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.CQEntriesPerFile = 1000
	s := mustOpen(t, o)
	defer mustClose(t, s)
	for i := range 5 {
		mustPut(t, s, msg("Held", 0, fmt.Sprint("old-", i)))
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	const to = 65_541
	if _, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Held": {0: {Max: to}}, "Unseen": {0: {Max: to}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mustPut(t, s, msg("Other", 0, fmt.Sprint("o-", i)))
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	segs := s.SealedSegments()
	blob, err := s.BuildSegmentIndex(segs[len(segs)-1].Base)
	if err != nil {
		t.Fatal(err)
	}
	x, err := DecodeSegmentIndex(blob)
	if err != nil {
		t.Fatal(err)
	}
	end := func(topic string) int64 {
		i, ok := x.Find(topic, 0)
		if !ok {
			return -1
		}
		return x.Queues[i].End()
	}
	if u := end("Unseen"); u != to {
		t.Fatalf("precondition: the cold-resumed queue ends at %d in the index, want %d", u, to)
	}
	if h := end("Held"); h != to {
		t.Errorf("the segment index sealed after the jump says Held/0 ends at %d, want %d (as it says for a queue resumed cold)", h, to)
	}
}
