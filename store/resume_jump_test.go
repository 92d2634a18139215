package store

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestResumeQueuesJumpIsAHoleNotBlanks: a queue with local entries resumed
// past them continues at the new Max with a hole between, which a reader is
// sent past in one request, and which costs no consumequeue bytes (a jump
// of a reservation's 65,536 offsets in every queue must not write 1.3 MB of
// blank entries per queue); a crash before any new record keeps the jump
// (its empty file is synced), and so does a crash after new records
// whose log tail is lost (recovery never trims a queue below its jump).
func TestResumeQueuesJumpIsAHoleNotBlanks(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.CQEntriesPerFile = 1000
	s := mustOpen(t, o)
	for i := range 5 {
		mustPut(t, s, msg("Q", 0, fmt.Sprint("old-", i)))
	}
	const to = 70_500 // past many file boundaries, not on one
	if n, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: to}}}); err != nil || n != 1 {
		t.Fatalf("ResumeQueues: %d, %v", n, err)
	}
	// Power loss right after the promotion: nothing written since.
	crashed := fs.CrashClone()
	mustClose(t, s)
	o2 := o
	o2.FS = crashed
	s = mustOpen(t, o2)
	if got := s.MaxQueueOffset("Q", 0); got != to {
		t.Fatalf("after a power loss right after the jump, Q ends at %d, want %d", got, to)
	}
	r, err := s.Get(ctx, GetRequest{Topic: "Q", QueueID: 0, Offset: 5, MaxMsgs: 32})
	if err != nil || r.NextBeginOffset != to || len(r.Records) != 0 {
		t.Fatalf("read in the hole: %v next=%d records=%d err=%v; want next=%d", r.Status, r.NextBeginOffset, len(r.Records), err, to)
	}
	for i := range 3 {
		if res := mustPut(t, s, msg("Q", 0, fmt.Sprint("new-", i))); res[0].QueueOffset != to+int64(i) {
			t.Fatalf("new record %d at queue offset %d, want %d", i, res[0].QueueOffset, to+int64(i))
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	got := readAcrossHoles(t, s, "Q", 0)
	if len(got) != 8 || string(got[4].Body) != "old-4" || string(got[5].Body) != "new-0" || got[5].QueueOffset != to {
		t.Fatalf("Q reads %d records (want 5 old, 3 new from %d)", len(got), to)
	}
	if bytes, files := queueFileBytes(t, crashed, o2.Dir); bytes != 8*cqEntrySize {
		t.Fatalf("Q's consumequeue is %d bytes in %d files, want %d: the hole was written as blank entries", bytes, files, 8*cqEntrySize)
	}

	// The log loses the new records (cut below them) while their entries
	// are on disk: recovery trims the entries, not the jump.
	end := got[5].PhysOffset
	mustClose(t, s)
	segs := crashedSegments(t, crashed, o2)
	last := segs[len(segs)-1]
	if err := truncateFile(crashed, last.path, end-last.base); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, o2)
	defer mustClose(t, s)
	if got := s.MaxQueueOffset("Q", 0); got != to {
		t.Fatalf("after losing the records past the jump, Q ends at %d, want %d (the jump must hold)", got, to)
	}
	if res := mustPut(t, s, msg("Q", 0, "again")); res[0].QueueOffset != to {
		t.Fatalf("record after recovery at %d, want %d", res[0].QueueOffset, to)
	}
}

type segFile struct {
	base int64
	path string
}

// crashedSegments lists the commitlog segment files of a store dir on fs.
func crashedSegments(t *testing.T, fs vfs.FS, o Options) []segFile {
	t.Helper()
	dir := filepath.Join(o.Dir, "commitlog")
	names, err := fs.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []segFile
	for _, n := range names {
		if b, ok := parseSegmentName(n); ok {
			out = append(out, segFile{b, filepath.Join(dir, n)})
		}
	}
	if len(out) == 0 {
		t.Fatal("no segment")
	}
	return out
}

