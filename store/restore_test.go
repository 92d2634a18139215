package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// fakeIndex is a ColdIndex over BuildSegmentIndex blobs.
type fakeIndex struct {
	mu    sync.Mutex
	blobs map[int64][]byte
	reads atomic.Int64 // ReadIndex calls
	lists atomic.Int64 // Segments calls
}

func newFakeIndex() *fakeIndex { return &fakeIndex{blobs: map[int64][]byte{}} }

func (f *fakeIndex) Segments(ctx context.Context) ([]int64, error) {
	f.lists.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int64
	for b := range f.blobs {
		out = append(out, b)
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeIndex) ReadIndex(ctx context.Context, base int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.reads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.blobs[base]
	if !ok {
		return nil, fmt.Errorf("fake index: no blob for %d: %w", base, ErrNotFound) // gone, as ColdIndex says
	}
	return slices.Clone(b), nil
}

var restoreQueues = []qref{{"A", 0}, {"A", 1}, {"A", 2}, {"A", 3}, {"B", 0}, {"B", 1}}

// fillRestore writes n records over restoreQueues (and "Late"/0 when late),
// with varied sizes, tags codes that differ from the TAGS hash, an
// undispatched prepared-transaction record now and then, and store times
// spread over several milliseconds.
func fillRestore(t *testing.T, s *Store, rng *rand.Rand, n int, late bool) []PutResult {
	t.Helper()
	return fillQueues(t, s, rng, n, late, func(m *Message, k int) {
		m.TagsCode = int64(k) // as given by the broker, not TagsHash(TAGS)
	})
}

// fillQueues writes fillRestore's records; tags sets each one's tags from
// k, a random number in [0, 3).
func fillQueues(t *testing.T, s *Store, rng *rand.Rand, n int, late bool, tags func(m *Message, k int)) []PutResult {
	t.Helper()
	var puts []PutResult
	for i := range n {
		q := restoreQueues[rng.IntN(len(restoreQueues))]
		if late && i%3 == 0 {
			q = qref{"Late", 0}
		}
		m := msg(q.topic, q.id, fmt.Sprintf("%s/%d-%d-%s", q.topic, q.id, i, bytes.Repeat([]byte{byte('a' + i%26)}, 20+rng.IntN(400))))
		tags(&m, rng.IntN(3))
		batch := []Message{m}
		if i%17 == 5 {
			tx := msg(q.topic, q.id, "prepared")
			tx.SysFlag = sysFlagTxPrepared
			batch = append(batch, tx)
		}
		res := mustPut(t, s, batch...)
		puts = append(puts, res[0])
		if i%40 == 39 {
			last := res[0].StoreTimestamp
			deadline := time.Now().Add(time.Second)
			for time.Now().UnixMilli() <= last && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	return puts
}

// tierFrom uploads every sealed segment of s: bytes to cold, blobs to idx.
func tierFrom(t *testing.T, s *Store, fs vfs.FS, cold *fakeCold, idx *fakeIndex) {
	t.Helper()
	for _, sg := range s.SealedSegments() {
		blob, err := s.BuildSegmentIndex(sg.Base)
		if err != nil {
			t.Fatalf("BuildSegmentIndex(%d): %v", sg.Base, err)
		}
		again, err := s.BuildSegmentIndex(sg.Base)
		if err != nil || !bytes.Equal(blob, again) {
			t.Fatalf("BuildSegmentIndex(%d) is not deterministic (%v)", sg.Base, err)
		}
		if err := cold.upload(fs, sg); err != nil {
			t.Fatal(err)
		}
		idx.mu.Lock()
		idx.blobs[sg.Base] = blob
		idx.mu.Unlock()
	}
}

type restoreFixture struct {
	a        *Store
	fsA      *vfs.Mem
	cold     *fakeCold
	idx      *fakeIndex
	puts     []PutResult
	queues   []qref
	ck       map[string]map[int32]QueueRange
	ckHW     int64
	nsegs    int
	maxes    map[qref]int64
	restored Restore
}

// newRestoreFixture fills store A over many segments, takes a "checkpoint"
// part way, writes more (a new topic among them), seals, and uploads every
// segment and its index blob.
func newRestoreFixture(t *testing.T, n int) *restoreFixture {
	t.Helper()
	f := &restoreFixture{fsA: vfs.NewMem(), cold: newFakeCold(), idx: newFakeIndex()}
	o := tieredOpts(f.fsA, f.cold)
	f.a = mustOpen(t, o)
	t.Cleanup(func() { f.a.Close() })
	rng := rand.New(rand.NewPCG(3, 4))
	f.puts = fillRestore(t, f.a, rng, n*9/10, false)
	f.ck = map[string]map[int32]QueueRange{}
	for _, q := range restoreQueues {
		if f.ck[q.topic] == nil {
			f.ck[q.topic] = map[int32]QueueRange{}
		}
		f.ck[q.topic][q.id] = QueueRange{Min: f.a.MinQueueOffset(q.topic, q.id), Max: f.a.MaxQueueOffset(q.topic, q.id)}
	}
	f.ckHW = f.a.MaxPhysOffset()
	f.puts = append(f.puts, fillRestore(t, f.a, rng, n-n*9/10, true)...)
	if err := f.a.SealActive(); err != nil {
		t.Fatal(err)
	}
	tierFrom(t, f.a, f.fsA, f.cold, f.idx)
	f.nsegs = len(f.a.SealedSegments())
	f.queues = append(slices.Clone(restoreQueues), qref{"Late", 0})
	f.maxes = map[qref]int64{}
	for _, q := range f.queues {
		f.maxes[q] = f.a.MaxQueueOffset(q.topic, q.id)
	}
	f.restored = Restore{CommitLogStart: f.a.MaxPhysOffset() + 12345, IndexedFrom: f.ckHW, Queues: f.ck}
	return f
}

func (f *restoreFixture) opts(fs vfs.FS) Options {
	o := tieredOpts(fs, f.cold)
	o.ColdIndex = f.idx
	r := f.restored
	o.Restore = &r
	return o
}

func TestStoreSegmentIndexBlob(t *testing.T) {
	f := newRestoreFixture(t, 400)
	a := f.a
	if _, err := a.BuildSegmentIndex(12345); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown segment: %v", err)
	}
	mustPut(t, a, msg("A", 0, "active"))
	ls := a.LocalSegments()
	if _, err := a.BuildSegmentIndex(ls[len(ls)-1].Base); err == nil {
		t.Fatal("index of the active segment built")
	}
	seen := map[qref]int64{} // entries seen per queue over all blobs
	var prevEnd map[qref]int64
	for _, sg := range a.SealedSegments() {
		blob := f.idx.blobs[sg.Base]
		x, err := DecodeSegmentIndex(blob)
		if err != nil {
			t.Fatal(err)
		}
		if x.Base != sg.Base || x.Length != sg.Length {
			t.Fatalf("blob header %d+%d, segment %d+%d", x.Base, x.Length, sg.Base, sg.Length)
		}
		d, err := DecodeSegmentIndexDirectory(blob[:SegmentIndexHeaderSize+int(x.dirLen)])
		if err != nil || len(d.Queues) != len(x.Queues) {
			t.Fatalf("directory from a prefix: %v", err)
		}
		ends := map[qref]int64{}
		for i, dq := range x.Queues {
			k := qref{dq.Topic, dq.QueueID}
			ends[k] = dq.End()
			if prevEnd != nil && dq.End() < prevEnd[k] {
				t.Fatalf("%v: next offset went back at segment %d", k, sg.Base)
			}
			if dq.Count == 0 && dq.FirstOffset != prevEnd[k] {
				t.Fatalf("%v: absent from %d with next offset %d, the previous segment ended at %d", k, sg.Base, dq.FirstOffset, prevEnd[k])
			}
			for j := range dq.Count {
				phys, size, tags := x.Entry(i, j)
				wp, ws, wt, ok, err := a.QueueEntry(dq.Topic, dq.QueueID, dq.FirstOffset+j)
				if err != nil || !ok || phys != wp || size != ws || tags != wt {
					t.Fatalf("%v@%d: blob (%d,%d,%d), consumequeue (%d,%d,%d,%v,%v)", k, dq.FirstOffset+j, phys, size, tags, wp, ws, wt, ok, err)
				}
				if phys < sg.Base || phys+int64(size) > sg.Base+sg.Length {
					t.Fatalf("%v@%d: record at %d outside the segment", k, dq.FirstOffset+j, phys)
				}
				seen[k]++
			}
		}
		for k, e := range prevEnd {
			if _, ok := ends[k]; !ok {
				t.Fatalf("%v (next offset %d) missing from the directory of %d", k, e, sg.Base)
			}
		}
		prevEnd = ends
	}
	for _, q := range f.queues {
		if seen[q] != f.maxes[q] {
			t.Fatalf("%v: %d entries in blobs, queue has %d", q, seen[q], f.maxes[q])
		}
	}
	// Corruption is detected.
	blob := slices.Clone(f.idx.blobs[a.SealedSegments()[3].Base])
	blob[len(blob)-3] ^= 1
	if _, err := DecodeSegmentIndex(blob); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped entry bit: %v", err)
	}
	blob = slices.Clone(f.idx.blobs[a.SealedSegments()[3].Base])
	blob[SegmentIndexHeaderSize+2] ^= 1
	if _, err := DecodeSegmentIndexDirectory(blob); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped directory bit: %v", err)
	}
	// Same blobs after a restart (tags codes from the consumequeue files).
	mustClose(t, a)
	a2 := mustOpen(t, tieredOpts(f.fsA, f.cold))
	defer mustClose(t, a2)
	for _, sg := range a2.SealedSegments() {
		b, err := a2.BuildSegmentIndex(sg.Base)
		if err != nil {
			t.Fatal(err)
		}
		if want, ok := f.idx.blobs[sg.Base]; ok && !bytes.Equal(b, want) {
			t.Fatalf("blob of %d differs after a restart", sg.Base)
		}
	}
}

