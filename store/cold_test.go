package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// fakeCold is a ColdReader over copies of segment files taken before they
// were dropped.
type fakeCold struct {
	mu    sync.Mutex
	objs  map[int64][]byte
	reads atomic.Int64
	bases []int64 // sorted keys of objs, rebuilt when it grows
}

var errNotTiered = errors.New("fake cold: offset not tiered")

func newFakeCold() *fakeCold { return &fakeCold{objs: map[int64][]byte{}} }

func (c *fakeCold) ReadAt(ctx context.Context, off int64, p []byte) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c.reads.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bases) != len(c.objs) { // objs only grow
		c.bases = c.bases[:0]
		for b := range c.objs {
			c.bases = append(c.bases, b)
		}
		slices.Sort(c.bases)
	}
	bases := c.bases
	if len(bases) == 0 {
		return 0, io.EOF
	}
	last := bases[len(bases)-1]
	end := last + int64(len(c.objs[last]))
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		i := sort.Search(len(bases), func(i int) bool { return bases[i] > pos }) - 1
		if i < 0 || pos >= bases[i]+int64(len(c.objs[bases[i]])) {
			if pos >= end {
				return n, io.EOF
			}
			return n, fmt.Errorf("%w: %d", errNotTiered, pos)
		}
		n += copy(p[n:], c.objs[bases[i]][pos-bases[i]:])
	}
	return n, nil
}

// upload copies the file of segment sg into c, as the uploader does before
// the segment is dropped.
func (c *fakeCold) upload(fs vfs.FS, sg SegmentInfo) error {
	f, err := fs.OpenFile(sg.Path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("open for upload: %w", err)
	}
	b := make([]byte, sg.Length)
	err = readFull(f, b, 0)
	f.Close()
	if err != nil {
		return fmt.Errorf("read for upload: %w", err)
	}
	c.mu.Lock()
	c.objs[sg.Base] = b
	c.mu.Unlock()
	return nil
}

// erringCold fails every read; garbage makes it return junk bytes instead.
type erringCold struct {
	err     error
	garbage bool
	short   bool // n < len(p) with a nil error, then nothing
}

var errColdDown = errors.New("fake cold: bucket unavailable")

func (c *erringCold) ReadAt(ctx context.Context, off int64, p []byte) (int, error) {
	switch {
	case c.garbage:
		for i := range p {
			p[i] = byte(off) + byte(i)
		}
		return len(p), nil
	case c.short:
		return 0, nil
	}
	return 0, c.err
}

// copyAndDrop copies the oldest sealed segment into cold and drops it.
func copyAndDrop(t *testing.T, s *Store, fs vfs.FS, cold *fakeCold, sg SegmentInfo) {
	t.Helper()
	if err := cold.upload(fs, sg); err != nil {
		t.Fatal(err)
	}
	if err := s.DropSegment(sg.Base); err != nil {
		t.Fatalf("drop %d: %v", sg.Base, err)
	}
	if _, err := fs.Stat(sg.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dropped segment file still there: %v", err)
	}
}

// snapshot is everything the read API answers about some queues.
type snapshot struct {
	gets     map[string]GetResult
	recs     map[int64][]byte
	earliest map[string]int64
	byTime   map[string]int64
}

type qref struct {
	topic string
	id    int32
}

