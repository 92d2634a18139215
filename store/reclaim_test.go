package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

// reclaimOpts: tieredOpts with a cold index over idx.
func reclaimOpts(fs vfs.FS, cold *fakeCold, idx *fakeIndex) Options {
	o := tieredOpts(fs, cold)
	o.ColdIndex = idx
	return o
}

// uploadAll puts every sealed segment of s not yet in the bucket there,
// bytes and index blob, as the broker's uploader does before any drop.
func uploadAll(t testing.TB, s *Store, fs vfs.FS, cold *fakeCold, idx *fakeIndex) {
	t.Helper()
	for _, sg := range s.SealedSegments() {
		idx.mu.Lock()
		_, done := idx.blobs[sg.Base]
		idx.mu.Unlock()
		if done {
			continue
		}
		blob, err := s.BuildSegmentIndex(sg.Base)
		if err != nil {
			t.Fatalf("BuildSegmentIndex(%d): %v", sg.Base, err)
		}
		if err := cold.upload(fs, sg); err != nil {
			t.Fatal(err)
		}
		idx.mu.Lock()
		idx.blobs[sg.Base] = blob
		idx.mu.Unlock()
	}
}

// dropKeeping uploads every sealed segment and drops the oldest while
// more than keep sealed segments are local, as local retention does.
func dropKeeping(t testing.TB, s *Store, fs vfs.FS, cold *fakeCold, idx *fakeIndex, keep int) {
	t.Helper()
	uploadAll(t, s, fs, cold, idx)
	for segs := s.SealedSegments(); len(segs) > keep; segs = segs[1:] {
		if err := s.DropSegment(segs[0].Base); err != nil {
			t.Fatalf("drop %d: %v", segs[0].Base, err)
		}
	}
}

// cqFileStarts lists the consumequeue files of topic/id on fs: their first
// indexes and entry counts.
func cqFileStarts(t testing.TB, fs vfs.FS, dir, topic string, id int32) (starts, counts []int64) {
	t.Helper()
	qdir := filepath.Join(dir, "consumequeue", topic, queueDirName(id))
	names, err := fs.ReadDir(qdir)
	if err != nil {
		return nil, nil
	}
	for _, n := range names {
		off, ok := parseSegmentName(n)
		if !ok {
			continue
		}
		fi, err := fs.Stat(filepath.Join(qdir, n))
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, off/cqEntrySize)
		counts = append(counts, fi.Size()/cqEntrySize)
	}
	return starts, counts
}

// checkReclaimed asserts that no consumequeue file of the queues is left
// whose entries all point below the local log, that each queue with
// entries there has a cold range, and that the cold range ends where the
// local files start.
func checkReclaimed(t *testing.T, s *Store, fs vfs.FS, dir string, queues []qref) {
	t.Helper()
	local := s.LocalMinPhysOffset()
	if local == 0 {
		t.Fatal("nothing dropped")
	}
	for _, qr := range queues {
		q := s.queue(qr.topic, qr.id)
		ce := q.coldEnd.Load()
		starts, counts := cqFileStarts(t, fs, dir, qr.topic, qr.id)
		if len(starts) > 0 && starts[0] < ce {
			t.Fatalf("%v: local file at %d below coldEnd %d", qr, starts[0], ce)
		}
		for i, st := range starts {
			// The last entry of every file left points into the local log.
			_, e, ok, err := q.firstEntryIn(entrySource{}, st, st+counts[i])
			if err != nil {
				t.Fatal(err)
			}
			last, err := q.fileMaxEnd(q.files[i])
			if err != nil {
				t.Fatal(err)
			}
			if ok && last <= local {
				t.Fatalf("%v: file at %d (%d entries, first at %d) lies wholly below the local log (%d): not reclaimed",
					qr, st, counts[i], e.phys, local)
			}
		}
		// Entries below the local log exist: they are cold now.
		p, _, _, ok, err := s.QueueEntry(qr.topic, qr.id, s.MinQueueOffset(qr.topic, qr.id))
		if err != nil {
			t.Fatal(err)
		}
		if ok && p < local && ce == 0 {
			t.Fatalf("%v: first entry at commitlog %d below the local log %d, yet no cold range", qr, p, local)
		}
	}
}

