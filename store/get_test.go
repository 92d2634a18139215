package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

func TestStoreGetStatuses(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	for i := range 5 {
		mustPut(t, s, msg("T", 1, fmt.Sprint(i)))
	}
	mustPut(t, s, msg("Empty", 0, "x")) // other queue of another topic
	get := func(topic string, qid int32, off int64) GetResult {
		t.Helper()
		r, err := s.Get(context.Background(), GetRequest{Topic: topic, QueueID: qid, Offset: off})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cases := []struct {
		name   string
		topic  string
		qid    int32
		off    int64
		status GetStatus
		next   int64
		n      int
	}{
		{"found from 0", "T", 1, 0, Found, 5, 5},
		{"found from 3", "T", 1, 3, Found, 5, 2},
		{"unknown queue", "T", 0, 0, NoMessageInQueue, 0, 0},
		{"unknown queue, offset 7", "T", 0, 7, NoMessageInQueue, 0, 0},
		{"unknown topic", "nope", 0, 3, NoMessageInQueue, 0, 0},
		{"overflow one", "T", 1, 5, OffsetOverflowOne, 5, 0},
		{"overflow badly", "T", 1, 9, OffsetOverflowBadly, 5, 0},
		{"too small", "T", 1, -1, OffsetTooSmall, 0, 0},
	}
	for _, c := range cases {
		r := get(c.topic, c.qid, c.off)
		if r.Status != c.status || r.NextBeginOffset != c.next || len(r.Records) != c.n {
			t.Errorf("%s: got %v next=%d n=%d; want %v next=%d n=%d", c.name, r.Status, r.NextBeginOffset, len(r.Records), c.status, c.next, c.n)
		}
	}
	if r := get("T", 1, 0); r.MinOffset != 0 || r.MaxOffset != 5 {
		t.Fatalf("min/max %d/%d", r.MinOffset, r.MaxOffset)
	}
}

func TestStoreGetFilterAndLimits(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	var sizes []int32
	for i := range 100 {
		m := msg("F", 0, fmt.Sprintf("%03d", i))
		m.TagsCode = int64(i % 10)
		sizes = append(sizes, mustPut(t, s, m)[0].Size)
	}
	ctx := context.Background()
	// Filter: only tags code 3 → offsets 3, 13, ... ; skipped entries advance.
	r, err := s.Get(ctx, GetRequest{Topic: "F", Offset: 0, MaxMsgs: 4, Filter: func(c int64) bool { return c == 3 }})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != Found || len(r.Records) != 4 || r.NextBeginOffset != 34 {
		t.Fatalf("filter: %v n=%d next=%d", r.Status, len(r.Records), r.NextBeginOffset)
	}
	for i, b := range r.Records {
		rec, _, _ := DecodeRecord(b)
		if rec.QueueOffset != int64(3+10*i) {
			t.Fatalf("filtered record %d has offset %d", i, rec.QueueOffset)
		}
	}
	// Nothing matches: NoMatchedMessage, next = offset + scanned.
	r, _ = s.Get(ctx, GetRequest{Topic: "F", Offset: 50, Filter: func(int64) bool { return false }})
	if r.Status != NoMatchedMessage || r.NextBeginOffset != 100 || len(r.Records) != 0 {
		t.Fatalf("no match: %v next=%d", r.Status, r.NextBeginOffset)
	}
	// MaxMsgs.
	r, _ = s.Get(ctx, GetRequest{Topic: "F", Offset: 10, MaxMsgs: 7})
	if len(r.Records) != 7 || r.NextBeginOffset != 17 {
		t.Fatalf("maxMsgs: n=%d next=%d", len(r.Records), r.NextBeginOffset)
	}
	// MaxBytes: 2.5 records' worth → 2 records.
	r, _ = s.Get(ctx, GetRequest{Topic: "F", Offset: 20, MaxMsgs: 32, MaxBytes: int(sizes[0]) * 5 / 2})
	if len(r.Records) != 2 || r.NextBeginOffset != 22 || r.Bytes != int(sizes[20]+sizes[21]) {
		t.Fatalf("maxBytes: n=%d next=%d bytes=%d", len(r.Records), r.NextBeginOffset, r.Bytes)
	}
	// MaxBytes smaller than one record still returns one.
	r, _ = s.Get(ctx, GetRequest{Topic: "F", Offset: 20, MaxBytes: 1})
	if len(r.Records) != 1 || r.NextBeginOffset != 21 {
		t.Fatalf("tiny maxBytes: n=%d next=%d", len(r.Records), r.NextBeginOffset)
	}
	// Contiguous records come back byte-identical to ReadRecord.
	for _, b := range r.Records {
		rec, _, _ := DecodeRecord(b)
		raw, err := s.ReadRecord(rec.PhysOffset)
		if err != nil || string(raw) != string(b) {
			t.Fatalf("record differs from ReadRecord: %v", err)
		}
	}
}

func TestStoreOffsetFoundNullAndBlanks(t *testing.T) {
	o := testOpts(vfs.NewMem())
	o.CQEntriesPerFile = 4
	s := mustOpen(t, o)
	// A queue whose first record has queue offset 6 (replicated from a master
	// whose queue started earlier): entries 4,5 are blank, min is 6.
	b := encodeTestRecord(Message{Topic: "B", QueueID: 0, Body: []byte("x")}, 6, 0, 1000)
	if err := s.AppendRaw(0, b); err != nil {
		t.Fatal(err)
	}
	if mn, mx := s.MinQueueOffset("B", 0), s.MaxQueueOffset("B", 0); mn != 6 || mx != 7 {
		t.Fatalf("min/max = %d/%d", mn, mx)
	}
	r, _ := s.Get(context.Background(), GetRequest{Topic: "B", Offset: 2})
	if r.Status != OffsetTooSmall || r.NextBeginOffset != 6 {
		t.Fatalf("got %v next %d", r.Status, r.NextBeginOffset)
	}
	mustClose(t, s)
	s = mustOpen(t, o)
	defer mustClose(t, s)
	if mn, mx := s.MinQueueOffset("B", 0), s.MaxQueueOffset("B", 0); mn != 6 || mx != 7 {
		t.Fatalf("after reopen min/max = %d/%d", mn, mx)
	}
	recs := readQueue(t, s, "B", 0)
	if len(recs) != 1 || recs[0].QueueOffset != 6 {
		t.Fatalf("records %+v", recs)
	}
}

func TestStoreOffsetFoundNull(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.CQEntriesPerFile = 4
	s := mustOpen(t, o)
	for i := range 12 {
		mustPut(t, s, msg("H", 0, fmt.Sprint(i)))
	}
	mustClose(t, s)
	// Lose the middle consumequeue file (entries 4..7).
	if err := fs.Remove("/data/store/consumequeue/H/0/00000000000000000080"); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, o)
	defer mustClose(t, s)
	r, err := s.Get(context.Background(), GetRequest{Topic: "H", Offset: 5})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != OffsetFoundNull || r.NextBeginOffset != 8 {
		t.Fatalf("hole: %v next %d", r.Status, r.NextBeginOffset)
	}
	// Reading up to the hole stops before it.
	r, _ = s.Get(context.Background(), GetRequest{Topic: "H", Offset: 2})
	if r.Status != Found || len(r.Records) != 2 || r.NextBeginOffset != 4 {
		t.Fatalf("before hole: %v n=%d next %d", r.Status, len(r.Records), r.NextBeginOffset)
	}
}