func checkQueueEntries(t *testing.T, want, got *Store, queues []qref) {
	t.Helper()
	for _, q := range queues {
		mx := want.MaxQueueOffset(q.topic, q.id)
		for i := int64(-1); i < mx; i++ {
			wp, ws, wt, wok, werr := want.QueueEntry(q.topic, q.id, i)
			gp, gs, gt, gok, gerr := got.QueueEntry(q.topic, q.id, i)
			if werr != nil || gerr != nil || wp != gp || ws != gs || wt != gt || wok != gok {
				t.Fatalf("QueueEntry %v@%d: got (%d,%d,%d,%v,%v) want (%d,%d,%d,%v,%v)", q, i, gp, gs, gt, gok, gerr, wp, ws, wt, wok, werr)
			}
		}
	}
}

func TestStoreRestoreFromTier(t *testing.T) {
	f := newRestoreFixture(t, 1000)
	if f.nsegs < 64 {
		t.Fatalf("want >= 64 segments, have %d", f.nsegs)
	}
	stale := 0
	for _, q := range f.queues {
		if f.ck[q.topic][q.id].Max < f.maxes[q] {
			stale++
		}
	}
	if stale < len(f.queues)-1 {
		t.Fatalf("want stale checkpoint maxes, %d of %d", stale, len(f.queues))
	}
	want := takeSnapshot(t, f.a, f.queues, f.puts)

	fsB := vfs.NewMem()
	o := f.opts(fsB)
	f.cold.reads.Store(0)
	start := time.Now()
	b := mustOpen(t, o)
	t.Logf("restore over %d segments: %v, %d index reads, %d lists", f.nsegs, time.Since(start), f.idx.reads.Load(), f.idx.lists.Load())
	if n := f.idx.reads.Load(); n > restoreScanBlobs {
		t.Fatalf("restore read %d index blobs, want <= %d", n, restoreScanBlobs)
	}
	if n := f.cold.reads.Load(); n != 0 {
		t.Fatalf("restore read the cold commitlog %d times", n)
	}
	if got := b.MaxPhysOffset(); got != o.Restore.CommitLogStart {
		t.Fatalf("MaxPhysOffset %d, want %d", got, o.Restore.CommitLogStart)
	}
	if got := b.LocalMinPhysOffset(); got != o.Restore.CommitLogStart {
		t.Fatalf("LocalMinPhysOffset %d", got)
	}
	for _, q := range f.queues {
		if mx, mn := b.MaxQueueOffset(q.topic, q.id), b.MinQueueOffset(q.topic, q.id); mx != f.maxes[q] || mn != 0 {
			t.Fatalf("%v restored as [%d, %d), want [0, %d) (checkpoint said %v)", q, mn, mx, f.maxes[q], f.ck[q.topic][q.id])
		}
	}
	compareSnapshots(t, want, takeSnapshot(t, b, f.queues, f.puts))
	checkQueueEntries(t, f.a, b, f.queues)
	justRestored := fsB.CrashClone() // a crash before anything was written

	// New messages continue every queue and the log past CommitLogStart.
	var newPuts []PutResult
	for i, q := range f.queues {
		res := mustPut(t, b, msg(q.topic, q.id, fmt.Sprintf("new-%d", i)), msg(q.topic, q.id, fmt.Sprintf("new2-%d", i)))
		if res[0].QueueOffset != f.maxes[q] || res[1].QueueOffset != f.maxes[q]+1 || res[0].PhysOffset < o.Restore.CommitLogStart {
			t.Fatalf("%v: new put %+v, want queue offset %d and phys >= %d", q, res, f.maxes[q], o.Restore.CommitLogStart)
		}
		newPuts = append(newPuts, res...)
	}
	readNew := func(s *Store) {
		t.Helper()
		for i, q := range f.queues {
			r, err := s.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: f.maxes[q]})
			if err != nil || r.Status != Found || len(r.Records) != 2 {
				t.Fatalf("%v new records: %v %v", q, r.Status, err)
			}
			rec, _, _ := DecodeRecord(r.Records[0])
			if string(rec.Body) != fmt.Sprintf("new-%d", i) || rec.PhysOffset != newPuts[2*i].PhysOffset {
				t.Fatalf("%v new record %q at %d", q, rec.Body, rec.PhysOffset)
			}
			// A Get from the last old offset crosses from cold into local.
			x, err := s.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: f.maxes[q] - 1, MaxMsgs: 8})
			if err != nil || x.Status != Found || len(x.Records) != 3 || x.NextBeginOffset != f.maxes[q]+2 ||
				!bytes.Equal(x.Records[1], r.Records[0]) || !bytes.Equal(x.Records[2], r.Records[1]) {
				t.Fatalf("%v get across the cold/local boundary: %v next %d, %d records, %v", q, x.Status, x.NextBeginOffset, len(x.Records), err)
			}
			_, _, _, ok, _ := f.a.QueueEntry(q.topic, q.id, f.maxes[q]-1)
			old, _ := f.a.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: f.maxes[q] - 1, MaxMsgs: 1})
			if !ok || !bytes.Equal(x.Records[0], old.Records[0]) {
				t.Fatalf("%v: last old record differs", q)
			}
		}
	}
	readNew(b)
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	// The restored queue's local file starts at its first local entry.
	cqDir := filepath.Join(o.Dir, "consumequeue", "A", "0")
	names, err := fsB.ReadDir(cqDir)
	if err != nil || len(names) != 1 || names[0] != segmentName(f.maxes[qref{"A", 0}]*cqEntrySize) {
		t.Fatalf("consumequeue files of A/0: %v %v", names, err)
	}

	// A crash now: everything restored and flushed survives.
	crashed := fsB.CrashClone()
	mustClose(t, b)

	t.Run("crash-after-restore", func(t *testing.T) {
		s := mustOpen(t, f.opts(justRestored))
		defer mustClose(t, s)
		for _, q := range f.queues {
			if mx := s.MaxQueueOffset(q.topic, q.id); mx != f.maxes[q] {
				t.Fatalf("%v: max %d, want %d", q, mx, f.maxes[q])
			}
		}
		if s.MaxPhysOffset() != o.Restore.CommitLogStart {
			t.Fatalf("log end %d, want %d", s.MaxPhysOffset(), o.Restore.CommitLogStart)
		}
		checkOldGets(t, s, f, want)
	})
	for name, fs := range map[string]*vfs.Mem{"restart": fsB, "crash": crashed} {
		t.Run(name, func(t *testing.T) {
			o := f.opts(fs) // Restore is ignored: the store has a commitlog
			f.idx.reads.Store(0)
			s := mustOpen(t, o)
			defer mustClose(t, s)
			if n := f.idx.reads.Load(); n != 0 {
				t.Fatalf("reopen read %d index blobs", n)
			}
			for _, q := range f.queues {
				if mx := s.MaxQueueOffset(q.topic, q.id); mx != f.maxes[q]+2 {
					t.Fatalf("%v: max %d after reopen, want %d", q, mx, f.maxes[q]+2)
				}
			}
			readNew(s)
			checkQueueEntries(t, f.a, s, f.queues)
			checkOldGets(t, s, f, want)
			res := mustPut(t, s, msg("B", 1, "after reopen"))
			if res[0].QueueOffset != f.maxes[qref{"B", 1}]+2 {
				t.Fatalf("put after reopen: %+v", res[0])
			}
		})
	}
}