// TestFollowerTakesAJumpAsAHole: a slave fed a promoted master's records
// (AppendRaw) takes the master's jump in a queue as a hole too: its
// entries match the master's offsets, its consumequeue holds no blank
// entries for the hole, and both survive its restart.
func TestFollowerTakesAJumpAsAHole(t *testing.T) {
	fsX, fsY := vfs.NewMem(), vfs.NewMem()
	ox, oy := testOpts(fsX), testOpts(fsY)
	ox.CQEntriesPerFile, oy.CQEntriesPerFile = 1000, 1000
	x := mustOpen(t, ox)
	defer mustClose(t, x)
	y := mustOpen(t, oy)
	for i := range 4 {
		mustPut(t, x, msg("Q", 2, fmt.Sprint("a-", i)))
	}
	stream := func(from, to int64) { t.Helper(); streamLog(t, x, fsX, y, from, to) }
	stream(0, x.MaxPhysOffset())
	if err := y.Flush(); err != nil { // Y's pending entries written: the jump is a hole
		t.Fatal(err)
	}
	const to = 65_540
	if _, err := x.ResumeQueues(map[string]map[int32]QueueRange{"Q": {2: {Max: to}}}); err != nil {
		t.Fatal(err)
	}
	from := x.MaxPhysOffset()
	for i := range 3 {
		mustPut(t, x, msg("Q", 2, fmt.Sprint("b-", i)))
	}
	stream(from, x.MaxPhysOffset())
	if err := y.Flush(); err != nil {
		t.Fatal(err)
	}
	check := func(y *Store) {
		t.Helper()
		if got := y.MaxQueueOffset("Q", 2); got != to+3 {
			t.Fatalf("Y's Q/2 ends at %d, want %d", got, to+3)
		}
		recs := readAcrossHoles(t, y, "Q", 2)
		if len(recs) != 7 || recs[4].QueueOffset != to || string(recs[4].Body) != "b-0" {
			t.Fatalf("Y reads %d records of Q/2; want 4 then 3 from %d", len(recs), to)
		}
		if bytes, files := queueFileBytes(t, fsY, oy.Dir); bytes != 7*cqEntrySize {
			t.Fatalf("Y's consumequeue of Q/2 is %d bytes in %d files, want %d (no blanks for the hole)", bytes, files, 7*cqEntrySize)
		}
	}
	check(y)
	mustClose(t, y)
	y = mustOpen(t, oy)
	defer mustClose(t, y)
	check(y)
}

// TestQueueFileNamesAfterAJump: the first file after a jump is named by
// the jump's offset; files after it are aligned again.
func TestQueueFileNamesAfterAJump(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.CQEntriesPerFile = 10
	s := mustOpen(t, o)
	defer mustClose(t, s)
	for i := range 3 {
		mustPut(t, s, msg("Q", 0, fmt.Sprint(i)))
	}
	if _, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: 37}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		mustPut(t, s, msg("Q", 0, fmt.Sprint("n", i)))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(o.Dir, "consumequeue", "Q", "0")
	names, err := fs.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{segmentName(0), segmentName(37 * cqEntrySize), segmentName(40 * cqEntrySize)}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("files %v, want %v", names, want)
	}
	for i, n := range names {
		fi, err := fs.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if wantSize := []int64{3, 3, 2}[i] * cqEntrySize; fi.Size() != wantSize {
			t.Fatalf("%s is %d bytes, want %d", n, fi.Size(), wantSize)
		}
	}
}

