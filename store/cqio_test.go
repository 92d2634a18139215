package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

// TestGetPreadDoesNotStallPuts (issue 9 item 10): while a Get of queue A is
// blocked inside its consumequeue pread, a Put to A and a Put to another
// queue both complete; once the pread is released the Get returns the
// right records.
func TestGetPreadDoesNotStallPuts(t *testing.T) {
	b := newOpBlocker(errorfs.OpFileReadAt, "/consumequeue/A/0/")
	s := mustOpen(t, testOpts(errorfs.Wrap(vfs.NewMem(), b)))
	defer mustClose(t, s)
	defer b.unblock() // before Close, also when the test fails
	var want []PutResult
	for i := range 10 {
		want = append(want, mustPut(t, s, msg("A", 0, fmt.Sprintf("a%d", i)))...)
	}
	if err := s.Flush(); err != nil { // the entries are in the file now
		t.Fatal(err)
	}

	b.armed.Store(true)
	type getRes struct {
		res GetResult
		err error
	}
	got := make(chan getRes, 1)
	go func() {
		res, err := s.Get(context.Background(), GetRequest{Topic: "A", QueueID: 0, Offset: 0, MaxMsgs: 32})
		got <- getRes{res, err}
	}()
	select {
	case <-b.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the Get never reached its consumequeue pread")
	}

	puts := make(chan error, 2)
	for _, m := range []Message{msg("A", 0, "during"), msg("B", 0, "during")} {
		go func() {
			_, err := s.Put(context.Background(), []Message{m})
			puts <- err
		}()
	}
	deadline := time.After(10 * time.Second)
	for range 2 {
		select {
		case err := <-puts:
			if err != nil {
				t.Fatalf("put during the blocked pread: %v", err)
			}
		case <-deadline:
			t.Fatal("a Put waited for a Get's consumequeue pread (the write path waits on a lock held across I/O)")
		}
	}

	b.unblock()
	r := <-got
	if r.err != nil {
		t.Fatalf("get: %v", r.err)
	}
	if r.res.Status != Found || len(r.res.Records) < len(want) {
		t.Fatalf("get: %v with %d records, want FOUND with at least %d", r.res.Status, len(r.res.Records), len(want))
	}
	for i, w := range want {
		if phys := int64(binary.BigEndian.Uint64(r.res.Records[i][offPhysOffset:])); phys != w.PhysOffset {
			t.Fatalf("record %d is at %d, want %d", i, phys, w.PhysOffset)
		}
	}
}

// opBlocker is an errorfs.Injector that, once armed, parks the first op
// of its kind on a path containing sub until unblock (which is idempotent:
// defer it before Close so a failing test does not hang).
type opBlocker struct {
	op      errorfs.Op
	sub     string
	armed   atomic.Bool
	entered chan struct{} // receives once the parked op is inside
	release chan struct{}
	once    sync.Once
}