func takeSnapshot(t *testing.T, s *Store, queues []qref, puts []PutResult) snapshot {
	t.Helper()
	ctx := context.Background()
	sn := snapshot{gets: map[string]GetResult{}, recs: map[int64][]byte{}, earliest: map[string]int64{}, byTime: map[string]int64{}}
	for _, q := range queues {
		mx := s.MaxQueueOffset(q.topic, q.id)
		for _, maxMsgs := range []int{1, 3, 32} {
			for off := int64(0); off <= mx; off++ {
				r, err := s.Get(ctx, GetRequest{Topic: q.topic, QueueID: q.id, Offset: off, MaxMsgs: maxMsgs, MaxBytes: 6000})
				if err != nil {
					t.Fatalf("get %v@%d: %v", q, off, err)
				}
				sn.gets[fmt.Sprintf("%s/%d@%d/%d", q.topic, q.id, off, maxMsgs)] = r
			}
		}
		e, err := s.EarliestStoreTime(q.topic, q.id)
		if err != nil {
			t.Fatal(err)
		}
		sn.earliest[fmt.Sprintf("%s/%d", q.topic, q.id)] = e
	}
	for _, p := range puts {
		raw, err := s.ReadRecord(p.PhysOffset)
		if err != nil {
			t.Fatalf("ReadRecord(%d): %v", p.PhysOffset, err)
		}
		sn.recs[p.PhysOffset] = raw
		for _, q := range queues {
			for _, d := range []int64{-1, 0, 1} {
				ts := p.StoreTimestamp + d
				off, err := s.OffsetByTimeContext(ctx, q.topic, q.id, ts)
				if err != nil {
					t.Fatal(err)
				}
				sn.byTime[fmt.Sprintf("%s/%d@%d", q.topic, q.id, ts)] = off
			}
		}
	}
	return sn
}

func compareSnapshots(t *testing.T, want, got snapshot) {
	t.Helper()
	for k, w := range want.gets {
		g := got.gets[k]
		if w.Status != g.Status || w.NextBeginOffset != g.NextBeginOffset || w.MinOffset != g.MinOffset ||
			w.MaxOffset != g.MaxOffset || w.Bytes != g.Bytes || len(w.Records) != len(g.Records) {
			t.Fatalf("get %s: got %v next %d min %d max %d (%d recs), want %v next %d min %d max %d (%d recs)", k,
				g.Status, g.NextBeginOffset, g.MinOffset, g.MaxOffset, len(g.Records),
				w.Status, w.NextBeginOffset, w.MinOffset, w.MaxOffset, len(w.Records))
		}
		for i := range w.Records {
			if !bytes.Equal(w.Records[i], g.Records[i]) {
				t.Fatalf("get %s: record %d differs", k, i)
			}
		}
	}
	for off, w := range want.recs {
		if !bytes.Equal(w, got.recs[off]) {
			t.Fatalf("ReadRecord(%d) differs", off)
		}
	}
	if !reflect.DeepEqual(want.earliest, got.earliest) {
		t.Fatalf("earliest store times: got %v, want %v", got.earliest, want.earliest)
	}
	if !reflect.DeepEqual(want.byTime, got.byTime) {
		for k, w := range want.byTime {
			if got.byTime[k] != w {
				t.Fatalf("OffsetByTime %s: got %d, want %d", k, got.byTime[k], w)
			}
		}
	}
}

// tieredOpts: small segments, a cold reader, small consumequeue files.
func tieredOpts(fs vfs.FS, cold ColdReader) Options {
	o := testOpts(fs)
	o.SegmentSize = 4 << 10
	o.MaxMessageSize = 2 << 10
	o.CQEntriesPerFile = 8
	o.Cold = cold
	return o
}