// queueFileBytes is the bytes of every local consumequeue file.
func queueFileBytes(t testing.TB, fs vfs.FS, dir string) (bytes int64, files int) {
	t.Helper()
	root := filepath.Join(dir, "consumequeue")
	topics, _ := fs.ReadDir(root)
	for _, tp := range topics {
		ids, _ := fs.ReadDir(filepath.Join(root, tp))
		for _, id := range ids {
			names, _ := fs.ReadDir(filepath.Join(root, tp, id))
			for _, n := range names {
				fi, err := fs.Stat(filepath.Join(root, tp, id, n))
				if err != nil {
					t.Fatal(err)
				}
				bytes += fi.Size()
				files++
			}
		}
	}
	return bytes, files
}

// timesAt is QueueOffsetAtTime for each put's store time (and ±1 ms).
func timesAt(t *testing.T, s *Store, queues []qref, puts []PutResult) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, q := range queues {
		for i, p := range puts {
			if i%3 != 0 {
				continue
			}
			for _, d := range []int64{-1, 0, 1} {
				off, err := s.QueueOffsetAtTime(context.Background(), q.topic, q.id, p.StoreTimestamp+d)
				if err != nil {
					t.Fatal(err)
				}
				out[fmt.Sprintf("%v@%d", q, p.StoreTimestamp+d)] = off
			}
		}
	}
	return out
}

func sameTimes(t *testing.T, want, got map[string]int64) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("QueueOffsetAtTime %s: got %d, want %d", k, got[k], w)
		}
	}
}

