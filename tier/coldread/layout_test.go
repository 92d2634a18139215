package coldread_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/segfile"
)

// layoutFixture is a log of records of `queues` queues, interleaved in
// runs of runLen records (as producers batching per queue write them),
// stored as objects of objLen logical bytes in a queue-major layout (each
// queue's records together): recs[q] are queue q's records, in order, as
// global (offset, length).
type layoutFixture struct {
	data []byte
	objs []coldread.Object
	recs [][][2]int64
	mem  tier.Bucket
}

func newLayoutFixture(t testing.TB, queues, runLen, size, objLen, frameSize int) *layoutFixture {
	return newFixtureOrdered(t, queues, runLen, size, objLen, frameSize, true)
}

// newFixtureOrdered is newLayoutFixture, stored in log order (no layout)
// unless queueMajor.
func newFixtureOrdered(t testing.TB, queues, runLen, size, objLen, frameSize int, queueMajor bool) *layoutFixture {
	t.Helper()
	rng := rand.New(rand.NewPCG(21, 22))
	fx := &layoutFixture{data: make([]byte, size), recs: make([][][2]int64, queues), mem: tier.NewMem()}
	for i := range fx.data {
		fx.data[i] = byte(rng.Uint32()) // incompressible: raw frames
	}
	for start := 0; start < size; start += objLen {
		n := min(objLen, size-start)
		// Records of 200-1,200 bytes, queue q in runs of runLen records.
		type rec struct{ off, n, q int64 }
		var recs []rec
		q, inRun := 0, 0
		for off := 0; off < n; {
			l := min(200+rng.IntN(1000), n-off)
			recs = append(recs, rec{int64(off), int64(l), int64(q)})
			fx.recs[q] = append(fx.recs[q], [2]int64{base + int64(start+off), int64(l)})
			off += l
			if inRun++; inRun == runLen {
				q, inRun = (q+1)%queues, 0
			}
		}
		var layout []segfile.Run
		pos := int64(0)
		for g := range int64(queues) {
			for _, r := range recs {
				if r.q != g {
					continue
				}
				if k := len(layout) - 1; k >= 0 && layout[k].Group == g && layout[k].Off+layout[k].Len == r.off {
					layout[k].Len += r.n
				} else {
					layout = append(layout, segfile.Run{Off: r.off, Len: r.n, Pos: pos, Group: g})
				}
				pos += r.n
			}
		}
		if !queueMajor {
			layout = nil
		}
		var obj bytes.Buffer
		if _, err := segfile.Encode(&obj, bytes.NewReader(fx.data[start:start+n]), int64(n),
			segfile.Options{FrameSize: frameSize, Base: base + int64(start), Layout: layout}); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("commitlog/%020d.seg", base+int64(start))
		if err := fx.mem.Put(context.Background(), key, bytes.NewReader(obj.Bytes()), int64(obj.Len())); err != nil {
			t.Fatal(err)
		}
		fx.objs = append(fx.objs, coldread.Object{Key: key, Base: base + int64(start), Length: int64(n), Size: int64(obj.Len())})
	}
	return fx
}

// replayQueue reads queue q's records in order, as the store's cold Get
// does (Lend, record by record), checking every byte; it returns the
// bytes delivered.
func (fx *layoutFixture) replayQueue(t testing.TB, r *coldread.Reader, q int) int64 {
	t.Helper()
	ctx := context.Background()
	var delivered int64
	for _, rec := range fx.recs[q] {
		for off := rec[0]; off < rec[0]+rec[1]; {
			b, err := r.Lend(ctx, off, int(rec[0]+rec[1]-off))
			if err != nil {
				t.Fatalf("queue %d: lend at %d: %v", q, off, err)
			}
			if !bytes.Equal(b, fx.data[off-base:off-base+int64(len(b))]) {
				t.Fatalf("queue %d: bytes at %d differ", q, off)
			}
			off += int64(len(b))
			delivered += int64(len(b))
		}
	}
	return delivered
}

// TestLayoutReadsMatchOriginal: logical reads of layout objects (ReadAt
// across objects, runs and frames) return the original bytes.
func TestLayoutReadsMatchOriginal(t *testing.T) {
	fx := newLayoutFixture(t, 8, 3, 2<<20, 512<<10, 32<<10)
	r := newReader(t, fx.mem, fx.objs, coldread.Config{CacheBytes: 4 << 20})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(23, 24))
	for range 300 {
		off := rng.Int64N(int64(len(fx.data)))
		n := rng.IntN(min(int(int64(len(fx.data))-off), 100<<10)) + 1
		p := make([]byte, n)
		if got, err := r.ReadAt(ctx, base+off, p); err != nil || got != n {
			t.Fatalf("ReadAt(%d, %d) = %d, %v", off, n, got, err)
		}
		if !bytes.Equal(p, fx.data[off:off+int64(n)]) {
			t.Fatalf("ReadAt(%d, %d): bytes differ", off, n)
		}
	}
	for q := range 8 {
		fx.replayQueue(t, r, q)
	}
}