// fillTiered writes n records, most to A/0 and some to B/1, with store
// times spread over several milliseconds, then seals the active segment.
func fillTiered(t *testing.T, s *Store, n int) []PutResult {
	t.Helper()
	var puts []PutResult
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < n; i++ {
		m := msg("A", 0, fmt.Sprintf("%03d-%s", i, bytes.Repeat([]byte{byte('a' + i%26)}, 50+rng.IntN(600))))
		if i%5 == 4 {
			m = msg("B", 1, fmt.Sprintf("%03d-b", i))
		}
		if i%7 == 0 {
			puts = append(puts, mustPut(t, s, m, m)...)
		} else {
			puts = append(puts, mustPut(t, s, m)...)
		}
		if i%20 == 19 {
			// Distinct store times for OffsetByTime: wait for the clock to move.
			last := puts[len(puts)-1].StoreTimestamp
			deadline := time.Now().Add(time.Second)
			for time.Now().UnixMilli() <= last && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	return puts
}

// openTiered opens a store with tieredOpts over a new in-memory file system
// and a new fake cold tier, and fills it with n records (fillTiered).
func openTiered(t *testing.T, n int) (*vfs.Mem, *fakeCold, Options, *Store, []PutResult) {
	t.Helper()
	fs, cold := vfs.NewMem(), newFakeCold()
	o := tieredOpts(fs, cold)
	s := mustOpen(t, o)
	return fs, cold, o, s, fillTiered(t, s, n)
}

// boundaryDrop picks k, the number of oldest segments to drop, such that
// the records on either side of the boundary are adjacent records of A/0.
func boundaryDrop(t *testing.T, segs []SegmentInfo, puts []PutResult, s *Store) int {
	t.Helper()
	for k := 2; k < len(segs)-1; k++ {
		b := segs[k].Base
		for i := 1; i < len(puts); i++ {
			if puts[i].PhysOffset == b && puts[i-1].PhysOffset+int64(puts[i-1].Size) == b {
				r1, _ := s.ReadRecord(puts[i-1].PhysOffset)
				r2, _ := s.ReadRecord(b)
				d1, _, _ := DecodeRecord(r1)
				d2, _, _ := DecodeRecord(r2)
				if d1.Topic == "A" && d2.Topic == "A" {
					return k
				}
			}
		}
	}
	t.Fatal("no segment boundary between two A records")
	return 0
}

func TestStoreColdFallbackByteIdentical(t *testing.T) {
	fs, cold, o, s, puts := openTiered(t, 150)
	queues := []qref{{"A", 0}, {"B", 1}}
	before := takeSnapshot(t, s, queues, puts)

	segs := s.SealedSegments()
	if len(segs) < 6 {
		t.Fatalf("want many segments, have %d", len(segs))
	}
	k := boundaryDrop(t, segs, puts, s)
	for _, sg := range segs[:k] {
		copyAndDrop(t, s, fs, cold, sg)
	}
	boundary := segs[k].Base
	if got := s.LocalMinPhysOffset(); got != boundary {
		t.Fatalf("LocalMinPhysOffset %d, want %d", got, boundary)
	}
	if got := s.MinPhysOffset(); got != 0 {
		t.Fatalf("MinPhysOffset %d, want 0 (everything still readable)", got)
	}
	if got := s.SealedSegments(); len(got) != len(segs)-k || got[0].Base != boundary {
		t.Fatalf("sealed after drop: %+v", got)
	}
	ls := s.LocalSegments()
	if ls[0].Base != boundary || ls[0].Created.IsZero() || ls[0].FirstStoreTime == 0 || ls[0].LastStoreTime < ls[0].FirstStoreTime {
		t.Fatalf("local segments: %+v", ls)
	}
	for i := 1; i < len(ls); i++ {
		if ls[i].Base != ls[i-1].Base+ls[i-1].Length {
			t.Fatalf("local segments not contiguous: %+v", ls)
		}
	}

	// A read straddling the boundary: one run of adjacent records, split
	// between the cold reader and the first local segment.
	straddle := func(s *Store) {
		t.Helper()
		var i int
		for i = range puts {
			if puts[i].PhysOffset == boundary {
				break
			}
		}
		lo, hi := puts[i-1], puts[i]
		raw, err := s.ReadRecord(lo.PhysOffset)
		if err != nil {
			t.Fatal(err)
		}
		rec, _, _ := DecodeRecord(raw)
		r, err := s.Get(context.Background(), GetRequest{Topic: "A", QueueID: 0, Offset: rec.QueueOffset, MaxMsgs: 2})
		if err != nil || r.Status != Found || len(r.Records) != 2 {
			t.Fatalf("straddling get: %v %v", r.Status, err)
		}
		if !bytes.Equal(r.Records[0], before.recs[lo.PhysOffset]) || !bytes.Equal(r.Records[1], before.recs[hi.PhysOffset]) {
			t.Fatal("straddling get: records differ")
		}
		buf := make([]byte, 300)
		if err := s.readLog(context.Background(), buf, boundary-150); err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(before.recs[lo.PhysOffset][int(lo.Size)-150:]), before.recs[hi.PhysOffset][:150]...)
		if !bytes.Equal(buf, want) {
			t.Fatal("readLog across the boundary differs")
		}
	}
	coldBefore := cold.reads.Load()
	straddle(s)
	compareSnapshots(t, before, takeSnapshot(t, s, queues, puts))
	if cold.reads.Load() == coldBefore {
		t.Fatal("the cold reader was never used")
	}

	// Recovery with the early segments gone, then once more after a clean
	// Close and an unclean stop (no checkpoint: full rescan of the local log).
	mustClose(t, s)
	s = mustOpen(t, o)
	if got := s.LocalMinPhysOffset(); got != boundary {
		t.Fatalf("after reopen LocalMinPhysOffset %d, want %d", got, boundary)
	}
	straddle(s)
	compareSnapshots(t, before, takeSnapshot(t, s, queues, puts))
	mustClose(t, s)
	if err := fs.Remove("/data/store/checkpoint"); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, o)
	compareSnapshots(t, before, takeSnapshot(t, s, queues, puts))
	// A consumequeue shorter than the checkpoint says (its last file lost) is
	// rebuilt from the first local segment; its entries below it are kept.
	mustClose(t, s)
	names, err := fs.ReadDir("/data/store/consumequeue/A/0")
	if err != nil || len(names) < 3 {
		t.Fatalf("consumequeue files: %v %v", names, err)
	}
	if err := fs.Remove("/data/store/consumequeue/A/0/" + names[len(names)-1]); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, o)
	compareSnapshots(t, before, takeSnapshot(t, s, queues, puts))

	// New writes continue at the end with the next queue offsets.
	checkPutAtEnd(t, s, "A", 0, "after")
	checkConsistent(t, s, "A", 1)
	mustClose(t, s)
}