// TestStoreReclaimConsumeQueueFiles: once segments are dropped after their
// upload, the local consumequeue files of their records are deleted, and
// Get (across the cold/local boundary too), QueueEntry, EarliestStoreTime,
// OffsetByTime, QueueOffsetAtTime and ReadRecord answer as before, from the
// cold index; after a restart and after a crash too, without rebuilding
// the files.
func TestStoreReclaimConsumeQueueFiles(t *testing.T) {
	fs, cold, idx := vfs.NewMem(), newFakeCold(), newFakeIndex()
	o := reclaimOpts(fs, cold, idx)
	s := mustOpen(t, o)
	puts := fillRestore(t, s, rand.New(rand.NewPCG(7, 8)), 400, false)
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	queues := restoreQueues
	want := takeSnapshot(t, s, queues, puts)
	wantTimes := timesAt(t, s, queues, puts)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	bytesBefore, filesBefore := queueFileBytes(t, fs, o.Dir)

	dropKeeping(t, s, fs, cold, idx, 2)
	checkReclaimed(t, s, fs, o.Dir, queues)
	bytesAfter, filesAfter := queueFileBytes(t, fs, o.Dir)
	t.Logf("consumequeue files: %d (%d bytes) before the drops, %d (%d bytes) after", filesBefore, bytesBefore, filesAfter, bytesAfter)
	if filesAfter*3 > filesBefore {
		t.Fatalf("%d of %d consumequeue files left", filesAfter, filesBefore)
	}
	// A Get that starts in the cold range and ends in the local files.
	straddle := 0
	for _, qr := range queues {
		ce := s.queue(qr.topic, qr.id).coldEnd.Load()
		if ce > s.MinQueueOffset(qr.topic, qr.id) && ce < s.MaxQueueOffset(qr.topic, qr.id) {
			r, err := s.Get(context.Background(), GetRequest{Topic: qr.topic, QueueID: qr.id, Offset: ce - 2, MaxMsgs: 4})
			if err != nil || r.Status != Found || len(r.Records) != 4 {
				t.Fatalf("%v: get across coldEnd %d: %v %v", qr, ce, r.Status, err)
			}
			for i, rec := range r.Records {
				d, _, err := DecodeRecord(rec)
				if err != nil || d.QueueOffset != ce-2+int64(i) {
					t.Fatalf("%v: record %d across coldEnd: offset %d (%v)", qr, i, d.QueueOffset, err)
				}
			}
			straddle++
		}
	}
	if straddle < len(queues)/2 {
		t.Fatalf("only %d queues read across their cold/local boundary", straddle)
	}
	reads := idx.reads.Load()
	compareSnapshots(t, want, takeSnapshot(t, s, queues, puts))
	sameTimes(t, wantTimes, timesAt(t, s, queues, puts))
	if idx.reads.Load() == reads && reads == 0 {
		t.Fatal("the cold index was never read")
	}
	entries := func(s *Store) map[string][4]int64 {
		m := map[string][4]int64{}
		for _, q := range queues {
			for i := int64(-1); i <= s.MaxQueueOffset(q.topic, q.id); i++ {
				p, sz, tg, ok, err := s.QueueEntry(q.topic, q.id, i)
				if err != nil {
					t.Fatal(err)
				}
				b := int64(0)
				if ok {
					b = 1
				}
				m[fmt.Sprintf("%v@%d", q, i)] = [4]int64{p, int64(sz), tg, b}
			}
		}
		return m
	}
	wantEntries := entries(s)

	// A crash now, and a clean restart: same answers, files not rebuilt.
	crashed := fs.CrashClone()
	mustClose(t, s)
	for name, f := range map[string]*vfs.Mem{"restart": fs, "crash": crashed} {
		o := reclaimOpts(f, cold, idx)
		s := mustOpen(t, o)
		checkReclaimed(t, s, f, o.Dir, queues)
		if b, n := queueFileBytes(t, f, o.Dir); n > filesAfter+len(queues) {
			t.Fatalf("%s: %d consumequeue files (%d bytes), %d before", name, n, b, filesAfter)
		}
		compareSnapshots(t, want, takeSnapshot(t, s, queues, puts))
		sameTimes(t, wantTimes, timesAt(t, s, queues, puts))
		got := entries(s)
		for k, w := range wantEntries {
			if got[k] != w {
				t.Fatalf("%s: QueueEntry %s: got %v, want %v", name, k, got[k], w)
			}
		}
		// Writes go on after the cold range.
		for _, q := range queues {
			checkPutAtEnd(t, s, q.topic, q.id, name)
		}
		mustClose(t, s)
	}
}

// TestStoreReclaimWithoutColdIndex: a store with a cold reader but no cold
// index (no queue index objects) keeps every consumequeue file.
func TestStoreReclaimWithoutColdIndex(t *testing.T) {
	fs, cold, o, s, puts := openTiered(t, 150)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	_, before := queueFileBytes(t, fs, o.Dir)
	want := takeSnapshot(t, s, []qref{{"A", 0}, {"B", 1}}, puts)
	for segs := s.SealedSegments(); len(segs) > 2; segs = segs[1:] {
		copyAndDrop(t, s, fs, cold, segs[0])
	}
	if _, after := queueFileBytes(t, fs, o.Dir); after != before {
		t.Fatalf("%d consumequeue files before the drops, %d after", before, after)
	}
	if ce := s.queue("A", 0).coldEnd.Load(); ce != 0 {
		t.Fatalf("coldEnd %d without a cold index", ce)
	}
	compareSnapshots(t, want, takeSnapshot(t, s, []qref{{"A", 0}, {"B", 1}}, puts))
	mustClose(t, s)
	if _, err := fs.Stat(filepath.Join(o.Dir, restoreName)); err == nil {
		t.Fatal("a cold state was written without a cold index")
	}
}