// readAcrossHoles is readQueue that follows a hole (OffsetFoundNull with a
// NextBeginOffset past the offset asked for) to the records after it.
func readAcrossHoles(t *testing.T, s *Store, topic string, qid int32) []Record {
	t.Helper()
	var out []Record
	off := s.MinQueueOffset(topic, qid)
	for range 1000 {
		r, err := s.Get(context.Background(), GetRequest{Topic: topic, QueueID: qid, Offset: off, MaxMsgs: 32})
		if err != nil {
			t.Fatalf("get %s/%d@%d: %v", topic, qid, off, err)
		}
		switch {
		case r.Status == Found:
			for _, b := range r.Records {
				rec, _, err := DecodeRecord(b)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, rec)
			}
		case r.Status == OffsetFoundNull && r.NextBeginOffset > off:
		case r.Status == OffsetOverflowOne || r.Status == NoMessageInQueue:
			return out
		default:
			t.Fatalf("get %s/%d@%d: status %v next %d", topic, qid, off, r.Status, r.NextBeginOffset)
		}
		off = r.NextBeginOffset
	}
	t.Fatal("readAcrossHoles did not finish")
	return nil
}

// TestLogCutBelowAJumpDropsIt: a copy that jumped a queue and then cuts its
// log below records of that queue (it follows a newer master that never had
// them: CutLog) takes the numbering from the records it keeps, as it would
// have without the jump; a cut that keeps every entry below the jump keeps
// the jump.
func TestLogCutBelowAJumpDropsIt(t *testing.T) {
	for _, c := range []struct {
		name   string
		cutAt  int // index of the first record cut off
		wantQ  int64
		jumpTo int64
	}{
		{"below", 3, 3, 500},
		{"above", 5, 500, 500},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := vfs.NewMem()
			o := testOpts(fs)
			o.CQEntriesPerFile = 100
			s := mustOpen(t, o)
			var res []PutResult
			for i := range 5 {
				res = append(res, mustPut(t, s, msg("Q", 0, fmt.Sprint("r", i)))...)
			}
			if _, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: c.jumpTo}}}); err != nil {
				t.Fatal(err)
			}
			// One record past the jump, then the log is cut.
			res = append(res, mustPut(t, s, msg("Q", 0, "past"))...)
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			mustClose(t, s)
			if _, err := CutLog(fs, o.Dir, res[c.cutAt].PhysOffset, filepath.Join(o.Dir, "cut")); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, o)
			if got := s.MaxQueueOffset("Q", 0); got != c.wantQ {
				t.Fatalf("after the cut Q ends at %d, want %d", got, c.wantQ)
			}
			if r := mustPut(t, s, msg("Q", 0, "next")); r[0].QueueOffset != c.wantQ {
				t.Fatalf("next record at %d, want %d", r[0].QueueOffset, c.wantQ)
			}
			mustClose(t, s)
			s = mustOpen(t, o)
			defer mustClose(t, s)
			if got := s.MaxQueueOffset("Q", 0); got != c.wantQ+1 {
				t.Fatalf("after a reopen Q ends at %d, want %d", got, c.wantQ+1)
			}
		})
	}
}

// TestJumpDroppedWhenTheMasterNumbersLower: a copy that jumped a queue and
// then follows a master whose records number it lower (a master that never
// jumped) takes the master's numbering, and keeps it across a restart (the
// dropped jump is not re-applied from <Dir>/restored).
func TestJumpDroppedWhenTheMasterNumbersLower(t *testing.T) {
	fsX, fsY := vfs.NewMem(), vfs.NewMem()
	ox, oy := testOpts(fsX), testOpts(fsY)
	x := mustOpen(t, ox)
	defer mustClose(t, x)
	y := mustOpen(t, oy)
	for i := range 5 {
		mustPut(t, x, msg("Q", 0, fmt.Sprint("a-", i)))
	}
	stream := func(from, to int64) { t.Helper(); streamLog(t, x, fsX, y, from, to) }
	stream(0, x.MaxPhysOffset())
	if _, err := y.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: 100}}}); err != nil {
		t.Fatal(err)
	}
	if got := y.MaxQueueOffset("Q", 0); got != 100 {
		t.Fatalf("Y's jump: Q ends at %d, want 100", got)
	}
	from := x.MaxPhysOffset()
	mustPut(t, x, msg("Q", 0, "b-0"))
	stream(from, x.MaxPhysOffset())
	check := func(y *Store) {
		t.Helper()
		if got := y.MaxQueueOffset("Q", 0); got != 6 {
			t.Fatalf("Y's Q ends at %d, want 6 (the master's numbering)", got)
		}
		recs := readAcrossHoles(t, y, "Q", 0)
		if len(recs) != 6 || string(recs[5].Body) != "b-0" || recs[5].QueueOffset != 5 {
			t.Fatalf("Y reads %d records of Q", len(recs))
		}
	}
	check(y)
	if err := y.Flush(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, y)
	y = mustOpen(t, oy)
	defer mustClose(t, y)
	check(y)
}