func TestStoreDropAllSegments(t *testing.T) {
	fs, cold, o, s, puts := openTiered(t, 60)
	queues := []qref{{"A", 0}, {"B", 1}}
	before := takeSnapshot(t, s, queues, puts)
	end := s.MaxPhysOffset()
	for _, sg := range s.SealedSegments() {
		copyAndDrop(t, s, fs, cold, sg)
	}
	// Only an empty active segment at the end of the log is left.
	ls := s.LocalSegments()
	if len(ls) != 1 || ls[0].Base != end || ls[0].Length != 0 || ls[0].Sealed {
		t.Fatalf("local segments after dropping all: %+v", ls)
	}
	if len(s.SealedSegments()) != 0 {
		t.Fatal("sealed segments listed after dropping all")
	}
	if err := s.SealActive(); err != nil { // empty: a no-op
		t.Fatal(err)
	}
	if err := s.DropSegment(end); !errors.Is(err, ErrCannotDrop) {
		t.Fatalf("drop of the active segment: %v", err)
	}
	compareSnapshots(t, before, takeSnapshot(t, s, queues, puts))
	for range 2 { // a clean Close leaves the empty active segment; Open keeps the end
		mustClose(t, s)
		s = mustOpen(t, o)
		if s.MaxPhysOffset() != end || s.LocalMinPhysOffset() != end {
			t.Fatalf("reopened: end %d local min %d, want %d", s.MaxPhysOffset(), s.LocalMinPhysOffset(), end)
		}
		compareSnapshots(t, before, takeSnapshot(t, s, queues, puts))
	}
	// Even with the empty segment file lost, the checkpoint keeps the end:
	// offsets are never reused.
	mustClose(t, s)
	if err := fs.Remove(fmt.Sprintf("/data/store/commitlog/%020d", end)); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, o)
	defer mustClose(t, s)
	if s.MaxPhysOffset() != end {
		t.Fatalf("log restarts at %d, was at %d", s.MaxPhysOffset(), end)
	}
	compareSnapshots(t, before, takeSnapshot(t, s, queues, puts))
	checkPutAtEnd(t, s, "B", 1, "next")
	checkConsistent(t, s, "B", 2)
}