// TestStoreReclaimBelowMin: files wholly below a queue's min go, without a
// drop; Get below the min says OffsetTooSmall, at it Found.
func TestStoreReclaimBelowMin(t *testing.T) {
	fs, cold, idx := vfs.NewMem(), newFakeCold(), newFakeIndex()
	o := reclaimOpts(fs, cold, idx)
	s := mustOpen(t, o)
	defer mustClose(t, s)
	for i := range 100 {
		mustPut(t, s, msg("M", 0, fmt.Sprintf("m-%d", i)))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	before, _ := cqFileStarts(t, fs, o.Dir, "M", 0)
	if err := s.RaiseQueueMins([]QueueMin{{Topic: "M", QueueID: 0, Min: 50}}); err != nil {
		t.Fatal(err)
	}
	after, _ := cqFileStarts(t, fs, o.Dir, "M", 0)
	if len(after) == 0 || after[0] != 48 || len(after) >= len(before) {
		t.Fatalf("files at %v before, %v after the min moved to 50", before, after)
	}
	r, err := s.Get(context.Background(), GetRequest{Topic: "M", QueueID: 0, Offset: 49, MaxMsgs: 1})
	if err != nil || r.Status != OffsetTooSmall || r.NextBeginOffset != 50 {
		t.Fatalf("get below min: %v next %d (%v)", r.Status, r.NextBeginOffset, err)
	}
	recs := readQueue(t, s, "M", 0)
	if len(recs) != 50 || recs[0].QueueOffset != 50 || string(recs[0].Body) != "m-50" {
		t.Fatalf("read %d records from the min", len(recs))
	}
}

// TestStoreReclaimWhileReading drops segments (and so reclaims files) under
// concurrent readers of every kind: none sees an error or a different
// answer.
func TestStoreReclaimWhileReading(t *testing.T) {
	fs, cold, idx := vfs.NewMem(), newFakeCold(), newFakeIndex()
	o := reclaimOpts(fs, cold, idx)
	s := mustOpen(t, o)
	defer mustClose(t, s)
	puts := fillRestore(t, s, rand.New(rand.NewPCG(9, 10)), 300, false)
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	q := qref{"A", 1}
	mx := s.MaxQueueOffset(q.topic, q.id)
	want := map[int64]GetResult{}
	wantE := map[int64]int64{}
	for off := int64(0); off < mx; off++ {
		r, err := s.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: off, MaxMsgs: 5})
		if err != nil {
			t.Fatal(err)
		}
		want[off] = r
		p, _, _, _, err := s.QueueEntry(q.topic, q.id, off)
		if err != nil {
			t.Fatal(err)
		}
		wantE[off] = p
	}
	wantEarliest, err := s.EarliestStoreTime(q.topic, q.id)
	if err != nil {
		t.Fatal(err)
	}
	uploadAll(t, s, fs, cold, idx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	for r := range 4 {
		wg.Go(func() {
			for i := 0; i < 1_000_000; i++ {
				select {
				case <-done:
					return
				default:
				}
				off := int64(i*7+r) % mx
				g, err := s.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: off, MaxMsgs: 5})
				if err != nil || g.Status != want[off].Status || len(g.Records) != len(want[off].Records) || g.NextBeginOffset != want[off].NextBeginOffset {
					t.Errorf("get @%d during reclaim: %v next %d (%v), want %v next %d", off, g.Status, g.NextBeginOffset, err, want[off].Status, want[off].NextBeginOffset)
					return
				}
				for k := range g.Records {
					if !bytes.Equal(g.Records[k], want[off].Records[k]) {
						t.Errorf("get @%d during reclaim: record %d differs", off, k)
						return
					}
				}
				p, _, _, _, err := s.QueueEntry(q.topic, q.id, off)
				if err != nil || p != wantE[off] {
					t.Errorf("QueueEntry @%d during reclaim: %d (%v), want %d", off, p, err, wantE[off])
					return
				}
				if e, err := s.EarliestStoreTime(q.topic, q.id); err != nil || e != wantEarliest {
					t.Errorf("EarliestStoreTime during reclaim: %d (%v), want %d", e, err, wantEarliest)
					return
				}
				if _, err := s.QueueOffsetAtPhys(context.Background(), q.topic, q.id, puts[i%len(puts)].PhysOffset); err != nil {
					t.Errorf("QueueOffsetAtPhys during reclaim: %v", err)
					return
				}
				reads.Add(1)
			}
		})
	}
	for segs := s.SealedSegments(); len(segs) > 1; segs = segs[1:] {
		target := reads.Load() + 10
		deadline := time.Now().Add(5 * time.Second)
		for reads.Load() < target && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
		if err := s.DropSegment(segs[0].Base); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if reads.Load() == 0 {
		t.Fatal("no reads ran")
	}
	if s.queue(q.topic, q.id).coldEnd.Load() == 0 {
		t.Fatal("nothing reclaimed")
	}
}

