package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// fakeColdKeys serves copies of key index files taken before their
// segments were dropped, as the broker's tier does.
type fakeColdKeys struct {
	mu       sync.Mutex
	files    map[int64][]byte
	storedBy int64 // every ref's StoredBy
	reads    int
}

func (c *fakeColdKeys) KeyIndexes(context.Context) ([]KeyIndexRef, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []KeyIndexRef
	for b := range c.files {
		out = append(out, KeyIndexRef{Base: b, StoredBy: c.storedBy})
	}
	return out, nil
}

func (c *fakeColdKeys) ReadKeyIndex(_ context.Context, base int64, p []byte, off int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	b, ok := c.files[base]
	if !ok || off+int64(len(p)) > int64(len(b)) {
		return io.ErrUnexpectedEOF
	}
	copy(p, b[off:])
	return nil
}

// upload copies the key index file of sealed segment base.
func (c *fakeColdKeys) upload(t *testing.T, s *Store, base int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, size, err := s.OpenKeyIndex(ctx, base)
	if err != nil {
		t.Fatalf("key index of %d: %v", base, err)
	}
	defer f.Close()
	b := make([]byte, size)
	if err := readFull(f, b, 0); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.files[base] = b
	c.mu.Unlock()
}

func keyMsg(topic string, i int, keys string) Message {
	m := msg(topic, int32(i%2), fmt.Sprintf("body-%04d", i))
	m.Properties = fmt.Sprintf("KEYS\x01%s\x02UNIQ_KEY\x01U%04d\x02TAGS\x01t\x02", keys, i)
	return m
}

// queryBodies runs q and returns the bodies found, in order.
func queryBodies(t *testing.T, s *Store, q KeyQuery) []string {
	t.Helper()
	if q.End == 0 {
		q.End = math.MaxInt64
	}
	res, err := s.QueryByKey(context.Background(), q)
	if err != nil {
		t.Fatalf("query %+v: %v", q, err)
	}
	var out []string
	var last int64 = -1
	for _, rec := range res.Records {
		r, _, err := DecodeRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		if r.PhysOffset <= last {
			t.Fatalf("records not in commitlog order: %d after %d", r.PhysOffset, last)
		}
		last = r.PhysOffset
		out = append(out, string(r.Body))
	}
	return out
}