func TestStoreDropSegmentErrors(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, tieredOpts(fs, nil))
	fillTiered(t, s, 40)
	segs := s.SealedSegments()
	if err := s.DropSegment(segs[0].Base); !errors.Is(err, ErrCannotDrop) {
		t.Fatalf("drop without a cold tier: %v", err)
	}
	mustClose(t, s)

	cold := newFakeCold()
	o := tieredOpts(fs, cold)
	s = mustOpen(t, o)
	defer mustClose(t, s)
	mustPut(t, s, msg("A", 0, "active"))
	ls := s.LocalSegments()
	active := ls[len(ls)-1]
	if active.Sealed || active.Length == 0 || active.Created.IsZero() {
		t.Fatalf("active segment: %+v", active)
	}
	if err := s.DropSegment(active.Base); !errors.Is(err, ErrCannotDrop) {
		t.Fatalf("drop of the active segment: %v", err)
	}
	if err := s.DropSegment(segs[0].Base + 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("drop of an unknown segment: %v", err)
	}
	if err := s.DropSegment(segs[1].Base); !errors.Is(err, ErrCannotDrop) {
		t.Fatalf("drop out of order: %v", err)
	}
	copyAndDrop(t, s, fs, cold, segs[0])
	if err := s.DropSegment(segs[0].Base); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second drop: %v", err)
	}
	for _, sg := range s.SealedSegments() {
		if sg.Base == segs[0].Base {
			t.Fatal("dropped segment still listed")
		}
	}
	// SealActive seals the non-empty active segment; it becomes droppable in turn.
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	if got := s.SealedSegments(); got[len(got)-1].Base != active.Base {
		t.Fatalf("sealed: %+v", got)
	}
}

func TestStoreColdReadErrors(t *testing.T) {
	fs := vfs.NewMem()
	cold := newFakeCold()
	sw := &switchCold{}
	sw.set(cold)
	o := tieredOpts(fs, sw)
	s := mustOpen(t, o)
	defer mustClose(t, s)
	puts := fillTiered(t, s, 60)
	segs := s.SealedSegments()
	copyAndDrop(t, s, fs, cold, segs[0])
	copyAndDrop(t, s, fs, cold, segs[1])
	coldOff := puts[0].PhysOffset
	ctx := context.Background()
	get := func() (GetResult, error) {
		return s.Get(ctx, GetRequest{Topic: "A", QueueID: 0, Offset: 0, MaxMsgs: 4})
	}
	if r, err := get(); err != nil || r.Status != Found {
		t.Fatalf("healthy cold get: %v %v", r.Status, err)
	}

	sw.set(&erringCold{err: errColdDown})
	if r, err := get(); !errors.Is(err, ErrColdRead) || !errors.Is(err, errColdDown) || r.Records != nil {
		t.Fatalf("get with a failing cold tier: %v (%d records)", err, len(r.Records))
	}
	if _, err := s.ReadRecord(coldOff); !errors.Is(err, ErrColdRead) || !errors.Is(err, errColdDown) {
		t.Fatalf("ReadRecord: %v", err)
	}
	if _, err := s.EarliestStoreTime("A", 0); !errors.Is(err, errColdDown) {
		t.Fatalf("EarliestStoreTime: %v", err)
	}
	if _, err := s.OffsetByTimeContext(ctx, "A", 0, puts[0].StoreTimestamp); !errors.Is(err, errColdDown) {
		t.Fatalf("OffsetByTimeContext: %v", err)
	}
	if got := s.OffsetByTime("A", 0, puts[0].StoreTimestamp); got != 0 {
		t.Fatalf("OffsetByTime on error: %d", got)
	}
	// Local offsets are unaffected.
	last := puts[len(puts)-1]
	if _, err := s.ReadRecord(last.PhysOffset); err != nil {
		t.Fatalf("local ReadRecord with a failing cold tier: %v", err)
	}

	sw.set(&erringCold{garbage: true})
	if _, err := get(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("get of garbage: %v", err)
	}
	if _, err := s.ReadRecord(coldOff); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadRecord of garbage: %v", err)
	}
	if _, err := s.EarliestStoreTime("A", 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("EarliestStoreTime of garbage: %v", err)
	}

	sw.set(&erringCold{short: true})
	if _, err := get(); !errors.Is(err, ErrColdRead) || !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("get from a reader making no progress: %v", err)
	}

	// A tier that lost the objects: io.EOF past its end is ErrNotFound too.
	sw.set(newFakeCold())
	if _, err := s.ReadRecord(coldOff); !errors.Is(err, ErrColdRead) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadRecord from an empty tier: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	sw.set(cold)
	if _, err := s.ReadRecordContext(cctx, coldOff); !errors.Is(err, context.Canceled) {
		t.Fatalf("ReadRecordContext with a cancelled context: %v", err)
	}
	if r, err := get(); err != nil || r.Status != Found {
		t.Fatalf("cold get after recovery of the tier: %v %v", r.Status, err)
	}
}