// checkOldGets repeats the Gets of want that stopped below A's max (they
// never reach the records written after the restore) and compares them.
func checkOldGets(t *testing.T, s *Store, f *restoreFixture, want snapshot) {
	t.Helper()
	for _, q := range f.queues {
		for _, maxMsgs := range []int{1, 3, 32} {
			for off := int64(0); off < f.maxes[q]; off++ {
				k := fmt.Sprintf("%s/%d@%d/%d", q.topic, q.id, off, maxMsgs)
				w := want.gets[k]
				if w.NextBeginOffset >= f.maxes[q] {
					continue // A ran out of records here; s goes on into the new ones
				}
				g, err := s.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: off, MaxMsgs: maxMsgs, MaxBytes: 6000})
				if err != nil || w.Status != g.Status || w.NextBeginOffset != g.NextBeginOffset || w.MinOffset != g.MinOffset || len(w.Records) != len(g.Records) {
					t.Fatalf("get %s: got %v next %d min %d (%d recs) %v, want %v next %d min %d (%d recs)", k, g.Status, g.NextBeginOffset,
						g.MinOffset, len(g.Records), err, w.Status, w.NextBeginOffset, w.MinOffset, len(w.Records))
				}
				for i := range w.Records {
					if !bytes.Equal(w.Records[i], g.Records[i]) {
						t.Fatalf("get %s: record %d differs", k, i)
					}
				}
			}
		}
		e, err := s.EarliestStoreTime(q.topic, q.id)
		if w := want.earliest[fmt.Sprintf("%s/%d", q.topic, q.id)]; err != nil || e != w {
			t.Fatalf("earliest %v: %d %v, want %d", q, e, err, w)
		}
	}
	for off, w := range want.recs {
		if g, err := s.ReadRecord(off); err != nil || !bytes.Equal(w, g) {
			t.Fatalf("ReadRecord(%d) differs: %v", off, err)
		}
	}
}