func wantBodies(t *testing.T, what string, got []string, idx ...int) {
	t.Helper()
	var want []string
	for _, i := range idx {
		want = append(want, fmt.Sprintf("body-%04d", i))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// fillKeys writes n messages to topic "K" (and every 10th to "Other" with
// the same keys): message i has keys "all", "m<i%5>" and "only<i>".
func fillKeys(t *testing.T, s *Store, n int) []PutResult {
	t.Helper()
	var res []PutResult
	for i := 0; i < n; i++ {
		topic := "K"
		if i%10 == 9 {
			topic = "Other"
		}
		res = append(res, mustPut(t, s, keyMsg(topic, i, fmt.Sprintf("all m%d only%d", i%5, i)))...)
	}
	return res
}

func keyOpts(fs vfs.FS) Options {
	o := testOpts(fs)
	o.SegmentSize = 4 << 10 // many segments: active, sealed in memory, sealed on file
	o.MaxMessageSize = 2 << 10
	return o
}

func TestStoreKeyIndexLocal(t *testing.T) {
	s := mustOpen(t, keyOpts(vfs.NewMem()))
	defer mustClose(t, s)
	fillKeys(t, s, 200)
	if n := len(s.LocalSegments()); n < 5 {
		t.Fatalf("want several segments, have %d", n)
	}
	wantBodies(t, "only one", queryBodies(t, s, KeyQuery{Topic: "K", Key: "only7", MaxNum: 32}), 7)
	wantBodies(t, "other topic", queryBodies(t, s, KeyQuery{Topic: "Other", Key: "only19", MaxNum: 32}), 19)
	wantBodies(t, "wrong topic", queryBodies(t, s, KeyQuery{Topic: "K", Key: "only19", MaxNum: 32}))
	wantBodies(t, "unknown key", queryBodies(t, s, KeyQuery{Topic: "K", Key: "nope", MaxNum: 32}))
	// Newest maxNum, returned in commitlog order.
	var newest []int
	for i := 199; len(newest) < 4; i-- {
		if i%5 == 3 && i%10 != 9 {
			newest = append([]int{i}, newest...)
		}
	}
	wantBodies(t, "maxNum 4", queryBodies(t, s, KeyQuery{Topic: "K", Key: "m3", MaxNum: 4}), newest...)
	wantBodies(t, "maxNum 0", queryBodies(t, s, KeyQuery{Topic: "K", Key: "m3", MaxNum: 0}))
	// UNIQ_KEY: found by a plain and a unique-key query; a KEYS value is not
	// a unique key.
	wantBodies(t, "uniq key", queryBodies(t, s, KeyQuery{Topic: "K", Key: "U0042", MaxNum: 32}), 42)
	wantBodies(t, "uniq key flagged", queryBodies(t, s, KeyQuery{Topic: "K", Key: "U0042", UniqueKey: true, MaxNum: 32}), 42)
	wantBodies(t, "KEYS value as uniq key", queryBodies(t, s, KeyQuery{Topic: "K", Key: "only42", UniqueKey: true, MaxNum: 32}))
}

func TestStoreKeyIndexTimeBounds(t *testing.T) {
	s := mustOpen(t, keyOpts(vfs.NewMem()))
	defer mustClose(t, s)
	var ts []int64
	for i := 0; i < 6; i++ {
		res := mustPut(t, s, keyMsg("K", i, "same"))
		ts = append(ts, res[0].StoreTimestamp)
		// Distinct store times: wait for the clock to move.
		deadline := time.Now().Add(time.Second)
		for time.Now().UnixMilli() <= ts[i] && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		if i == 2 {
			if err := s.SealActive(); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantBodies(t, "all", queryBodies(t, s, KeyQuery{Topic: "K", Key: "same", MaxNum: 32}), 0, 1, 2, 3, 4, 5)
	wantBodies(t, "[ts1, ts4]", queryBodies(t, s, KeyQuery{Topic: "K", Key: "same", MaxNum: 32, Begin: ts[1], End: ts[4]}), 1, 2, 3, 4)
	wantBodies(t, "[ts4, ts4]", queryBodies(t, s, KeyQuery{Topic: "K", Key: "same", MaxNum: 32, Begin: ts[4], End: ts[4]}), 4)
	wantBodies(t, "before", queryBodies(t, s, KeyQuery{Topic: "K", Key: "same", MaxNum: 32, Begin: 1, End: ts[0] - 1}))
	wantBodies(t, "end < begin", queryBodies(t, s, KeyQuery{Topic: "K", Key: "same", MaxNum: 32, Begin: ts[3], End: ts[2]}))
	wantBodies(t, "newest 2 in [ts0, ts3]", queryBodies(t, s, KeyQuery{Topic: "K", Key: "same", MaxNum: 2, Begin: ts[0], End: ts[3]}), 2, 3)
}

// TestStoreKeyIndexCollisions: with every key hashing alike, each
// candidate is read and compared, so only the right records come back.
func TestStoreKeyIndexCollisions(t *testing.T) {
	o := keyOpts(vfs.NewMem())
	o.keyHash = func(string, string) uint32 { return 7 }
	s := mustOpen(t, o)
	fillKeys(t, s, 120)
	check := func(when string) {
		wantBodies(t, when+": only33", queryBodies(t, s, KeyQuery{Topic: "K", Key: "only33", MaxNum: 32}), 33)
		wantBodies(t, when+": only39 in K", queryBodies(t, s, KeyQuery{Topic: "K", Key: "only39", MaxNum: 32}))
		wantBodies(t, when+": m2 newest 3", queryBodies(t, s, KeyQuery{Topic: "K", Key: "m2", MaxNum: 3}), 107, 112, 117)
	}
	check("live")
	mustClose(t, s)
	s = mustOpen(t, o) // the files, and the last segment rebuilt from its records
	defer mustClose(t, s)
	check("reopened")
}

// TestStoreKeyIndexReopen: the index survives a restart, and a lost key
// index file (or one that no longer matches its segment) is rebuilt from
// the segment's records.
func TestStoreKeyIndexReopen(t *testing.T) {
	fs := vfs.NewMem()
	o := keyOpts(fs)
	s := mustOpen(t, o)
	fillKeys(t, s, 150)
	mustClose(t, s)
	names, err := fs.ReadDir("/data/store/keyindex")
	if err != nil || len(names) < 3 {
		t.Fatalf("key index files: %v %v", names, err)
	}
	// Lose one, damage another, leave a temp file behind.
	if err := fs.Remove("/data/store/keyindex/" + names[0]); err != nil {
		t.Fatal(err)
	}
	f, err := fs.OpenFile("/data/store/keyindex/"+names[1], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("garbage!"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := vfs.WriteFileAtomic(fs, "/data/store/keyindex/junk.tmp", []byte("x")); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, o)
	defer mustClose(t, s)
	for i := 0; i < 150; i++ {
		topic := "K"
		if i%10 == 9 {
			topic = "Other"
		}
		wantBodies(t, fmt.Sprintf("only%d", i), queryBodies(t, s, KeyQuery{Topic: topic, Key: fmt.Sprintf("only%d", i), MaxNum: 32}), i)
	}
	fillKeys(t, s, 3) // new records after the reopen
	wantBodies(t, "only1 after reopen", queryBodies(t, s, KeyQuery{Topic: "K", Key: "only1", MaxNum: 32}), 1, 1)
	if _, err := fs.Stat("/data/store/keyindex/junk.tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover file kept: %v", err)
	}
}

// TestStoreKeyIndexCold: segments dropped after upload are searched
// through the tier's key indexes (ColdKeys); a query straddles both; a
// raised floor hides what it covers.
func TestStoreKeyIndexCold(t *testing.T) {
	fs, cold := vfs.NewMem(), newFakeCold()
	keys := &fakeColdKeys{files: map[int64][]byte{}}
	o := keyOpts(fs)
	o.Cold, o.ColdKeys = cold, keys
	s := mustOpen(t, o)
	defer mustClose(t, s)
	res := fillKeys(t, s, 200)
	segs := s.SealedSegments()
	half := len(segs) / 2
	for _, sg := range segs[:half] {
		keys.upload(t, s, sg.Base)
		copyAndDrop(t, s, fs, cold, sg)
	}
	if _, err := fs.Stat("/data/store/keyindex/" + kixName(segs[0].Base)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a dropped segment's key index file is kept: %v", err)
	}
	var all []int
	for i := 0; i < 200; i++ {
		if i%5 == 1 && i%10 != 9 {
			all = append(all, i)
		}
	}
	wantBodies(t, "m1 across the boundary", queryBodies(t, s, KeyQuery{Topic: "K", Key: "m1", MaxNum: 64}), all...)
	wantBodies(t, "cold only", queryBodies(t, s, KeyQuery{Topic: "K", Key: "only0", MaxNum: 32}), 0)
	// Raise the floor past the first dropped segment: its records are gone.
	if err := s.SetMinPhysOffset(segs[1].Base); err != nil {
		t.Fatal(err)
	}
	got := queryBodies(t, s, KeyQuery{Topic: "K", Key: "m1", MaxNum: 64})
	if len(got) == 0 || len(got) >= len(all) || got[len(got)-1] != fmt.Sprintf("body-%04d", all[len(all)-1]) {
		t.Fatalf("after the floor: %v", got)
	}
	wantBodies(t, "below the floor", queryBodies(t, s, KeyQuery{Topic: "K", Key: "only0", MaxNum: 32}))

	// A tier that says its segments were all stored by some time: a query
	// starting after it reads none of their key indexes.
	cold1 := -1 // a message of topic K in segs[1]: cold, above the floor
	for i, r := range res {
		if i%10 != 9 && r.PhysOffset >= segs[1].Base && r.PhysOffset < segs[1].Base+segs[1].Length {
			cold1 = i
			break
		}
	}
	if cold1 < 0 || half < 2 {
		t.Fatalf("no message of K in the second segment (%d dropped)", half)
	}
	key := fmt.Sprintf("only%d", cold1)
	keys.mu.Lock()
	keys.storedBy, keys.reads = 1000, 0
	keys.mu.Unlock()
	wantBodies(t, key+" (cold), from after StoredBy", queryBodies(t, s, KeyQuery{Topic: "K", Key: key, MaxNum: 32, Begin: 1001}))
	if keys.reads != 0 {
		t.Fatalf("%d key index reads for segments stored before the query's start", keys.reads)
	}
	wantBodies(t, key+" (cold), from StoredBy", queryBodies(t, s, KeyQuery{Topic: "K", Key: key, MaxNum: 32, Begin: 1000}), cold1)
}

// TestStoreKeyIndexBounded: a segment also seals when its key index
// reaches the segment size in memory.
func TestStoreKeyIndexBounded(t *testing.T) {
	o := testOpts(vfs.NewMem())
	o.SegmentSize = 64 << 10
	s := mustOpen(t, o)
	defer mustClose(t, s)
	keys := ""
	for i := 0; i < 200; i++ {
		keys += fmt.Sprintf("k%d ", i)
	}
	for i := 0; i < 60; i++ {
		mustPut(t, s, keyMsg("K", i, keys))
	}
	s.kix.mu.Lock()
	for base, ks := range s.kix.mu.segs {
		if ks.mem != nil && ks.mem.n.Load()*keyIndexMemEntry > o.SegmentSize+201*keyIndexMemEntry {
			t.Errorf("segment %d holds %d entries in memory", base, ks.mem.n.Load())
		}
	}
	s.kix.mu.Unlock()
	if n := len(s.LocalSegments()); n < 3 {
		t.Fatalf("%d segments: the key index did not seal any early", n)
	}
	wantBodies(t, "k150", queryBodies(t, s, KeyQuery{Topic: "K", Key: "k150", MaxNum: 2}), 58, 59)
}

// TestStoreKeyIndexAppendRaw: a replica indexes what it appends.
func TestStoreKeyIndexAppendRaw(t *testing.T) {
	src := mustOpen(t, keyOpts(vfs.NewMem()))
	defer mustClose(t, src)
	fillKeys(t, src, 60)
	dst := mustOpen(t, keyOpts(vfs.NewMem()))
	defer mustClose(t, dst)
	b := make([]byte, src.MaxPhysOffset())
	if err := src.readLog(context.Background(), b, 0); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(b); {
		_, n, err := DecodeRecord(b[off:])
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.AppendRaw(int64(off), b[off:off+n]); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	wantBodies(t, "replica", queryBodies(t, dst, KeyQuery{Topic: "K", Key: "m4", MaxNum: 3}), 34, 44, 54)
}

// TestStoreKeyIndexDamagedSegment: a sealed segment with a damaged record
// and no key index file is indexed up to the damage, so queries (and the
// upload waiting for the file) do not wait for ever.
func TestStoreKeyIndexDamagedSegment(t *testing.T) {
	fs := vfs.NewMem()
	o := keyOpts(fs)
	s := mustOpen(t, o)
	res := fillKeys(t, s, 60)
	mustClose(t, s)
	// Damage message 30's magic; lose its segment's key index file.
	var seg int64
	for _, sg := range s.LocalSegments() {
		if sg.Base <= res[30].PhysOffset && res[30].PhysOffset < sg.Base+sg.Length {
			seg = sg.Base
		}
	}
	if seg == 0 || res[28].PhysOffset < seg {
		t.Skip("message 30 starts its segment; the test wants one before it in the same segment")
	}
	f, err := fs.OpenFile(fmt.Sprintf("/data/store/commitlog/%020d", seg), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0, 0, 0, 0}, res[30].PhysOffset-seg+4); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := fs.Remove("/data/store/keyindex/" + kixName(seg)); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, o)
	defer mustClose(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := s.OpenKeyIndex(ctx, seg); err != nil {
		t.Fatalf("key index of the damaged segment: %v", err)
	}
	wantBodies(t, "only28, before the damage", queryBodies(t, s, KeyQuery{Topic: "K", Key: "only28", MaxNum: 32}), 28)
	// Records after the damage in its segment are not found; those of a
	// later segment are.
	wantBodies(t, "only31, after the damage", queryBodies(t, s, KeyQuery{Topic: "K", Key: "only31", MaxNum: 32}))
	if s.LocalSegments()[len(s.LocalSegments())-1].Base <= res[58].PhysOffset {
		wantBodies(t, "only58, in the last segment", queryBodies(t, s, KeyQuery{Topic: "K", Key: "only58", MaxNum: 32}), 58)
	}
}

// BenchmarkStoreKeyIndexAdd is the writer's cost per record: find the
// keys in the properties, hash them, append the entries (a client's
// UNIQ_KEY, and with keys=2 two KEYS values too).
//
//	go test ./store -run XXX -bench KeyIndexAdd
func BenchmarkStoreKeyIndexAdd(b *testing.B) {
	for _, c := range []struct{ name, props string }{
		{"uniq", "TAGS\x01a\x02UNIQ_KEY\x017F0000010001000000000000000000AB\x02WAIT\x01true\x02"},
		{"keys=2+uniq", "TAGS\x01a\x02KEYS\x01order-12345 customer-77\x02UNIQ_KEY\x017F0000010001000000000000000000AB\x02WAIT\x01true\x02"},
	} {
		b.Run(c.name, func(b *testing.B) {
			k := &keyIndex{hash: keyHash}
			k.mu.segs = map[int64]*kixSeg{}
			sg := &segment{base: 0}
			b.ReportAllocs()
			i := int64(0)
			for b.Loop() {
				if i%(1<<20) == 0 {
					k.act = nil // a new segment now and then: memory stays bounded
				}
				k.addLocked(sg, "BenchTopic", c.props, i*1100, 1700000000000+i)
				k.publishLocked() // a round per record: single-message Puts
				i++
			}
		})
	}
}

// TestStoreKeyIndexCrash: after a crash (only synced bytes survive) the
// key index of what was recovered is rebuilt from the records: every
// flushed message is found by its key, and none that recovery dropped.
func TestStoreKeyIndexCrash(t *testing.T) {
	fs := vfs.NewMem()
	o := keyOpts(fs)
	s := mustOpen(t, o)
	fillKeys(t, s, 100)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 110; i++ { // not flushed: may be lost
		mustPut(t, s, keyMsg("K", i, fmt.Sprintf("all m%d only%d", i%5, i)))
	}
	crashed := fs.CrashClone()
	s.Close()
	s2 := mustOpen(t, keyOpts(crashed))
	defer mustClose(t, s2)
	for i := 0; i < 100; i++ {
		topic := "K"
		if i%10 == 9 {
			topic = "Other"
		}
		wantBodies(t, fmt.Sprintf("only%d after the crash", i), queryBodies(t, s2, KeyQuery{Topic: topic, Key: fmt.Sprintf("only%d", i), MaxNum: 32}), i)
	}
	end := s2.MaxPhysOffset()
	res, err := s2.QueryByKey(context.Background(), KeyQuery{Topic: "K", Key: "all", MaxNum: 64, End: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range res.Records {
		r, _, _ := DecodeRecord(rec)
		if r.PhysOffset >= end {
			t.Fatalf("a record at %d past the recovered end %d", r.PhysOffset, end)
		}
	}
}