// encodeTestRecord builds one V1 record with the given broker fields.
func encodeTestRecord(m Message, qoff, phys, storeTS int64) []byte {
	size, sys := encodedSize(&m, false)
	return appendRecord(nil, &m, size, sys, qoff, phys, storeTS, testStoreHost)
}

func TestStoreOffsetByTime(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	times := []int64{100, 200, 200, 200, 300, 400, 1000}
	var raw []byte
	for i, ts := range times {
		raw = append(raw, encodeTestRecord(Message{Topic: "TS", QueueID: 2, Body: []byte{byte(i)}}, int64(i), int64(len(raw)), ts)...)
	}
	if err := s.AppendRaw(0, raw); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ ts, want int64 }{
		{50, 0},      // before the first: nearest is the first
		{100, 0},     // exact
		{149, 0},     // nearer to 100
		{150, 0},     // tie → earlier
		{151, 1},     // nearer to 200 → first 200
		{200, 1},     // exact, first of equal times
		{250, 3},     // tie between last 200 (3) and 300 (4) → earlier
		{260, 4},     // nearer 300
		{999, 6},     // nearer 1000
		{5000, 6},    // after the last: nearest is the last
		{1000, 6},    // exact last
		{700, 5},     // tie 400/1000 → earlier
		{701, 6},     // nearer 1000
		{-10, 0},     // negative
		{400, 5},     // exact
		{399, 5},     // nearer 400
		{301, 4},     // nearer 300
		{350, 4},     // tie → earlier
		{351, 5},     // nearer 400
		{201, 3},     // nearer the last 200
		{1 << 50, 6}, // far future
	}
	for _, c := range cases {
		if got := s.OffsetByTime("TS", 2, c.ts); got != c.want {
			t.Errorf("OffsetByTime(%d) = %d, want %d", c.ts, got, c.want)
		}
	}
	if got := s.OffsetByTime("TS", 3, 100); got != 0 {
		t.Errorf("empty queue: %d", got)
	}
	if ts, err := s.EarliestStoreTime("TS", 2); err != nil || ts != 100 {
		t.Fatalf("earliest = %d, %v", ts, err)
	}
	if _, err := s.EarliestStoreTime("TS", 3); !errors.Is(err, ErrNotFound) {
		t.Fatalf("earliest of empty queue: %v", err)
	}
}