// switchCold forwards to a replaceable ColdReader.
type switchCold struct {
	mu sync.Mutex
	c  ColdReader
}

func (w *switchCold) set(c ColdReader) {
	w.mu.Lock()
	w.c = c
	w.mu.Unlock()
}

func (w *switchCold) ReadAt(ctx context.Context, off int64, p []byte) (int, error) {
	w.mu.Lock()
	c := w.c
	w.mu.Unlock()
	return c.ReadAt(ctx, off, p)
}

func TestStoreMinPhysOffsetFloor(t *testing.T) {
	fs, cold, o, s, puts := openTiered(t, 120)
	segs := s.SealedSegments()
	for _, sg := range segs[:4] {
		copyAndDrop(t, s, fs, cold, sg)
	}
	floor := segs[2].Base
	// Expected mins: the first entry of each queue at or above the floor.
	wantMin := map[qref]int64{}
	for _, p := range puts {
		raw, err := s.ReadRecord(p.PhysOffset)
		if err != nil {
			t.Fatal(err)
		}
		rec, _, _ := DecodeRecord(raw)
		q := qref{rec.Topic, rec.QueueID}
		if _, ok := wantMin[q]; !ok && p.PhysOffset >= floor {
			wantMin[q] = rec.QueueOffset
		}
	}
	if err := s.SetMinPhysOffset(floor); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		if got := s.MinPhysOffset(); got != floor {
			t.Fatalf("MinPhysOffset %d, want %d", got, floor)
		}
		if got := s.LocalMinPhysOffset(); got != segs[4].Base {
			t.Fatalf("LocalMinPhysOffset %d, want %d", got, segs[4].Base)
		}
		for q, mn := range wantMin {
			if mn == 0 {
				t.Fatalf("%v: floor does not cut the queue; pick another", q)
			}
			if got := s.MinQueueOffset(q.topic, q.id); got != mn {
				t.Fatalf("%v: MinQueueOffset %d, want %d", q, got, mn)
			}
			r, err := s.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: 0})
			if err != nil || r.Status != OffsetTooSmall || r.NextBeginOffset != mn || r.MinOffset != mn {
				t.Fatalf("%v: get below the floor: %v next %d min %d (%v)", q, r.Status, r.NextBeginOffset, r.MinOffset, err)
			}
			r, err = s.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: mn, MaxMsgs: 1})
			if err != nil || r.Status != Found {
				t.Fatalf("%v: get at the new min: %v %v", q, r.Status, err)
			}
			rec, _, _ := DecodeRecord(r.Records[0])
			if rec.PhysOffset < floor || rec.QueueOffset != mn {
				t.Fatalf("%v: first record %+v", q, rec)
			}
			if ts, err := s.EarliestStoreTime(q.topic, q.id); err != nil || ts != rec.StoreTimestamp {
				t.Fatalf("%v: earliest %d %v, want %d", q, ts, err, rec.StoreTimestamp)
			}
			if off := s.OffsetByTime(q.topic, q.id, 0); off != mn {
				t.Fatalf("%v: OffsetByTime(0) = %d, want %d", q, off, mn)
			}
		}
		if _, err := s.ReadRecord(puts[0].PhysOffset); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ReadRecord below the floor: %v", err)
		}
		if _, err := s.ReadRecord(segs[3].Base); err != nil { // above the floor, still cold
			t.Fatalf("ReadRecord above the floor, cold: %v", err)
		}
	}
	check(s)
	if err := s.SetMinPhysOffset(floor - 1); err != nil { // never moves back
		t.Fatal(err)
	}
	check(s)
	mustClose(t, s)
	s = mustOpen(t, o)
	check(s)
	mustClose(t, s)
	// A crash right after SetMinPhysOffset returned keeps the floor.
	s = mustOpen(t, o)
	floor = segs[3].Base
	if err := s.SetMinPhysOffset(floor); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone()
	mustClose(t, s)
	o.FS = crashed
	s = mustOpen(t, o)
	defer mustClose(t, s)
	if got := s.MinPhysOffset(); got != floor {
		t.Fatalf("floor after a crash: %d, want %d", got, floor)
	}
	// Every queue entirely below a floor at the end of the log is empty.
	if err := s.SetMinPhysOffset(s.MaxPhysOffset()); err != nil {
		t.Fatal(err)
	}
	for _, q := range []qref{{"A", 0}, {"B", 1}} {
		mn, mx := s.MinQueueOffset(q.topic, q.id), s.MaxQueueOffset(q.topic, q.id)
		r, err := s.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: 0})
		if mn != mx || err != nil || r.Status != OffsetTooSmall || r.NextBeginOffset != mx {
			t.Fatalf("%v: min %d max %d: %v next %d (%v)", q, mn, mx, r.Status, r.NextBeginOffset, err)
		}
	}
	r := mustPut(t, s, msg("A", 0, "fresh"))
	g, err := s.Get(context.Background(), GetRequest{Topic: "A", QueueID: 0, Offset: r[0].QueueOffset})
	if err != nil || g.Status != Found {
		t.Fatalf("put after the floor: %v %v", g.Status, err)
	}
}

