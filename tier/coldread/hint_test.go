package coldread_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/coldread"
)

// switchBucket fails every ReadAt while down is set, and counts ReadAt
// calls per key.
type switchBucket struct {
	tier.Bucket
	down atomic.Bool
	mu   sync.Mutex
	keys map[string]int
	n    int
}

var errDown = errors.New("bucket down (test)")

func (b *switchBucket) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	b.mu.Lock()
	b.keys[key]++
	b.n++
	b.mu.Unlock()
	if b.down.Load() {
		return errDown
	}
	return b.Bucket.ReadAt(ctx, key, p, off)
}

func (b *switchBucket) reads() (int, map[string]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := map[string]int{}
	for k, v := range b.keys {
		m[k] = v
	}
	return b.n, m
}

// waitIdle waits (at most 10 s) until the reader has no hint and no
// read-ahead GET in flight.
func waitIdle(t *testing.T, r *coldread.Reader) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !r.BackgroundIdle() {
		if time.Now().After(deadline) {
			t.Fatal("background fetches still running after 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	r.WaitCache()
}

// queueIn returns queue q's records in object o.
func (fx *layoutFixture) queueIn(q int, o coldread.Object) [][2]int64 {
	var out [][2]int64
	for _, rec := range fx.recs[q] {
		if rec[0] >= o.Base && rec[0] < o.End() {
			out = append(out, rec)
		}
	}
	return out
}

// lendAll reads recs through Lend and checks their bytes.
func (fx *layoutFixture) lendAll(t *testing.T, r *coldread.Reader, recs [][2]int64) error {
	t.Helper()
	for _, rec := range recs {
		for off := rec[0]; off < rec[0]+rec[1]; {
			b, err := r.Lend(context.Background(), off, int(rec[0]+rec[1]-off))
			if err != nil {
				return err
			}
			if !bytes.Equal(b, fx.data[off-base:off-base+int64(len(b))]) {
				t.Fatalf("bytes at %d differ", off)
			}
			off += int64(len(b))
		}
	}
	return nil
}

func hintAt(off int64) func(context.Context) (int64, bool, error) {
	return func(context.Context) (int64, bool, error) { return off, true, nil }
}

// TestPrefetchCrossesObjects: a queue reading the end of its records in
// object A hints its first record in object B; B's footer, layout and the
// frames of the queue's group there are fetched in the background, so the
// queue's first reads in B need no GET (the bucket is down by then and
// they succeed), and they fetch nothing of the other queues' groups.
// Without the hint the same reads fail: they are demand GETs.
func TestPrefetchCrossesObjects(t *testing.T) {
	fx := newLayoutFixture(t, 8, 20, 4<<20, 2<<20, 64<<10)
	if len(fx.objs) != 2 {
		t.Fatalf("%d objects", len(fx.objs))
	}
	a, b := fx.objs[0], fx.objs[1]
	for _, hint := range []bool{false, true} {
		sb := &switchBucket{Bucket: fx.mem, keys: map[string]int{}}
		r := newReader(t, sb, fx.objs, coldread.Config{CacheBytes: 64 << 20})
		const q = 3
		if err := fx.lendAll(t, r, fx.queueIn(q, a)); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, r)
		if _, keys := sb.reads(); keys[b.Key] != 0 {
			t.Fatalf("reading object A fetched %d ranges of B before any hint", keys[b.Key])
		}
		inB := fx.queueIn(q, b)
		if hint {
			if !r.Prefetch(hintAt(inB[0][0])) {
				t.Fatal("hint dropped")
			}
			waitIdle(t, r)
			if st := r.Stats(); st.Hints != 1 {
				t.Fatalf("stats: %+v", st)
			}
		}
		n0, keys := sb.reads()
		if hint && keys[b.Key] < 3 { // footer, layout, a run of frames
			t.Fatalf("the hint fetched %d ranges of B", keys[b.Key])
		}
		// The queue's group in B is 1/8 of it: a hint that fetched B
		// whole, or other queues' groups, fetched too much.
		if st := r.Stats(); hint && st.DecodedBytes > a.Length+b.Length/4 {
			t.Fatalf("decoded %d bytes: the hint fetched beyond the queue's group (B is %d bytes)", st.DecodedBytes-a.Length/8, b.Length)
		}
		sb.down.Store(true)
		// The queue's first records in B, up to its first group's frames.
		wait0 := r.Stats().WaitNanos
		err := fx.lendAll(t, r, inB[:4])
		if w := r.Stats().WaitNanos - wait0; hint && w != 0 {
			t.Fatalf("reads in B waited %v for the bucket after the hint", time.Duration(w))
		}
		switch {
		case hint && err != nil:
			t.Fatalf("reading B after the hint needed the bucket: %v", err)
		case !hint && err == nil:
			t.Fatal("without a hint, reading B needed no GET: the test shows nothing")
		}
		if n1, _ := sb.reads(); hint && n1 != n0 {
			t.Fatalf("reads in B made %d GETs after the hint", n1-n0)
		}
		sb.down.Store(false)
		if err := fx.lendAll(t, r, inB); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPrefetchBounded: a hint fetches at most its depth (an even share
// of ReadAheadBytes, at most RunBytes, from the hinted record's frame), in
// the hinted queue's group only; a hint outside the object table fetches
// nothing; a hint whose next fails or has nowhere to go fetches nothing.
func TestPrefetchBounded(t *testing.T) {
	fx := newLayoutFixture(t, 2, 50, 8<<20, 4<<20, 64<<10) // groups of ~2 MiB: 32 frames
	sb := &switchBucket{Bucket: fx.mem, keys: map[string]int{}}
	r := newReader(t, sb, fx.objs, coldread.Config{CacheBytes: 64 << 20, RunBytes: 256 << 10, ReadAheadBytes: 1 << 20})
	b := fx.objs[1]
	first := fx.queueIn(0, b)[0][0]
	r.Prefetch(hintAt(first))
	waitIdle(t, r)
	st := r.Stats()
	// depth: min(1 MiB / 1 stream, 256 KiB) = 256 KiB: the frames that
	// start before it, so at most one frame (64 KiB) more.
	if st.DecodedBytes == 0 || st.DecodedBytes > 256<<10+64<<10 {
		t.Fatalf("a hint of depth 256 KiB decoded %d bytes", st.DecodedBytes)
	}
	// With a depth past the group's end (RunBytes and ReadAheadBytes of
	// 32 MiB): the queue's group only, never the other queue's.
	var group int64
	for _, rec := range fx.queueIn(1, b) {
		group += rec[1]
	}
	r2 := newReader(t, fx.mem, fx.objs, coldread.Config{CacheBytes: 256 << 20, RunBytes: 32 << 20, ReadAheadBytes: 32 << 20})
	r2.Prefetch(hintAt(fx.queueIn(1, b)[0][0]))
	waitIdle(t, r2)
	if st := r2.Stats(); st.DecodedBytes < group || st.DecodedBytes > group+64<<10 {
		t.Fatalf("a hint into a group of %d bytes (of %d) decoded %d", group, b.Length, st.DecodedBytes)
	}
	n0, _ := sb.reads()
	for _, off := range []int64{fx.objs[len(fx.objs)-1].End(), fx.objs[len(fx.objs)-1].End() + 1<<20, base - 1, -1} {
		r.Prefetch(hintAt(off))
		waitIdle(t, r)
	}
	r.Prefetch(func(context.Context) (int64, bool, error) { return 0, false, errors.New("no entry") })
	r.Prefetch(func(context.Context) (int64, bool, error) { return first, false, nil })
	waitIdle(t, r)
	if n1, keys := sb.reads(); n1 != n0 {
		t.Fatalf("hints outside the table (or with nowhere to go) made %d GETs: %v", n1-n0, keys)
	}
	if st := r.Stats(); st.Hints != 7 {
		t.Fatalf("hints followed: %d", st.Hints)
	}
}

// TestPrefetchFailureFailsNoRead: a hint whose GETs fail (the footer, the
// layout, the frames) leaves nothing behind that fails the reads that
// follow: they read on demand.
func TestPrefetchFailureFailsNoRead(t *testing.T) {
	fx := newLayoutFixture(t, 8, 20, 4<<20, 2<<20, 64<<10)
	b := fx.objs[1]
	for _, failFrom := range []int{0, 1, 2} { // footer, layout, frames
		t.Run([]string{"footer", "layout", "frames"}[failFrom], func(t *testing.T) {
			fb := &failNth{Bucket: fx.mem, from: failFrom}
			r := newReader(t, fb, fx.objs, coldread.Config{CacheBytes: 64 << 20})
			inB := fx.queueIn(5, b)
			r.Prefetch(hintAt(inB[0][0]))
			waitIdle(t, r)
			if fb.failed.Load() == 0 {
				t.Fatal("no GET failed")
			}
			fb.from = 1 << 30 // up again
			if err := fx.lendAll(t, r, inB); err != nil {
				t.Fatalf("a read after a failed hint: %v", err)
			}
		})
	}
}

// failNth fails every ReadAt from the from-th on (0-based) while from is
// reached; set from high to bring it back.
type failNth struct {
	tier.Bucket
	from   int
	mu     sync.Mutex
	n      int
	failed atomic.Int64
}

func (b *failNth) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	b.mu.Lock()
	i := b.n
	b.n++
	fail := i >= b.from
	b.mu.Unlock()
	if fail {
		b.failed.Add(1)
		return errDown
	}
	return b.Bucket.ReadAt(ctx, key, p, off)
}

// TestPrefetchBoundedGoroutinesAndClose: at most MaxHints hints are
// followed at once (one more is dropped, never queued), and Close ends
// hints blocked on the bucket (goleak in TestMain checks that nothing is
// left).
func TestPrefetchBoundedGoroutinesAndClose(t *testing.T) {
	fx := newLayoutFixture(t, 8, 20, 4<<20, 2<<20, 64<<10)
	cb := newCounting(fx.mem)
	cb.gate = make(chan struct{})
	cb.arrived = make(chan struct{}, 16)
	r, err := coldread.New(coldread.Config{Bucket: cb, CacheBytes: 64 << 20}, fx.objs)
	if err != nil {
		t.Fatal(err)
	}
	defer close(cb.gate)
	block := func(context.Context) (int64, bool, error) { return fx.objs[1].Base, true, nil }
	for i := range coldread.MaxHints {
		if !r.Prefetch(block) {
			t.Fatalf("hint %d was dropped with %d running", i, i)
		}
	}
	// One reached the bucket (the footer GET; the others wait for it).
	select {
	case <-cb.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no hint reached the bucket within 10 s")
	}
	if r.Prefetch(block) {
		t.Fatalf("one more hint was taken while %d run", coldread.MaxHints)
	}
	if st := r.Stats(); st.HintsDropped != 1 {
		t.Fatalf("dropped: %d", st.HintsDropped)
	}
	done := make(chan struct{})
	go func() { r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the hints within 10 s")
	}
	if r.Prefetch(block) {
		t.Fatal("a hint taken after Close")
	}
}

// TestHintMetrics: the hint and wait counters are exported, and the
// collector stays consistent (a pedantic registry checks every metric
// against its description).
func TestHintMetrics(t *testing.T) {
	fx := newLayoutFixture(t, 8, 20, 4<<20, 2<<20, 64<<10)
	r := newReader(t, fx.mem, fx.objs, coldread.Config{CacheBytes: 64 << 20})
	r.Prefetch(hintAt(fx.queueIn(2, fx.objs[1])[0][0]))
	waitIdle(t, r)
	if err := fx.lendAll(t, r, fx.queueIn(2, fx.objs[0])); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(r)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetCounter().GetValue()
		}
	}
	if got["rocketmq_tiered_store_cold_read_ahead_hints_total/followed"] != 1 ||
		got["rocketmq_tiered_store_cold_read_ahead_hints_total/dropped"] != 0 {
		t.Fatalf("hint counters: %v", got)
	}
	// Object A was read on demand: its reads waited for the bucket.
	if got["rocketmq_tiered_store_cold_read_wait_seconds_total"] <= 0 {
		t.Fatalf("wait: %v", got)
	}
}