func TestStoreReopenContinuesOffsets(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	s := mustOpen(t, o)
	for i := range 10 {
		mustPut(t, s, msg("R", int32(i%2), fmt.Sprint(i)))
	}
	end := s.MaxPhysOffset()
	mustClose(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := s.Put(context.Background(), []Message{msg("R", 0, "late")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	s = mustOpen(t, o)
	defer mustClose(t, s)
	if s.MaxPhysOffset() != end || s.MaxQueueOffset("R", 0) != 5 || s.MaxQueueOffset("R", 1) != 5 {
		t.Fatalf("after reopen: phys %d q0 %d q1 %d", s.MaxPhysOffset(), s.MaxQueueOffset("R", 0), s.MaxQueueOffset("R", 1))
	}
	res := mustPut(t, s, msg("R", 0, "next"))
	if res[0].QueueOffset != 5 || res[0].PhysOffset != end {
		t.Fatalf("next put: %+v", res[0])
	}
	recs := readQueue(t, s, "R", 0)
	if len(recs) != 6 || string(recs[5].Body) != "next" {
		t.Fatalf("records: %d", len(recs))
	}
}

func TestStoreDeleteTopic(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	s := mustOpen(t, o)
	mustPut(t, s, msg("D", 0, "1"), msg("D", 1, "2"), msg("K", 0, "3"))
	if err := s.DeleteTopic("D"); err != nil {
		t.Fatal(err)
	}
	if s.MaxQueueOffset("D", 0) != 0 {
		t.Fatal("queue survived delete")
	}
	if _, err := fs.Stat("/data/store/consumequeue/D"); err == nil {
		t.Fatal("consumequeue dir survived delete")
	}
	mustClose(t, s)
	s = mustOpen(t, o)
	defer mustClose(t, s)
	if s.MaxQueueOffset("D", 0) != 0 || s.MaxQueueOffset("K", 0) != 1 {
		t.Fatalf("after reopen D=%d K=%d", s.MaxQueueOffset("D", 0), s.MaxQueueOffset("K", 0))
	}
}

func TestStoreAppendRawReplicates(t *testing.T) {
	src := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, src)
	for i := range 40 {
		m := msg(fmt.Sprintf("A%d", i%3), int32(i%2), fmt.Sprintf("m%d", i))
		m.Properties = fmt.Sprintf("TAGS\x01t%d\x02", i%4)
		m.TagsCode = TagsHash(fmt.Sprintf("t%d", i%4))
		mustPut(t, src, m)
	}
	// Ship the log in record-aligned chunks.
	o := testOpts(vfs.NewMem())
	o.SegmentSize = 1 << 13
	dst := mustOpen(t, o)
	defer mustClose(t, dst)
	var dispatched int
	dst.opts.OnDispatch = func(string, int32, int64, int64) { dispatched++ }
	pos := int64(0)
	for pos < src.MaxPhysOffset() {
		var chunk []byte
		for len(chunk) < 700 && pos+int64(len(chunk)) < src.MaxPhysOffset() {
			rec, err := src.ReadRecord(pos + int64(len(chunk)))
			if err != nil {
				t.Fatal(err)
			}
			chunk = append(chunk, rec...)
		}
		if err := dst.AppendRaw(pos, chunk); err != nil {
			t.Fatal(err)
		}
		pos += int64(len(chunk))
	}
	if dispatched != 40 {
		t.Fatalf("OnDispatch called %d times", dispatched)
	}
	if err := dst.AppendRaw(pos+1, nil); err != nil {
		t.Fatal(err)
	}
	rec, _ := src.ReadRecord(0)
	if err := dst.AppendRaw(pos+5, rec); !errors.Is(err, ErrOffsetMismatch) && !errors.Is(err, ErrCorrupt) {
		t.Fatalf("misplaced AppendRaw: %v", err)
	}
	for ti := range 3 {
		for q := range int32(2) {
			topic := fmt.Sprintf("A%d", ti)
			a, b := readQueue(t, src, topic, q), readQueue(t, dst, topic, q)
			if len(a) != len(b) {
				t.Fatalf("%s/%d: %d vs %d records", topic, q, len(a), len(b))
			}
			for i := range a {
				if a[i].PhysOffset != b[i].PhysOffset || string(a[i].Body) != string(b[i].Body) {
					t.Fatalf("%s/%d record %d differs", topic, q, i)
				}
			}
			// Tag filter works on the replica: tags codes were recomputed.
			r, _ := dst.Get(context.Background(), GetRequest{Topic: topic, QueueID: q, Filter: func(c int64) bool { return c == TagsHash("t1") }})
			for _, raw := range r.Records {
				rec, _, _ := DecodeRecord(raw)
				if rec.Properties != "TAGS\x01t1\x02" {
					t.Fatalf("filter let through %q", rec.Properties)
				}
			}
		}
	}
}

// GetRequest.MaxPhys hides the records that end past it: the queue ends,
// for that Get, at the first hidden record — Found up to it, then
// OffsetOverflowOne there — and MaxOffset (and VisibleMaxQueueOffset) says
// so whether or not the scan reached it; an offset past the end is moved
// back to it, not to the queue's end.
func TestStoreGetMaxPhys(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	ctx := context.Background()
	const n = 20
	var ends []int64
	for i := range n {
		r := mustPut(t, s, msg("V", 0, fmt.Sprint(i)))[0]
		ends = append(ends, r.PhysOffset+int64(r.Size))
		mustPut(t, s, msg("Other", 0, "between")) // V's records are not adjacent in the log
	}
	get := func(req GetRequest) GetResult {
		t.Helper()
		req.Topic = "V"
		r, err := s.Get(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for k := range n { // records 0..k-1 visible
		bound := ends[k] - 1
		if k > 0 {
			bound = ends[k-1]
		}
		want := int64(k)
		if r := get(GetRequest{MaxPhys: bound}); k > 0 && (r.Status != Found || len(r.Records) != k || r.NextBeginOffset != want || r.MaxOffset != want || r.HeldBack != ends[k]) {
			t.Fatalf("bound after record %d, from 0: %v n=%d next=%d max=%d heldBack=%d", k, r.Status, len(r.Records), r.NextBeginOffset, r.MaxOffset, r.HeldBack)
		}
		if r := get(GetRequest{Offset: want, MaxPhys: bound}); r.Status != OffsetOverflowOne || len(r.Records) != 0 || r.NextBeginOffset != want || r.MaxOffset != want || r.HeldBack != ends[k] {
			t.Fatalf("bound after record %d, from %d: %v n=%d next=%d max=%d", k, want, r.Status, len(r.Records), r.NextBeginOffset, r.MaxOffset)
		}
		if r := get(GetRequest{MaxMsgs: 1, MaxPhys: bound}); k > 1 && (r.Status != Found || r.NextBeginOffset != 1 || r.MaxOffset != want || r.HeldBack != 0) {
			t.Fatalf("bound after record %d, one message from 0: %v next=%d max=%d, want max %d", k, r.Status, r.NextBeginOffset, r.MaxOffset, want)
		}
		if r := get(GetRequest{MaxPhys: bound, Filter: func(int64) bool { return false }}); r.Status != OffsetOverflowOne || r.NextBeginOffset != want {
			t.Fatalf("bound after record %d, nothing matches: %v next=%d, want OFFSET_OVERFLOW_ONE at %d", k, r.Status, r.NextBeginOffset, want)
		}
		if r := get(GetRequest{Offset: n + 5, MaxPhys: bound}); r.Status != OffsetOverflowBadly || r.NextBeginOffset != want {
			t.Fatalf("bound after record %d, offset past the end: %v next=%d, want %d", k, r.Status, r.NextBeginOffset, want)
		}
		all := func([]byte) bool { return true } // a record-level filter (SQL92) runs the bounded Get in rounds
		if r := get(GetRequest{MaxPhys: bound, Match: all}); k > 0 && (r.Status != Found || len(r.Records) != k || r.NextBeginOffset != want || r.MaxOffset != want) {
			t.Fatalf("bound after record %d, from 0 with Match: %v n=%d next=%d max=%d", k, r.Status, len(r.Records), r.NextBeginOffset, r.MaxOffset)
		}
		if r := get(GetRequest{Offset: want, MaxPhys: bound, Match: all}); r.Status != OffsetOverflowOne || r.NextBeginOffset != want || r.HeldBack != ends[k] {
			t.Fatalf("bound after record %d, from %d with Match: %v next=%d heldBack=%d", k, want, r.Status, r.NextBeginOffset, r.HeldBack)
		}
		if got, err := s.VisibleMaxQueueOffset(ctx, "V", 0, bound); err != nil || got != want {
			t.Fatalf("VisibleMaxQueueOffset bound after record %d: %d %v, want %d", k, got, err, want)
		}
	}
	if r := get(GetRequest{MaxPhys: ends[n-1]}); r.Status != Found || len(r.Records) != n || r.MaxOffset != n || r.HeldBack != 0 {
		t.Fatalf("bound at the end: %v n=%d max=%d heldBack=%d", r.Status, len(r.Records), r.MaxOffset, r.HeldBack)
	}
	if got, err := s.VisibleMaxQueueOffset(ctx, "V", 0, 0); err != nil || got != n {
		t.Fatalf("VisibleMaxQueueOffset without a bound: %d %v, want %d", got, err, n)
	}
}

// MaxPhys below the local log of a restored store: the cold Get (entries
// from the cold index) and VisibleMaxQueueOffset stop at the bound as a
// local Get does.
func TestStoreGetMaxPhysCold(t *testing.T) {
	f := newRestoreFixture(t, 200)
	b := mustOpen(t, f.opts(vfs.NewMem()))
	defer mustClose(t, b)
	ctx := context.Background()
	q := restoreQueues[0]
	all, err := f.a.Get(ctx, GetRequest{Topic: q.topic, QueueID: q.id, MaxMsgs: MaxGetMsgs, MaxBytes: 64 << 20})
	if err != nil || all.Status != Found || len(all.Records) < 8 {
		t.Fatalf("the original store's queue %v: %v %d records, %v", q, all.Status, len(all.Records), err)
	}
	var ends []int64
	for _, r := range all.Records {
		rec, _, err := DecodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, rec.PhysOffset+int64(rec.Size))
	}
	for _, k := range []int{1, 3, len(ends) / 2, len(ends) - 1} { // records 0..k-1 visible
		bound, want := ends[k-1], int64(k)
		r, err := b.Get(ctx, GetRequest{Topic: q.topic, QueueID: q.id, MaxMsgs: MaxGetMsgs, MaxBytes: 64 << 20, MaxPhys: bound})
		if err != nil || r.Status != Found || len(r.Records) != k || r.NextBeginOffset != want || r.MaxOffset != want || r.HeldBack != ends[k] {
			t.Fatalf("cold, bound after record %d: %v n=%d next=%d max=%d heldBack=%d %v", k, r.Status, len(r.Records), r.NextBeginOffset, r.MaxOffset, r.HeldBack, err)
		}
		r, err = b.Get(ctx, GetRequest{Topic: q.topic, QueueID: q.id, Offset: want, MaxPhys: bound})
		if err != nil || r.Status != OffsetOverflowOne || r.NextBeginOffset != want || r.HeldBack != ends[k] {
			t.Fatalf("cold, bound after record %d, from %d: %v next=%d heldBack=%d %v", k, want, r.Status, r.NextBeginOffset, r.HeldBack, err)
		}
		if got, err := b.VisibleMaxQueueOffset(ctx, q.topic, q.id, bound); err != nil || got != want {
			t.Fatalf("cold VisibleMaxQueueOffset, bound after record %d: %d %v, want %d", k, got, err, want)
		}
	}
}