// crashAfter is an injector that, armed, lets n writing operations run,
// then takes a crash clone of mem and fails every operation.
type crashAfter struct {
	mem     *vfs.Mem
	mu      sync.Mutex
	armed   bool
	n       int
	crashed *vfs.Mem
}

var errCrashed = errors.New("crashed")

func (c *crashAfter) MaybeError(op errorfs.Op, path string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed != nil {
		return errCrashed
	}
	if !c.armed || !op.IsWrite() {
		return nil
	}
	if c.n == 0 {
		c.crashed = c.mem.CrashClone()
		return errCrashed
	}
	c.n--
	return nil
}

// TestStoreReclaimCrashAtEveryStep crashes before each write of three
// drops (the segment's removal, the key index file's, the cold state's
// temp file, fsync, rename, directory fsync, each consumequeue file's
// removal): the store recovered from what was durable opens, serves every
// queue offset from its min to its max as before (local files or the cold
// index), never rebuilds a reclaimed file, and reclaims on.
func TestStoreReclaimCrashAtEveryStep(t *testing.T) {
	base, cold, idx := vfs.NewMem(), newFakeCold(), newFakeIndex()
	o := reclaimOpts(base, cold, idx)
	s := mustOpen(t, o)
	puts := fillRestore(t, s, rand.New(rand.NewPCG(11, 12)), 250, false)
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	queues := restoreQueues
	uploadAll(t, s, base, cold, idx)
	// Some reclaimed already: the crash hits a store with a cold state.
	for segs := s.SealedSegments(); len(segs) > 12; segs = segs[1:] {
		if err := s.DropSegment(segs[0].Base); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]byte{}
	bounds := map[qref][2]int64{}
	for _, q := range queues {
		mn, mx := s.MinQueueOffset(q.topic, q.id), s.MaxQueueOffset(q.topic, q.id)
		bounds[q] = [2]int64{mn, mx}
		for off := mn; off < mx; off++ {
			r, err := s.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: off, MaxMsgs: 1})
			if err != nil || r.Status != Found {
				t.Fatalf("%v@%d: %v %v", q, off, r.Status, err)
			}
			want[fmt.Sprintf("%v@%d", q, off)] = r.Records[0]
		}
	}
	_ = puts
	mustClose(t, s)

	check := func(t *testing.T, s *Store, step int) {
		t.Helper()
		for _, q := range queues {
			mn, mx := s.MinQueueOffset(q.topic, q.id), s.MaxQueueOffset(q.topic, q.id)
			if [2]int64{mn, mx} != bounds[q] {
				t.Fatalf("step %d: %v bounds [%d, %d), want %v", step, q, mn, mx, bounds[q])
			}
			for off := mn; off < mx; off += 3 {
				r, err := s.Get(context.Background(), GetRequest{Topic: q.topic, QueueID: q.id, Offset: off, MaxMsgs: 3})
				if err != nil || r.Status != Found {
					t.Fatalf("step %d: %v@%d: %v %v", step, q, off, r.Status, err)
				}
				for k, rec := range r.Records {
					if !bytes.Equal(rec, want[fmt.Sprintf("%v@%d", q, off+int64(k))]) {
						t.Fatalf("step %d: %v@%d: record differs", step, q, off+int64(k))
					}
				}
			}
		}
	}
	steps := 0
	for step := 0; step < 500; step++ {
		mem := base.CrashClone() // the closed store's files, all durable
		inj := &crashAfter{mem: mem}
		o := reclaimOpts(errorfs.Wrap(mem, inj), cold, idx)
		s, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		inj.mu.Lock()
		inj.armed, inj.n = true, step
		inj.mu.Unlock()
		var derr error
		for i := 0; i < 3 && derr == nil; i++ {
			derr = s.DropSegment(s.SealedSegments()[0].Base)
			// A reclaim failure is logged, not returned: the crash shows.
			inj.mu.Lock()
			if inj.crashed != nil && derr == nil {
				derr = errCrashed
			}
			inj.mu.Unlock()
		}
		s.Close()
		inj.mu.Lock()
		crashed := inj.crashed
		inj.mu.Unlock()
		if crashed == nil {
			if derr != nil {
				t.Fatal(derr)
			}
			steps = step
			break
		}
		o.FS = crashed
		r := mustOpen(t, o)
		check(t, r, step)
		checkReclaimed(t, r, crashed, o.Dir, queues)
		// Drop on: reclaim carries on from the recovered state.
		if err := r.DropSegment(r.SealedSegments()[0].Base); err != nil {
			t.Fatalf("step %d: drop after recovery: %v", step, err)
		}
		check(t, r, step)
		checkReclaimed(t, r, crashed, o.Dir, queues)
		mustClose(t, r)
		r = mustOpen(t, o)
		check(t, r, step)
		mustClose(t, r)
	}
	if steps < 10 {
		t.Fatalf("only %d writes in three drops: the crash points missed the reclaim", steps)
	}
	t.Logf("crashed before each of %d writes", steps)
}