func TestStoreCheckpointV1StillRead(t *testing.T) {
	b := []byte(ckMagicV1)
	b = append(b, make([]byte, 8)...)        // seq
	b = append(b, 0, 0, 0, 0, 0, 0, 0x10, 0) // dispatched 4096
	b = append(b, 0, 0, 0, 1)                // one queue
	b = append(b, 0, 1, 'T', 0, 0, 0, 2)     // topic "T", id 2
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 9)    // max 9
	b = append(b, crcBytes(b)...)
	ck, err := parseCheckpoint(b)
	if err != nil || ck.dispatched != 4096 || ck.floor != 0 || len(ck.queues) != 1 || ck.queues[0] != (queueMark{"T", 2, 9}) {
		t.Fatalf("v1 checkpoint: %+v %v", ck, err)
	}
}

func crcBytes(b []byte) []byte {
	return binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE(b))
}

// TestStoreCrashWithDroppedSegments crashes the store while writers put,
// a dropper copies and drops the oldest sealed segments, and the floor
// stays at 0: every acked message must be readable after recovery, from
// the cold tier or the local log.
func TestStoreCrashWithDroppedSegments(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			fs := vfs.NewMem()
			cold := newFakeCold()
			o := tieredOpts(fs, cold)
			o.Flush = FlushSync
			o.SegmentSize = 8 << 10
			o.FlushInterval = 5 * time.Millisecond
			s := mustOpen(t, o)

			const queues = 3
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			load := putLoad{topic: "D", writers: 4, queues: queues, puts: 3000, maxBatch: 3, maxPad: 1200}.start(ctx, t, s, &wg, seed)
			var dropped atomic.Int64
			wg.Add(1)
			go func() { // keep at most two sealed segments local
				defer wg.Done()
				for i := 0; i < 100000 && ctx.Err() == nil; i++ {
					segs := s.SealedSegments()
					if len(segs) <= 2 {
						select {
						case <-ctx.Done():
						case <-time.After(200 * time.Microsecond):
						}
						continue
					}
					sg := segs[0]
					if err := cold.upload(fs, sg); err != nil {
						t.Error(err)
						return
					}
					if err := s.DropSegment(sg.Base); err != nil {
						if !errors.Is(err, ErrClosed) {
							t.Errorf("drop: %v", err)
						}
						return
					}
					dropped.Add(1)
				}
			}()
			target := 300 + rng.IntN(400)
			snapshot := load.snapshotWhen(30*time.Second, func(n int) bool { return n >= target && dropped.Load() >= 3 })
			crashed := fs.CrashClone()
			cancel()
			wg.Wait()
			mustClose(t, s)
			if len(snapshot) < target || dropped.Load() < 3 {
				t.Fatalf("only %d acks and %d drops before the deadline", len(snapshot), dropped.Load())
			}

			o.FS = crashed
			s2 := openRecovered(t, o, "D", snapshot, queues)
			if s2.LocalMinPhysOffset() == 0 {
				t.Fatal("no segment was dropped in the crashed copy")
			}
			mustClose(t, s2)
			s3 := mustOpen(t, o)
			checkAcked(t, s3, "D", snapshot)
			mustClose(t, s3)
		})
	}
}