func newOpBlocker(op errorfs.Op, sub string) *opBlocker {
	return &opBlocker{op: op, sub: sub, entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (b *opBlocker) MaybeError(op errorfs.Op, path string) error {
	if op == b.op && strings.Contains(path, b.sub) && b.armed.CompareAndSwap(true, false) {
		b.entered <- struct{}{}
		<-b.release
	}
	return nil
}

func (b *opBlocker) unblock() { b.once.Do(func() { close(b.release) }) }

// countFS counts the consumequeue files open at once (and the peak).
type countFS struct {
	vfs.FS
	open, peak, opens atomic.Int64
}

func (c *countFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.Contains(name, "/consumequeue/") {
		return f, err
	}
	c.opens.Add(1)
	n := c.open.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	return &countFile{File: f, c: c}, nil
}

type countFile struct {
	vfs.File
	c      *countFS
	closed atomic.Bool
}

func (f *countFile) Close() error {
	if f.closed.CompareAndSwap(false, true) {
		f.c.open.Add(-1)
	}
	return f.File.Close()
}

// TestRecoverManyQueuesBoundedFiles (issue 9 item 7): a store with 5
// topics of 1,024 queues, each holding entries, reopens with at most
// MaxOpenQueueFiles (default 1,024) consumequeue files open at once, and
// every queue still reads its entries and takes new ones.
func TestRecoverManyQueuesBoundedFiles(t *testing.T) {
	const topics, queues = 5, 1024
	fs := &countFS{FS: vfs.NewMem()}
	o := testOpts(fs)
	o.SegmentSize = 4 << 20
	s := mustOpen(t, o)
	phys := map[string]int64{}
	for ti := range topics {
		topic := fmt.Sprintf("T%d", ti)
		batch := make([]Message, queues)
		for qi := range queues {
			batch[qi] = msg(topic, int32(qi), "m")
		}
		for i, r := range mustPut(t, s, batch...) {
			phys[fmt.Sprintf("%s/%d", topic, i)] = r.PhysOffset
		}
	}
	mustClose(t, s)
	if fs.open.Load() != 0 {
		t.Fatalf("%d consumequeue files still open after Close", fs.open.Load())
	}

	fs.peak.Store(0)
	s = mustOpen(t, o)
	defer mustClose(t, s)
	if p := fs.peak.Load(); p > DefaultMaxOpenQueueFiles {
		t.Fatalf("recovery had %d consumequeue files open at once, the bound is %d", p, DefaultMaxOpenQueueFiles)
	}
	for ti := range topics {
		topic := fmt.Sprintf("T%d", ti)
		for qi := range int32(queues) {
			res, err := s.Get(context.Background(), GetRequest{Topic: topic, QueueID: qi, Offset: 0})
			if err != nil || res.Status != Found || len(res.Records) != 1 {
				t.Fatalf("get %s/%d: %v %v (%d records)", topic, qi, err, res.Status, len(res.Records))
			}
			if p := int64(binary.BigEndian.Uint64(res.Records[0][offPhysOffset:])); p != phys[fmt.Sprintf("%s/%d", topic, qi)] {
				t.Fatalf("get %s/%d: record at %d, want %d", topic, qi, p, phys[fmt.Sprintf("%s/%d", topic, qi)])
			}
			if r := mustPut(t, s, msg(topic, qi, "n")); r[0].QueueOffset != 1 {
				t.Fatalf("put %s/%d got queue offset %d, want 1", topic, qi, r[0].QueueOffset)
			}
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if p := fs.peak.Load(); p > DefaultMaxOpenQueueFiles {
		t.Fatalf("%d consumequeue files open at once, the bound is %d", p, DefaultMaxOpenQueueFiles)
	}
}

// TestQueueFilesTinyCapConcurrent: with room for two open consumequeue
// files, concurrent Puts, Gets and flushes over many queues and files
// read every entry right (run it with -race).
func TestQueueFilesTinyCapConcurrent(t *testing.T) {
	const queues, perQueue = 6, 120
	fs := &countFS{FS: vfs.NewMem()}
	o := testOpts(fs)
	o.SegmentSize = 4 << 20
	o.CQEntriesPerFile = 10
	o.MaxOpenQueueFiles = 2
	s := mustOpen(t, o)
	defer mustClose(t, s)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	var maxes [queues]atomic.Int64
	for qi := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perQueue {
				r, err := s.Put(ctx, []Message{msg("C", int32(qi), fmt.Sprintf("%d/%d", qi, i))})
				if err != nil {
					errs <- err
					return
				}
				maxes[qi].Store(r[0].QueueOffset + 1)
			}
		}()
	}
	done := make(chan struct{})
	var flusher sync.WaitGroup
	flusher.Add(1)
	go func() {
		defer flusher.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := s.Flush(); err != nil {
				errs <- err
				return
			}
		}
	}()
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for range 1500 {
				qi := rng.IntN(queues)
				mx := maxes[qi].Load()
				if mx == 0 {
					continue
				}
				off := rng.Int64N(mx)
				res, err := s.Get(ctx, GetRequest{Topic: "C", QueueID: int32(qi), Offset: off, MaxMsgs: 16})
				if err != nil {
					errs <- err
					return
				}
				if res.Status != Found {
					errs <- fmt.Errorf("get C/%d at %d (max %d): %v", qi, off, mx, res.Status)
					return
				}
				for i, rec := range res.Records {
					m, err := parseMeta(rec, true)
					if err != nil {
						errs <- err
						return
					}
					if m.queueID != int32(qi) || m.queueOffset != off+int64(i) {
						errs <- fmt.Errorf("get C/%d at %d: record %d is %d/%d", qi, off, i, m.queueID, m.queueOffset)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	flusher.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// Every handle in use was released: the bound holds at rest.
	if n := s.fds.openCount(); n > o.MaxOpenQueueFiles {
		t.Fatalf("%d consumequeue files open at rest, the bound is %d", n, o.MaxOpenQueueFiles)
	}
	if n := fs.open.Load(); n > int64(o.MaxOpenQueueFiles) {
		t.Fatalf("%d consumequeue files open at rest (counted by the FS), the bound is %d", n, o.MaxOpenQueueFiles)
	}
	for qi := range int32(queues) {
		checkQueueOffsets(t, s, "C", qi, perQueue)
	}
	// 6 queues of 12 files each through 2 descriptors: files were closed
	// and opened again many times.
	if n := fs.opens.Load(); n < queues*perQueue/10 {
		t.Fatalf("only %d consumequeue opens: the cap did not bite", n)
	}
}

// checkQueueOffsets reads queue topic/qi from 0 and checks that it holds
// n records with queue offsets 0..n-1.
func checkQueueOffsets(t *testing.T, s *Store, topic string, qi int32, n int64) {
	t.Helper()
	for off := int64(0); off < n; {
		res, err := s.Get(context.Background(), GetRequest{Topic: topic, QueueID: qi, Offset: off})
		if err != nil || res.Status != Found {
			t.Fatalf("get %s/%d at %d: %v %v", topic, qi, off, err, res.Status)
		}
		for _, rec := range res.Records {
			m, err := parseMeta(rec, true)
			if err != nil || m.queueOffset != off {
				t.Fatalf("get %s/%d: record with queue offset %d (%v), want %d", topic, qi, m.queueOffset, err, off)
			}
			off++
		}
	}
}

// TestGetScanIsBounded (issue 9 item 7): a Get asking for 2^31-1 messages
// with a filter that matches nothing scans at most max(800, MaxGetMsgs)
// entries, and its NextBeginOffset moves past them, so repeated Gets reach
// the end of the queue.
func TestGetScanIsBounded(t *testing.T) {
	const n = 100_000
	o := testOpts(vfs.NewMem())
	o.SegmentSize = 32 << 20
	s := mustOpen(t, o)
	defer mustClose(t, s)
	batch := make([]Message, 1000)
	for i := range batch {
		batch[i] = msg("S", 0, "x")
	}
	for range n / len(batch) {
		mustPut(t, s, batch...)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	bound := int64(max(getScanMin, MaxGetMsgs))
	none := func(int64) bool { return false }
	pulls := 0
	for off := int64(0); off < n; pulls++ {
		res, err := s.Get(context.Background(), GetRequest{Topic: "S", QueueID: 0, Offset: off, MaxMsgs: math.MaxInt32, Filter: none})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != NoMatchedMessage || len(res.Records) != 0 {
			t.Fatalf("get at %d: %v with %d records, want NO_MATCHED_MESSAGE", off, res.Status, len(res.Records))
		}
		step := res.NextBeginOffset - off
		if step <= 0 || step > bound {
			t.Fatalf("get at %d scanned %d entries (NextBeginOffset %d), want 1..%d", off, step, res.NextBeginOffset, bound)
		}
		off = res.NextBeginOffset
	}
	if min := (n + int(bound) - 1) / int(bound); pulls < min {
		t.Fatalf("%d pulls reached the end, at least %d expected", pulls, min)
	}
	// A matching filter returns at most MaxGetMsgs records.
	res, err := s.Get(context.Background(), GetRequest{Topic: "S", QueueID: 0, Offset: 0, MaxMsgs: math.MaxInt32, MaxBytes: 64 << 20})
	if err != nil || res.Status != Found || len(res.Records) != MaxGetMsgs {
		t.Fatalf("get all: %v %v with %d records, want %d", err, res.Status, len(res.Records), MaxGetMsgs)
	}
}

// TestQueueTruncationCutsFiles: a replicated stream that rewrites queue
// offsets already stored (AppendRaw with a lower queue offset) replaces
// the entries from there on; the flusher removes and cuts the stale
// files, readers running meanwhile never see a stale or torn entry, and a
// reopened store holds the new entries.
func TestQueueTruncationCutsFiles(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.CQEntriesPerFile = 4
	o.MaxOpenQueueFiles = 2
	s := mustOpen(t, o)
	pos := int64(0)
	appendQ := func(qoffs ...int64) {
		t.Helper()
		var raw []byte
		for _, q := range qoffs {
			raw = append(raw, encodeTestRecord(Message{Topic: "R", QueueID: 0, Body: []byte(fmt.Sprint(pos))}, q, pos+int64(len(raw)), 1000)...)
		}
		if err := s.AppendRaw(pos, raw); err != nil {
			t.Fatal(err)
		}
		pos += int64(len(raw))
	}
	appendQ(0, 1, 2, 3, 4, 5, 6, 7, 8, 9) // files 0, 4 and 8
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}

	// Readers check that every record is the one its queue offset names.
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				off := int64((i + r) % 10)
				res, err := s.Get(context.Background(), GetRequest{Topic: "R", QueueID: 0, Offset: off, MaxMsgs: 4})
				if err != nil {
					errs <- err
					return
				}
				for k, rec := range res.Records {
					m, err := parseMeta(rec, true)
					if err != nil || m.queueOffset != off+int64(k) {
						errs <- fmt.Errorf("get at %d: record %d has queue offset %d (%v)", off, k, m.queueOffset, err)
						return
					}
				}
			}
		}()
	}
	newFrom := pos
	appendQ(3, 4, 5) // replaces 3..9 by three new records
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	appendQ(6)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if mx := s.MaxQueueOffset("R", 0); mx != 7 {
		t.Fatalf("max %d after the rewrite, want 7", mx)
	}
	names, err := fs.ReadDir("/data/store/consumequeue/R/0")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 2 {
		t.Fatalf("consumequeue files %v, want the files at 0 and 4 only", names)
	}
	if fi, err := fs.Stat("/data/store/consumequeue/R/0/" + names[1]); err != nil || fi.Size() != 3*cqEntrySize {
		t.Fatalf("second file: %v, %v; want 3 entries", fi, err)
	}
	mustClose(t, s)

	s = mustOpen(t, o)
	defer mustClose(t, s)
	recs := readQueue(t, s, "R", 0)
	if len(recs) != 7 {
		t.Fatalf("%d records after reopen, want 7", len(recs))
	}
	for i, r := range recs {
		if r.QueueOffset != int64(i) || (i >= 3) != (r.PhysOffset >= newFrom) {
			t.Fatalf("record %d: queue offset %d at %d (new records from %d)", i, r.QueueOffset, r.PhysOffset, newFrom)
		}
	}
}

// TestStorePutQueueLimits (issue 9 item 7): a Put that would create a
// topic past MaxTopics or a queue past MaxQueuesPerTopic fails with
// ErrQueueLimit, naming the limit, and stores nothing; queues that exist
// keep working, also after a reopen with lower limits.
func TestStorePutQueueLimits(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.MaxTopics, o.MaxQueuesPerTopic = 2, 3
	s := mustOpen(t, o)
	for qi := range int32(3) {
		mustPut(t, s, msg("T1", qi, "ok"))
	}
	refused := func(m Message, what string) {
		t.Helper()
		end := s.MaxPhysOffset()
		_, err := s.Put(context.Background(), []Message{msg("T1", 0, "batch"), m})
		if !errors.Is(err, ErrQueueLimit) || !strings.Contains(err.Error(), what) {
			t.Fatalf("put to %s/%d: %v, want ErrQueueLimit naming %s", m.Topic, m.QueueID, err, what)
		}
		if s.MaxPhysOffset() != end {
			t.Fatalf("a refused put stored %d bytes", s.MaxPhysOffset()-end)
		}
	}
	refused(msg("T1", 3, "x"), "MaxQueuesPerTopic")
	mustPut(t, s, msg("T2", 7, "ok"))
	refused(msg("T3", 0, "x"), "MaxTopics")
	mustClose(t, s)

	o.MaxTopics, o.MaxQueuesPerTopic = 1, 1
	s = mustOpen(t, o)
	defer mustClose(t, s)
	for qi := range int32(3) {
		if r := mustPut(t, s, msg("T1", qi, "again")); r[0].QueueOffset != 1 {
			t.Fatalf("T1/%d: queue offset %d, want 1", qi, r[0].QueueOffset)
		}
	}
	mustPut(t, s, msg("T2", 7, "again"))
	refused(msg("T3", 0, "x"), "MaxTopics")
	refused(msg("T2", 0, "x"), "MaxQueuesPerTopic")
}

// TestGetRacesDeleteTopic: Gets running while their topic is deleted and
// written again see either the old records or the new queue, never an
// error or a record of the wrong queue offset (a file retired under a
// pread is closed by the reader, not under it).
func TestGetRacesDeleteTopic(t *testing.T) {
	o := testOpts(vfs.NewMem())
	o.CQEntriesPerFile = 8
	o.MaxOpenQueueFiles = 3
	s := mustOpen(t, o)
	defer mustClose(t, s)
	fill := func(tag string) {
		for i := range 40 {
			mustPut(t, s, msg("D", int32(i%2), tag))
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	fill("old")
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Offsets continue across incarnations (tombstone.go).
				off := s.MinQueueOffset("D", int32(i%2)) + int64((i*7+r)%20)
				res, err := s.Get(context.Background(), GetRequest{Topic: "D", QueueID: int32(i % 2), Offset: off, MaxMsgs: 8})
				if err != nil {
					errs <- err
					return
				}
				for k, rec := range res.Records {
					m, err := parseMeta(rec, true)
					if err != nil || m.queueOffset != off+int64(k) || m.queueID != int32(i%2) {
						errs <- fmt.Errorf("get D/%d at %d: record %d is %d/%d (%v)", i%2, off, k, m.queueID, m.queueOffset, err)
						return
					}
				}
			}
		}()
	}
	for range 5 {
		if err := s.DeleteTopic("D"); err != nil {
			t.Fatal(err)
		}
		fill("new")
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if mn, mx := s.MinQueueOffset("D", 0), s.MaxQueueOffset("D", 0); mn != 100 || mx != 120 {
		t.Fatalf("D/0 after five re-creations is [%d, %d), want [100, 120)", mn, mx)
	}
	for off := int64(100); off < 120; {
		res, err := s.Get(context.Background(), GetRequest{Topic: "D", QueueID: 0, Offset: off})
		if err != nil || res.Status != Found {
			t.Fatalf("get D/0 at %d: %v %v", off, err, res.Status)
		}
		for _, rec := range res.Records {
			if m, err := parseMeta(rec, true); err != nil || m.queueOffset != off {
				t.Fatalf("get D/0: record with queue offset %d (%v), want %d", m.queueOffset, err, off)
			}
			off++
		}
	}
}

// TestFlushWriteDoesNotStallPuts (issue 9 item 10): while the flusher is
// blocked inside a consumequeue write of queue A, a Put to A completes
// (the flusher holds no queue lock across its writes).
func TestFlushWriteDoesNotStallPuts(t *testing.T) {
	b := newOpBlocker(errorfs.OpFileWriteAt, "/consumequeue/A/0/")
	s := mustOpen(t, testOpts(errorfs.Wrap(vfs.NewMem(), b)))
	defer mustClose(t, s)
	defer b.unblock()
	mustPut(t, s, msg("A", 0, "first"))
	b.armed.Store(true)
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush() }()
	select {
	case <-b.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the flush never reached its consumequeue write")
	}
	put := make(chan error, 1)
	go func() {
		_, err := s.Put(context.Background(), []Message{msg("A", 0, "during")})
		put <- err
	}()
	select {
	case err := <-put:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Put waited for the flusher's consumequeue write")
	}
	b.unblock()
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	checkQueueOffsets(t, s, "A", 0, 2)
}