// TestRestoreStateJumps: the restore state carries jumps (format 3), and is
// written in format 2, which older binaries read, while no queue has one.
func TestRestoreStateJumps(t *testing.T) {
	r := &restoreState{logStart: 7, floor: 3,
		queues: []restoredQueue{{topic: "A", id: 1, min: 2, coldEnd: 9}},
		tombs:  []tombstone{{topic: "D", id: 0, next: 4}}}
	b := r.encode()
	if string(b[:8]) != restoreMagic {
		t.Fatalf("without jumps: magic %q, want %q", b[:8], restoreMagic)
	}
	r.jumps = []queueJump{{topic: "Q", id: 2, at: 4096, next: 65_541}}
	b = r.encode()
	if string(b[:8]) != restoreMagicV3 {
		t.Fatalf("with a jump: magic %q, want %q", b[:8], restoreMagicV3)
	}
	got, err := parseRestoreState(b)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(r) {
		t.Fatalf("round trip: %+v, want %+v", got, r)
	}
	for i := 8; i < len(b); i++ {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		if _, err := parseRestoreState(c); err == nil {
			t.Fatalf("a flipped byte at %d parsed", i)
		}
	}
	if _, err := parseRestoreState(b[:len(b)-5]); err == nil {
		t.Fatal("a cut restore state parsed")
	}
}

// TestFollowerWithAColdQueueTakesAJumpAsAHole: a slave whose queue holds
// no local file (restored at the master's last uploaded segment, its
// entries all cold: the index of the segment holding the master's jump can
// name the hole's start as the queue's end) takes the master's next
// record, numbered past the jump, as a hole after the cold range: one
// entry on disk, not tens of thousands of blank ones.
func TestFollowerWithAColdQueueTakesAJumpAsAHole(t *testing.T) {
	fsX, fsY := vfs.NewMem(), vfs.NewMem()
	ox, oy := testOpts(fsX), testOpts(fsY)
	x := mustOpen(t, ox)
	defer mustClose(t, x)
	y := mustOpen(t, oy)
	defer mustClose(t, y)
	const to = 65_541
	if _, err := x.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: to}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := y.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: 5}}}); err != nil {
		t.Fatal(err)
	}
	if r := mustPut(t, x, msg("Q", 0, "past the jump")); r[0].QueueOffset != to {
		t.Fatalf("X's record at %d, want %d", r[0].QueueOffset, to)
	}
	streamLog(t, x, fsX, y, 0, x.MaxPhysOffset())
	if err := y.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := y.MaxQueueOffset("Q", 0); got != to+1 {
		t.Fatalf("Y's Q ends at %d, want %d", got, to+1)
	}
	if bytes, files := queueFileBytes(t, fsY, oy.Dir); bytes != cqEntrySize {
		t.Fatalf("Y's consumequeue is %d bytes in %d files, want one entry: the hole was written as blank entries", bytes, files)
	}
	r, err := y.Get(context.Background(), GetRequest{Topic: "Q", QueueID: 0, Offset: 5, MaxMsgs: 1})
	if err != nil || r.NextBeginOffset != to {
		t.Fatalf("a read in the hole: %v next %d (%v), want next %d", r.Status, r.NextBeginOffset, err, to)
	}
}