// One cold Get of an old offset costs O(log #segments) index reads.
func TestStoreRestoreColdGetIsLogarithmic(t *testing.T) {
	f := newRestoreFixture(t, 1000)
	bound := int64(2*math.Log2(float64(f.nsegs)) + 2)
	rng := rand.New(rand.NewPCG(9, 9))
	worst := int64(0)
	for i := range 12 {
		q := restoreQueues[rng.IntN(len(restoreQueues))]
		off := rng.Int64N(f.maxes[q])
		if i == 0 {
			off = 0
		}
		b := mustOpen(t, f.opts(vfs.NewMem()))
		f.idx.reads.Store(0)
		r, err := b.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: off, MaxMsgs: 1})
		n := f.idx.reads.Load()
		mustClose(t, b)
		if err != nil || r.Status != Found {
			t.Fatalf("cold get %v@%d: %v %v", q, off, r.Status, err)
		}
		worst = max(worst, n)
		if n > bound {
			t.Fatalf("cold get %v@%d read %d index blobs over %d segments, want <= %d", q, off, n, f.nsegs, bound)
		}
	}
	t.Logf("%d segments: worst %d index reads per cold get (bound %d)", f.nsegs, worst, bound)
}

func TestStoreRestoreFloorAndDelete(t *testing.T) {
	f := newRestoreFixture(t, 400)
	fsB := vfs.NewMem()
	b := mustOpen(t, f.opts(fsB))
	floor := f.puts[len(f.puts)/3].PhysOffset + 1
	for _, s := range []*Store{f.a, b} {
		if err := s.SetMinPhysOffset(floor); err != nil {
			t.Fatal(err)
		}
	}
	check := func(s *Store) {
		t.Helper()
		for _, q := range f.queues {
			wmn, gmn := f.a.MinQueueOffset(q.topic, q.id), s.MinQueueOffset(q.topic, q.id)
			if wmn != gmn || wmn == 0 && q.topic != "Late" {
				t.Fatalf("%v: min %d, A says %d", q, gmn, wmn)
			}
			r, err := s.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: gmn - 1})
			if gmn > 0 && (err != nil || r.Status != OffsetTooSmall || r.NextBeginOffset != gmn) {
				t.Fatalf("%v below min: %v next %d %v", q, r.Status, r.NextBeginOffset, err)
			}
			et, err := s.EarliestStoreTime(q.topic, q.id)
			wt, _ := f.a.EarliestStoreTime(q.topic, q.id)
			if err != nil || et != wt {
				t.Fatalf("%v earliest %d %v, want %d", q, et, err, wt)
			}
		}
	}
	check(b)
	if err := b.DeleteTopic("B"); err != nil {
		t.Fatal(err)
	}
	mustClose(t, b)
	b = mustOpen(t, f.opts(fsB))
	defer mustClose(t, b)
	if b.MinPhysOffset() != floor {
		t.Fatalf("floor %d after reopen, want %d", b.MinPhysOffset(), floor)
	}
	f.queues = slices.DeleteFunc(f.queues, func(q qref) bool { return q.topic == "B" })
	check(b)
	if mx := b.MaxQueueOffset("B", 0); mx != 0 {
		t.Fatalf("deleted topic B/0 has max %d after reopen", mx)
	}
}