// TestStoreDropWhileReading drops segments under concurrent readers: a
// reader that picked a segment just before it went retries cold and never
// sees an error or different bytes.
func TestStoreDropWhileReading(t *testing.T) {
	fs, cold, _, s, puts := openTiered(t, 150)
	defer mustClose(t, s)
	want := map[int64][]byte{}
	for _, p := range puts {
		raw, err := s.ReadRecord(p.PhysOffset)
		if err != nil {
			t.Fatal(err)
		}
		want[p.PhysOffset] = raw
	}
	segs := s.SealedSegments()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1_000_000; i++ {
				select {
				case <-done:
					return
				default:
				}
				p := puts[(i*7+r)%len(puts)]
				raw, err := s.ReadRecord(p.PhysOffset)
				if err != nil || !bytes.Equal(raw, want[p.PhysOffset]) {
					t.Errorf("ReadRecord(%d) during drops: %v", p.PhysOffset, err)
					return
				}
				g, err := s.Get(context.Background(), GetRequest{Topic: "A", QueueID: 0, Offset: int64(i % 100), MaxMsgs: 8})
				if err != nil || g.Status != Found {
					t.Errorf("get during drops: %v %v", g.Status, err)
					return
				}
				reads.Add(1)
			}
		}()
	}
	for _, sg := range segs[:len(segs)-1] {
		// Let the readers run between drops.
		target := reads.Load() + 20
		deadline := time.Now().Add(5 * time.Second)
		for reads.Load() < target && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
		copyAndDrop(t, s, fs, cold, sg)
	}
	close(done)
	wg.Wait()
	if reads.Load() == 0 {
		t.Fatal("no reads ran")
	}
}

// TestStoreLocalSegmentsAcrossRestarts: repeated Open/SealActive/Close
// cycles, with and without writes, never leave an empty sealed segment and
// never lose the end of the log.
func TestStoreLocalSegmentsAcrossRestarts(t *testing.T) {
	fs := vfs.NewMem()
	o := tieredOpts(fs, newFakeCold())
	var puts []PutResult
	for round := range 6 {
		s := mustOpen(t, o)
		if err := s.SealActive(); err != nil { // nothing active yet: no-op
			t.Fatal(err)
		}
		if round%2 == 0 {
			puts = append(puts, mustPut(t, s, msg("R", 0, fmt.Sprintf("round-%d", round)))...)
			if err := s.SealActive(); err != nil {
				t.Fatal(err)
			}
			if err := s.SealActive(); err != nil { // twice: still fine
				t.Fatal(err)
			}
		}
		ls := s.LocalSegments()
		for i, sg := range ls {
			if sg.Length == 0 || !sg.Sealed {
				t.Fatalf("round %d: segment %d: %+v", round, i, sg)
			}
			if i > 0 && sg.Base != ls[i-1].Base+ls[i-1].Length {
				t.Fatalf("round %d: not contiguous: %+v", round, ls)
			}
			if sg.FirstStoreTime == 0 || !sg.Created.Equal(time.UnixMilli(sg.FirstStoreTime)) && i < len(ls)-1 {
				t.Fatalf("round %d: times of %+v", round, sg)
			}
		}
		if len(ls) != len(puts) {
			t.Fatalf("round %d: %d segments for %d records", round, len(ls), len(puts))
		}
		if got := s.MaxPhysOffset(); got != puts[len(puts)-1].PhysOffset+int64(puts[len(puts)-1].Size) {
			t.Fatalf("round %d: end %d", round, got)
		}
		if got := len(readQueue(t, s, "R", 0)); got != len(puts) {
			t.Fatalf("round %d: %d records, want %d", round, got, len(puts))
		}
		mustClose(t, s)
	}
}