// TestStoreReclaimReplica: a slave restored from the tier (Restore.Replica)
// and streamed the master's log reclaims its consumequeue files when it
// drops segments the master's objects cover, and answers as the master.
func TestStoreReclaimReplica(t *testing.T) {
	f := newReplicaFixture(t, 300)
	nseg := len(f.a.SealedSegments())
	u := f.segEnd(t, nseg/4)
	f.upload(t, u)
	fsB := vfs.NewMem()
	o := f.opts(fsB, u)
	r := mustOpen(t, o)
	f.stream(t, r, u, f.a.MaxPhysOffset())
	if err := r.SealActive(); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	restored := map[qref]int64{}
	for _, q := range f.queues {
		restored[q] = r.queue(q.topic, q.id).coldEnd.Load()
	}
	_, before := queueFileBytes(t, fsB, o.Dir)
	u2 := f.segEnd(t, nseg*4/5)
	f.upload(t, u2)
	for _, sg := range r.SealedSegments() {
		if sg.Base+sg.Length > u2 {
			break
		}
		if err := r.DropSegment(sg.Base); err != nil {
			t.Fatal(err)
		}
	}
	_, after := queueFileBytes(t, fsB, o.Dir)
	raised := 0
	for _, q := range f.queues {
		if r.queue(q.topic, q.id).coldEnd.Load() > restored[q] {
			raised++
		}
	}
	t.Logf("replica consumequeue files: %d before the drops, %d after; %d queues reclaimed", before, after, raised)
	if raised < len(restoreQueues) || after >= before {
		t.Fatalf("replica reclaimed %d queues, files %d -> %d", raised, before, after)
	}
	checkReclaimed(t, r, fsB, o.Dir, restoreQueues)
	f.sameAsMaster(t, r)
	mustClose(t, r)
	r = mustOpen(t, o)
	f.sameAsMaster(t, r)
	mustClose(t, r)
}