func TestStoreRestoreIgnoredWithCommitlog(t *testing.T) {
	f := newRestoreFixture(t, 100)
	fs := vfs.NewMem()
	o := tieredOpts(fs, f.cold)
	s := mustOpen(t, o)
	mustPut(t, s, msg("A", 0, "local"))
	mustClose(t, s)
	o2 := f.opts(fs)
	s = mustOpen(t, o2)
	defer mustClose(t, s)
	if s.MaxQueueOffset("A", 0) != 1 || s.MaxPhysOffset() >= o2.Restore.CommitLogStart {
		t.Fatalf("restore applied over an existing commitlog: max %d phys %d", s.MaxQueueOffset("A", 0), s.MaxPhysOffset())
	}
	if n := f.idx.reads.Load(); n != 0 {
		t.Fatalf("ignored restore read %d blobs", n)
	}
}

// A restore whose index blobs are missing at the end (the segments were
// never uploaded) serves what there is; the checkpoint's max still holds.
func TestStoreRestoreMissingBlobs(t *testing.T) {
	f := newRestoreFixture(t, 300)
	segs := f.a.SealedSegments()
	lost := segs[len(segs)-3:]
	for _, sg := range lost {
		delete(f.idx.blobs, sg.Base)
	}
	b := mustOpen(t, f.opts(vfs.NewMem()))
	defer mustClose(t, b)
	for _, q := range restoreQueues {
		mx := b.MaxQueueOffset(q.topic, q.id)
		if mx < f.ck[q.topic][q.id].Max || mx > f.maxes[q] {
			t.Fatalf("%v: max %d, checkpoint %d, true %d", q, mx, f.ck[q.topic][q.id].Max, f.maxes[q])
		}
		// Past the last indexed entry: OffsetFoundNull, moving to the local range.
		var lastIndexed int64 = -1
		for i := mx - 1; i >= 0; i-- {
			p, _, _, ok, _ := f.a.QueueEntry(q.topic, q.id, i)
			if ok && p < lost[0].Base {
				lastIndexed = i
				break
			}
		}
		if lastIndexed+1 < mx {
			r, err := b.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: lastIndexed + 1})
			if err != nil || r.Status != OffsetFoundNull || r.NextBeginOffset != mx {
				t.Fatalf("%v@%d: %v next %d %v", q, lastIndexed+1, r.Status, r.NextBeginOffset, err)
			}
		}
		if lastIndexed >= 0 {
			r, err := b.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: lastIndexed})
			if err != nil || r.Status != Found || len(r.Records) != 1 {
				t.Fatalf("%v@%d: %v %v", q, lastIndexed, r.Status, err)
			}
		}
	}
}

