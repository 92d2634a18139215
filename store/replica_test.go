package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// replicaFixture is a master store whose log is uploaded up to some point:
// the bucket (cold, idx) holds its segments below that point, with their
// index blobs built late (after the master wrote on past it, as an uploader
// that lags does), and a bucket checkpoint taken at the end.
type replicaFixture struct {
	a      *Store
	fsA    *vfs.Mem
	cold   *fakeCold
	idx    *fakeIndex
	puts   []PutResult
	queues []qref
	ck     map[string]map[int32]QueueRange

	snap   snapshot // the master's, at snapAt
	snapAt int64
}

// newReplicaFixture fills a master: a "Quiet" queue written only at the
// start (absent from later segments: the newest blob carries it as a
// zero-count entry), n records over restoreQueues, then n more with the
// "Late" queue among them, and seals.
func newReplicaFixture(t *testing.T, n int) *replicaFixture {
	t.Helper()
	f := &replicaFixture{fsA: vfs.NewMem(), cold: newFakeCold(), idx: newFakeIndex()}
	f.a = mustOpen(t, tieredOpts(f.fsA, f.cold))
	t.Cleanup(func() { f.a.Close() })
	for i := range 5 {
		f.puts = append(f.puts, mustPut(t, f.a, msg("Quiet", 0, fmt.Sprintf("quiet-%d", i)))...)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	f.puts = append(f.puts, fillReplica(t, f.a, rng, n, false)...)
	f.puts = append(f.puts, fillReplica(t, f.a, rng, n, true)...)
	if err := f.a.SealActive(); err != nil {
		t.Fatal(err)
	}
	f.queues = append(slices.Clone(restoreQueues), qref{"Quiet", 0}, qref{"Late", 0})
	f.ck = map[string]map[int32]QueueRange{}
	for _, q := range f.queues {
		if f.ck[q.topic] == nil {
			f.ck[q.topic] = map[int32]QueueRange{}
		}
		f.ck[q.topic][q.id] = QueueRange{Min: f.a.MinQueueOffset(q.topic, q.id), Max: f.a.MaxQueueOffset(q.topic, q.id)}
	}
	return f
}

// fillReplica is fillRestore with tags codes that follow the TAGS property,
// as the broker's are: a replica computes the codes of the records it is
// streamed from their properties.
func fillReplica(t *testing.T, s *Store, rng *rand.Rand, n int, late bool) []PutResult {
	t.Helper()
	return fillQueues(t, s, rng, n, late, func(m *Message, k int) {
		tag := fmt.Sprintf("t%d", k)
		m.Properties, m.TagsCode = "TAGS\x01"+tag+"\x02", TagsHash(tag)
	})
}

// upload puts the master's sealed segments ending at or below u in the
// bucket, with their index blobs, and returns u if it is a segment's end.
func (f *replicaFixture) upload(t *testing.T, u int64) {
	t.Helper()
	found := u == 0
	for _, sg := range f.a.SealedSegments() {
		if sg.Base+sg.Length > u {
			break
		}
		found = found || sg.Base+sg.Length == u
		blob, err := f.a.BuildSegmentIndex(sg.Base)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.cold.upload(f.fsA, sg); err != nil {
			t.Fatal(err)
		}
		f.idx.mu.Lock()
		f.idx.blobs[sg.Base] = blob
		f.idx.mu.Unlock()
	}
	if !found {
		t.Fatalf("%d is no segment end", u)
	}
}

// segEnd is the end of the master's i-th sealed segment.
func (f *replicaFixture) segEnd(t *testing.T, i int) int64 {
	t.Helper()
	ss := f.a.SealedSegments()
	if i >= len(ss) {
		t.Fatalf("segment %d of %d", i, len(ss))
	}
	return ss[i].Base + ss[i].Length
}

func (f *replicaFixture) opts(fs vfs.FS, u int64) Options {
	o := tieredOpts(fs, f.cold)
	o.ColdIndex = f.idx
	o.Restore = &Restore{Replica: true, CommitLogStart: u, Queues: f.ck}
	return o
}

// masterBytes reads the master's log [from, to) from its segment files.
func (f *replicaFixture) masterBytes(t *testing.T, from, to int64) []byte {
	t.Helper()
	var out []byte
	_, chunks := logChunks(t, f.a, f.fsA, from, to)
	for _, b := range chunks {
		out = append(out, b...)
	}
	if int64(len(out)) != to-from {
		t.Fatalf("master log [%d, %d): read %d bytes", from, to, len(out))
	}
	return out
}

// stream AppendRaws the master's log [from, to) to r, one master segment
// (whole records) per call, as the HA stream would.
func (f *replicaFixture) stream(t *testing.T, r *Store, from, to int64) {
	t.Helper()
	for _, sg := range f.a.LocalSegments() {
		lo, hi := max(from, sg.Base), min(to, sg.Base+sg.Length)
		if lo >= hi {
			continue
		}
		if err := r.AppendRaw(lo, f.masterBytes(t, lo, hi)); err != nil {
			t.Fatalf("AppendRaw(%d, [%d bytes]): %v", lo, hi-lo, err)
		}
	}
	if got := r.MaxPhysOffset(); got != to {
		t.Fatalf("replica ends at %d after streaming up to %d", got, to)
	}
}

// nextAt is each queue's next offset on the master at commitlog offset u,
// from the master's records below u themselves (not from any index).
func (f *replicaFixture) nextAt(t *testing.T, u int64) map[qref]int64 {
	t.Helper()
	m := map[qref]int64{}
	b := f.masterBytes(t, 0, u)
	for p := 0; p < len(b); {
		r, err := parseMeta(b[p:], true)
		if err != nil {
			t.Fatal(err)
		}
		if !notDispatched(r.sysFlag) {
			k := qref{string(r.topic), r.queueID}
			m[k] = max(m[k], r.queueOffset+1)
		}
		p += int(r.size)
	}
	return m
}

// sameAsMaster compares every queue of r with the master: bounds, every
// entry, and every Get, ReadRecord, EarliestStoreTime and OffsetByTime.
func (f *replicaFixture) sameAsMaster(t *testing.T, r *Store) {
	t.Helper()
	for _, q := range f.queues {
		if a, b := f.a.MaxQueueOffset(q.topic, q.id), r.MaxQueueOffset(q.topic, q.id); a != b {
			t.Fatalf("%v: replica MaxQueueOffset %d, master %d", q, b, a)
		}
		if a, b := f.a.MinQueueOffset(q.topic, q.id), r.MinQueueOffset(q.topic, q.id); a != b {
			t.Fatalf("%v: replica MinQueueOffset %d, master %d", q, b, a)
		}
	}
	if a, b := f.a.MaxPhysOffset(), r.MaxPhysOffset(); a != b {
		t.Fatalf("replica MaxPhysOffset %d, master %d", b, a)
	}
	checkQueueEntries(t, f.a, r, f.queues)
	if f.snap.gets == nil || f.snapAt != f.a.MaxPhysOffset() {
		f.snap, f.snapAt = takeSnapshot(t, f.a, f.queues, f.sample()), f.a.MaxPhysOffset()
	}
	compareSnapshots(t, f.snap, takeSnapshot(t, r, f.queues, f.sample()))
}

// sample is every 5th put and the last ones: ReadRecord and OffsetByTime
// are checked at their offsets and store times (every queue offset is
// checked by Get and QueueEntry).
func (f *replicaFixture) sample() []PutResult {
	var out []PutResult
	for i, p := range f.puts {
		if i%5 == 0 || i >= len(f.puts)-len(f.queues) {
			out = append(out, p)
		}
	}
	return out
}

// checkRestoredAt checks a replica just restored at u: its log is empty at
// u, and every queue's next offset is the master's at u.
func (f *replicaFixture) checkRestoredAt(t *testing.T, r *Store, u int64) {
	t.Helper()
	if got := r.MaxPhysOffset(); got != u {
		t.Fatalf("replica MaxPhysOffset %d, want %d", got, u)
	}
	if got := r.LocalMinPhysOffset(); got != u {
		t.Fatalf("replica LocalMinPhysOffset %d, want %d", got, u)
	}
	want := f.nextAt(t, u)
	for _, q := range f.queues {
		if got := r.MaxQueueOffset(q.topic, q.id); got != want[q] {
			t.Fatalf("%v: replica restored at %d has next offset %d, the master had %d there (checkpoint says %d)",
				q, u, got, want[q], f.ck[q.topic][q.id].Max)
		}
	}
}

func TestStoreReplicaRestoreAndStream(t *testing.T) {
	f := newReplicaFixture(t, 300)
	nseg := len(f.a.SealedSegments())
	if nseg < 20 {
		t.Fatalf("want >= 20 segments, have %d", nseg)
	}
	u := f.segEnd(t, nseg*2/5)
	f.upload(t, u)
	// The fixture must tell a right restore from a wrong one: the
	// checkpoint's maxima are past u, Quiet is absent from the segment
	// ending at u, and Late starts after u.
	want := f.nextAt(t, u)
	for _, q := range restoreQueues {
		if f.ck[q.topic][q.id].Max <= want[q] || want[q] == 0 {
			t.Fatalf("%v: next %d at u, %d at the checkpoint", q, want[q], f.ck[q.topic][q.id].Max)
		}
	}
	last, err := DecodeSegmentIndex(f.idx.blobs[f.a.SealedSegments()[nseg*2/5].Base])
	if err != nil {
		t.Fatal(err)
	}
	if i, ok := last.Find("Quiet", 0); !ok || last.Queues[i].Count != 0 {
		t.Fatalf("Quiet should be a zero-count entry of the newest blob (%v)", ok)
	}
	if want[qref{"Late", 0}] != 0 || f.ck["Late"][0].Max == 0 {
		t.Fatal("Late should start after u")
	}

	fsB := vfs.NewMem()
	o := f.opts(fsB, u)
	f.cold.reads.Store(0)
	b := mustOpen(t, o)
	if n := f.cold.reads.Load(); n != 0 {
		t.Fatalf("replica restore read the cold commitlog %d times", n)
	}
	if n := f.idx.reads.Load(); n != 1 {
		t.Fatalf("replica restore read %d index blobs, want 1", n)
	}
	f.checkRestoredAt(t, b, u)

	// A record numbered below a queue's restored end does not continue
	// this log: refused, nothing written.
	first := f.masterBytes(t, u, f.a.MaxPhysOffset())
	size := binary.BigEndian.Uint32(first)
	rec := slices.Clone(first[:size])
	m, err := parseMeta(rec, true)
	if err != nil {
		t.Fatal(err)
	}
	if m.queueOffset != want[qref{string(m.topic), m.queueID}] {
		t.Fatalf("first record past u has queue offset %d, want %d", m.queueOffset, want[qref{string(m.topic), m.queueID}])
	}
	binary.BigEndian.PutUint64(rec[20:], uint64(m.queueOffset-1))
	if err := b.AppendRaw(u, rec); !errors.Is(err, ErrOffsetMismatch) {
		t.Fatalf("AppendRaw of a record below the restored end: %v", err)
	}
	if b.MaxPhysOffset() != u {
		t.Fatalf("refused AppendRaw moved the log to %d", b.MaxPhysOffset())
	}

	// The first AppendRaw at exactly u, then the rest: the replica equals
	// the master, below u through the tier.
	f.stream(t, b, u, f.a.MaxPhysOffset())
	f.sameAsMaster(t, b)

	// A restart keeps it (Restore is ignored: the replica has a log that
	// reaches u), and the stream continues after it.
	mustClose(t, b)
	b = mustOpen(t, o)
	defer func() { b.Close() }()
	f.sameAsMaster(t, b)
	end := f.a.MaxPhysOffset()
	for i, q := range f.queues {
		f.puts = append(f.puts, mustPut(t, f.a, msg(q.topic, q.id, fmt.Sprintf("after-restart-%d", i)))...)
	}
	f.stream(t, b, end, f.a.MaxPhysOffset())
	f.sameAsMaster(t, b)

	// A crash of the replica (nothing flushed since the stream) recovers
	// the same state.
	crashed := fsB.CrashClone()
	c := mustOpen(t, f.opts(crashed, u))
	defer mustClose(t, c)
	if c.MaxPhysOffset() < u {
		t.Fatalf("crashed replica ends at %d, below u %d", c.MaxPhysOffset(), u)
	}
	f.stream(t, c, c.MaxPhysOffset(), f.a.MaxPhysOffset())
	f.sameAsMaster(t, c)
}

func TestStoreReplicaLaggingDiskSkipsGap(t *testing.T) {
	f := newReplicaFixture(t, 300)
	nseg := len(f.a.SealedSegments())
	u1 := f.segEnd(t, nseg/4)
	f.upload(t, u1)
	fsB := vfs.NewMem()
	b := mustOpen(t, f.opts(fsB, u1))
	f.checkRestoredAt(t, b, u1)
	// The replica follows to l, part way into a segment, then goes down.
	l := f.segEnd(t, nseg/2) - 1
	for _, p := range f.puts {
		if p.PhysOffset > f.segEnd(t, nseg/2-1) {
			l = p.PhysOffset
			break
		}
	}
	f.stream(t, b, u1, l)
	crashed := fsB.CrashClone() // the replica dies instead (nothing flushed since its restore)
	mustClose(t, b)

	// Meanwhile the master uploads past l. The replica, opened with the
	// new restore point, drops its local log and restores there.
	u2 := f.segEnd(t, nseg*3/4)
	f.upload(t, u2)
	f.cold.reads.Store(0)
	f.idx.reads.Store(0)
	o := f.opts(fsB, u2)
	b = mustOpen(t, o)
	defer func() { b.Close() }()
	if n := f.cold.reads.Load(); n != 0 {
		t.Fatalf("skipping the gap read the cold commitlog %d times", n)
	}
	f.checkRestoredAt(t, b, u2)
	if segs := b.LocalSegments(); len(segs) != 1 || segs[0].Base != u2 || segs[0].Length != 0 {
		t.Fatalf("local segments after the skip: %+v", segs)
	}
	f.stream(t, b, u2, f.a.MaxPhysOffset())
	f.sameAsMaster(t, b)
	mustClose(t, b)
	b = mustOpen(t, o)
	f.sameAsMaster(t, b)

	// The same from the crashed disk: recovery, then the skip.
	c := mustOpen(t, f.opts(crashed, u2))
	f.checkRestoredAt(t, c, u2)
	f.stream(t, c, u2, f.a.MaxPhysOffset())
	f.sameAsMaster(t, c)
	mustClose(t, c)

	// A replica that reaches the restore point keeps its local log.
	o3 := f.opts(fsB, f.segEnd(t, nseg*3/4-1))
	mustClose(t, b)
	b = mustOpen(t, o3)
	if got := b.LocalMinPhysOffset(); got != u2 {
		t.Fatalf("replica past the restore point lost its local log: local min %d, want %d", got, u2)
	}
	f.sameAsMaster(t, b)
}

func TestStoreReplicaRestoreErrors(t *testing.T) {
	f := newReplicaFixture(t, 100)
	u := f.segEnd(t, 3)
	f.upload(t, u)
	// The blob of the segment ending at the restore point is missing.
	o := f.opts(vfs.NewMem(), f.segEnd(t, 4))
	if _, err := Open(o); err == nil {
		t.Fatal("replica restore past the indexed segments opened")
	}
	// A restore point inside a segment.
	o = f.opts(vfs.NewMem(), u-1)
	if _, err := Open(o); err == nil {
		t.Fatal("replica restore inside a segment opened")
	}
	o = f.opts(vfs.NewMem(), u)
	o.ColdIndex = nil
	if _, err := Open(o); err == nil {
		t.Fatal("replica restore without a cold index opened")
	}
	// Nothing uploaded: the replica starts at 0 and follows the whole log.
	o = f.opts(vfs.NewMem(), 0)
	o.ColdIndex, o.Cold = nil, nil
	b := mustOpen(t, o)
	defer mustClose(t, b)
	f.checkRestoredAt(t, b, 0)
	f.stream(t, b, 0, f.a.MaxPhysOffset())
	f.sameAsMaster(t, b)
}

// TestStoreAppendRawKeepsMasterNumbering: a record whose QUEUEOFFSET is
// ahead of the queue's next offset keeps it (blank entries fill the gap).
func TestStoreAppendRawKeepsMasterNumbering(t *testing.T) {
	src := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, src)
	var recs [][]byte
	for i := range 3 {
		res := mustPut(t, src, msg("T", 0, fmt.Sprintf("m%d", i)))
		raw, err := src.ReadRecord(res[0].PhysOffset)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, slices.Clone(raw))
	}
	binary.BigEndian.PutUint64(recs[1][20:], 5)
	binary.BigEndian.PutUint64(recs[2][20:], 6)
	dst := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, dst)
	pos := int64(0)
	for _, r := range recs {
		if err := dst.AppendRaw(pos, r); err != nil {
			t.Fatal(err)
		}
		pos += int64(len(r))
	}
	if mn, mx := dst.MinQueueOffset("T", 0), dst.MaxQueueOffset("T", 0); mn != 0 || mx != 7 {
		t.Fatalf("queue [%d, %d), want [0, 7)", mn, mx)
	}
	for i, want := range []int64{0, -1, -1, -1, -1, int64(len(recs[0])), int64(len(recs[0]) + len(recs[1]))} {
		phys, _, _, ok, err := dst.QueueEntry("T", 0, int64(i))
		if err != nil || ok != (want >= 0) || ok && phys != want {
			t.Fatalf("entry %d: %d %v %v, want %d", i, phys, ok, err, want)
		}
	}
	r, err := dst.Get(context.Background(), GetRequest{Topic: "T", QueueID: 0, Offset: 1, MaxMsgs: 1})
	if err != nil || r.Status != Found || len(r.Records) != 1 || string(r.Records[0]) != string(recs[1]) {
		t.Fatalf("Get across the gap: %v %v", r.Status, err)
	}
}

// streamLog feeds src's local log [from, to) (on fs) to dst by AppendRaw,
// as the HA stream does.
func streamLog(t *testing.T, src *Store, fs vfs.FS, dst *Store, from, to int64) {
	t.Helper()
	starts, chunks := logChunks(t, src, fs, from, to)
	for i, b := range chunks {
		if err := dst.AppendRaw(starts[i], b); err != nil {
			t.Fatalf("AppendRaw(%d): %v", starts[i], err)
		}
	}
}

// logChunks reads s's local log [from, to) from its segment files on fs,
// one chunk (whole records) per segment, each with where it starts.
func logChunks(t *testing.T, s *Store, fs vfs.FS, from, to int64) (starts []int64, chunks [][]byte) {
	t.Helper()
	for _, sg := range s.LocalSegments() {
		lo, hi := max(from, sg.Base), min(to, sg.Base+sg.Length)
		if lo >= hi {
			continue
		}
		fh, err := fs.OpenFile(sg.Path, os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, hi-lo)
		err = readFull(fh, b, lo-sg.Base)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		starts, chunks = append(starts, lo), append(chunks, b)
	}
	return starts, chunks
}