// TestLayoutSingleQueueAmplification (issue 12 item 4): replaying one
// queue of 8, and of 64, in runs of 100 records or of single records,
// fetches at most twice the bytes it delivers, with read-ahead on; the
// same replay of the same log stored in log order fetches three times as
// much or more.
func TestLayoutSingleQueueAmplification(t *testing.T) {
	replay := func(t *testing.T, queues, runLen int, queueMajor bool) float64 {
		fx := newFixtureOrdered(t, queues, runLen, 12<<20, 4<<20, 256<<10, queueMajor)
		r := newReader(t, fx.mem, fx.objs, coldread.Config{CacheBytes: 64 << 20})
		start := time.Now()
		delivered := fx.replayQueue(t, r, 1)
		st := r.Stats()
		amp := float64(st.GetBytes) / float64(delivered)
		t.Logf("queue-major %v: delivered %d, fetched %d (%.2f×), %d GETs, %d demand misses, %v",
			queueMajor, delivered, st.GetBytes, amp, st.Gets, st.Misses, time.Since(start))
		return amp
	}
	for _, tc := range []struct{ queues, runLen int }{{8, 100}, {8, 1}, {64, 100}, {64, 1}} {
		t.Run(fmt.Sprintf("1of%d-runs%d", tc.queues, tc.runLen), func(t *testing.T) {
			if amp := replay(t, tc.queues, tc.runLen, true); amp > 2 {
				t.Fatalf("replaying 1 queue of %d fetched %.2f× the bytes it delivered", tc.queues, amp)
			}
			if amp := replay(t, tc.queues, tc.runLen, false); amp < 3 {
				t.Fatalf("in log order, replaying 1 queue of %d fetched only %.2f×: the test does not show the layout's effect", tc.queues, amp)
			}
		})
	}
}

// TestLayoutAllQueuesTogether: every queue of a topic replaying at once
// (a new group reading from the first offset) reads each byte of layout
// objects from the bucket about once, each queue's stream reading ahead
// in its own group.
func TestLayoutAllQueuesTogether(t *testing.T) {
	fx := newLayoutFixture(t, 8, 20, 12<<20, 4<<20, 256<<10)
	r := newReader(t, fx.mem, fx.objs, coldread.Config{CacheBytes: 64 << 20})
	var wg sync.WaitGroup
	delivered := make([]int64, 8)
	for q := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			delivered[q] = fx.replayQueue(t, r, q)
		}()
	}
	wg.Wait()
	var total int64
	for _, d := range delivered {
		total += d
	}
	st := r.Stats()
	t.Logf("delivered %d, fetched %d (%.2f×), %d GETs, %d demand misses, %d read-ahead fetches",
		total, st.GetBytes, float64(st.GetBytes)/float64(total), st.Gets, st.Misses, st.AheadFetches)
	if total != int64(len(fx.data)) || float64(st.GetBytes) > 1.1*float64(total) {
		t.Fatalf("delivered %d of %d bytes, fetched %d", total, len(fx.data), st.GetBytes)
	}
	if st.AheadFetches == 0 {
		t.Fatal("no read-ahead")
	}
}

// TestReadStreamReadsEachFrameOnce: reading layout objects in their
// stored order (as stratamq replay does) returns every logical byte once
// (the runs, queue by queue) and fetches each frame once, with a cache
// far smaller than an object.
func TestReadStreamReadsEachFrameOnce(t *testing.T) {
	fx := newLayoutFixture(t, 64, 1, 12<<20, 4<<20, 256<<10)
	r := newReader(t, fx.mem, fx.objs, coldread.Config{CacheBytes: 2 << 20, ReadAheadBytes: 512 << 10})
	ctx := context.Background()
	var stream []byte
	for _, o := range fx.objs {
		for pos := int64(0); pos < o.Length; {
			p := make([]byte, min(100<<10, o.Length-pos))
			if err := r.ReadStream(ctx, o, p, pos); err != nil {
				t.Fatal(err)
			}
			stream = append(stream, p...)
			pos += int64(len(p))
		}
	}
	// The stream holds each queue's records, in order, queue after queue
	// within an object.
	at := 0
	for oi, o := range fx.objs {
		for q := range fx.recs {
			for _, rec := range fx.recs[q] {
				if rec[0] < o.Base || rec[0] >= o.Base+o.Length {
					continue
				}
				want := fx.data[rec[0]-base : rec[0]-base+rec[1]]
				if !bytes.Equal(stream[at:at+int(rec[1])], want) {
					t.Fatalf("object %d, queue %d: record at %d is not next in the stream", oi, q, rec[0])
				}
				at += int(rec[1])
			}
		}
	}
	if at != len(fx.data) {
		t.Fatalf("stream of %d bytes, records %d", len(stream), at)
	}
	if st := r.Stats(); st.GetBytes > int64(len(fx.data)) {
		t.Fatalf("fetched %d bytes for %d", st.GetBytes, len(fx.data))
	}
}