// A store restored from A's tier writes on, uploads its own segments and
// blobs to the same tier, and a third store restored from that tier serves
// A's and B's messages alike (across the gap between A's end and B's start).
func TestStoreRestoreChained(t *testing.T) {
	f := newRestoreFixture(t, 300)
	fsB := vfs.NewMem()
	b := mustOpen(t, f.opts(fsB))
	defer mustClose(t, b)
	rng := rand.New(rand.NewPCG(5, 6))
	f.puts = append(f.puts, fillRestore(t, b, rng, 150, true)...)
	if err := b.SealActive(); err != nil {
		t.Fatal(err)
	}
	tierFrom(t, b, fsB, f.cold, f.idx)
	for _, q := range f.queues {
		f.maxes[q] = b.MaxQueueOffset(q.topic, q.id)
	}
	want := takeSnapshot(t, b, f.queues, f.puts)

	f.restored.CommitLogStart = b.MaxPhysOffset() + 777
	c := mustOpen(t, f.opts(vfs.NewMem())) // A's stale checkpoint: the blobs know better
	defer mustClose(t, c)
	for _, q := range f.queues {
		if mx := c.MaxQueueOffset(q.topic, q.id); mx != f.maxes[q] {
			t.Fatalf("%v: max %d, want %d", q, mx, f.maxes[q])
		}
	}
	checkQueueEntries(t, b, c, f.queues)
	compareSnapshots(t, want, takeSnapshot(t, c, f.queues, f.puts))
}

// staleIndex lists the bases it was given, whatever blobs are left: the
// manifest a cold index listed before retention deleted a segment.
type staleIndex struct {
	*fakeIndex
	bases []int64
}

func (s *staleIndex) Segments(ctx context.Context) ([]int64, error) {
	return slices.Clone(s.bases), nil
}

// TestStoreRestoreColdIndexSkipsExpiredSegment: per-topic retention
// deleted a segment from the middle of the log (every queue's min is past
// its records) after the cold index listed it. A lookup that probes the
// gone blob forgets it and finds the entry in the segments left, instead
// of failing every read whose search passes that segment.
func TestStoreRestoreColdIndexSkipsExpiredSegment(t *testing.T) {
	f := newRestoreFixture(t, 400)
	segs := f.a.SealedSegments()
	if len(segs) < 5 {
		t.Fatalf("%d segments, want at least 5", len(segs))
	}
	gone := segs[len(segs)/2]
	// Every queue's min past its records in the gone segment.
	mins := map[qref]int64{}
	for _, q := range restoreQueues {
		for i := f.a.MinQueueOffset(q.topic, q.id); i < f.maxes[q]; i++ {
			p, _, _, ok, _ := f.a.QueueEntry(q.topic, q.id, i)
			if ok && p >= gone.Base+gone.Length {
				mins[q] = i
				break
			}
		}
		rg := f.restored.Queues[q.topic][q.id]
		rg.Min = mins[q]
		f.restored.Queues[q.topic][q.id] = rg
	}
	stale := &staleIndex{fakeIndex: f.idx}
	stale.bases, _ = f.idx.Segments(context.Background())
	o := f.opts(vfs.NewMem())
	o.ColdIndex = stale
	b := mustOpen(t, o)
	defer mustClose(t, b)
	f.idx.mu.Lock()
	delete(f.idx.blobs, gone.Base)
	f.idx.mu.Unlock()
	for _, q := range restoreQueues {
		mn := b.MinQueueOffset(q.topic, q.id)
		if mn != mins[q] {
			t.Fatalf("%v: min %d, want %d", q, mn, mins[q])
		}
		for _, x := range []int64{mn, mn + 1} {
			r, err := b.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: x, MaxMsgs: 1})
			if err != nil || r.Status != Found || len(r.Records) != 1 {
				t.Fatalf("%v@%d after the segment at %d expired: %v %v", q, x, gone.Base, r.Status, err)
			}
			want, _, _, _, _ := f.a.QueueEntry(q.topic, q.id, x)
			if got := int64(binary.BigEndian.Uint64(r.Records[0][offPhysOffset:])); got != want {
				t.Fatalf("%v@%d: record at %d, want %d", q, x, got, want)
			}
		}
	}
}

// TestStoreColdIndexOneBlobReadPerSegment: the queues of a restored store
// replaying together (each in turn, a few entries at a time) read each
// segment's index blob about once, not once per queue and block: one blob
// read caches every queue's entries of that segment.
func TestStoreColdIndexOneBlobReadPerSegment(t *testing.T) {
	f := newRestoreFixture(t, 600)
	b := mustOpen(t, f.opts(vfs.NewMem()))
	defer mustClose(t, b)
	f.idx.reads.Store(0)
	next := map[qref]int64{}
	for _, q := range restoreQueues {
		next[q] = b.MinQueueOffset(q.topic, q.id)
	}
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
			next[q] = r.NextBeginOffset
		}
	}
	t.Logf("%d blob reads for %d segments and %d queues", f.idx.reads.Load(), f.nsegs, len(restoreQueues))
	// A binary search probes a few segments once each; then each segment
	// is read once for the entries of all the queues.
	if n, limit := f.idx.reads.Load(), int64(2*f.nsegs); n > limit {
		t.Fatalf("%d blob reads for %d segments and %d queues, want at most %d", n, f.nsegs, len(restoreQueues), limit)
	}
}
