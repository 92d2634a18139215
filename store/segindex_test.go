package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// fillIndexMix writes n records over queues: Puts with tags codes that
// differ from the TAGS hash (so the blob's codes come from the
// consumequeue), replicated records (AppendRaw) at the next queue offset,
// past it (a gap: blank entries) and below it (rewriting the queue), and
// prepared transactions, which are not dispatched.
func fillIndexMix(t *testing.T, s *Store, rng *rand.Rand, queues []qref, n int) {
	t.Helper()
	for i := range n {
		q := queues[rng.IntN(len(queues))]
		body := fmt.Sprintf("%s/%d-%d-%s", q.topic, q.id, i, bytes.Repeat([]byte{'x'}, rng.IntN(300)))
		m := msg(q.topic, q.id, body)
		m.TagsCode = int64(rng.IntN(4))
		next := s.MaxQueueOffset(q.topic, q.id)
		qoff := next
		switch k := rng.IntN(20); {
		case k < 9:
			batch := []Message{m}
			if k == 0 {
				tx := msg(q.topic, q.id, "prepared")
				tx.SysFlag = sysFlagTxPrepared
				batch = append(batch, tx)
			}
			mustPut(t, s, batch...)
			continue
		case k < 13:
		case k < 16:
			qoff += 1 + rng.Int64N(6)
		case k < 19:
			// Not below a restored queue's cold range: AppendRaw refuses
			// those offsets (they are the tier's).
			qoff = max(0, next-1-rng.Int64N(5))
			if sq := s.queue(q.topic, q.id); sq != nil {
				qoff = max(qoff, sq.coldEnd.Load())
			}
		default:
			m.SysFlag = sysFlagTxPrepared
			qoff = rng.Int64N(next + 3)
		}
		pos := s.MaxPhysOffset()
		if err := s.AppendRaw(pos, encodeTestRecord(m, qoff, pos, 1700000000000+int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
}

// checkIndexAgainstOracle compares, for every sealed segment of s, the
// blob of BuildSegmentIndex, of WriteSegmentIndex into a file (and into
// memory full of garbage: nothing relies on unwritten bytes being zero)
// with the blob of the single-pass build it replaced.
func checkIndexAgainstOracle(t *testing.T, s *Store) int {
	t.Helper()
	segs := s.SealedSegments()
	if len(segs) == 0 {
		t.Fatal("no sealed segment")
	}
	for _, sg := range segs {
		want, err := s.oldBuildSegmentIndex(sg.Base)
		if err != nil {
			t.Fatalf("oracle %d: %v", sg.Base, err)
		}
		got, err := s.BuildSegmentIndex(sg.Base)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("segment %d: BuildSegmentIndex differs from the oracle (%d vs %d bytes, %v)", sg.Base, len(got), len(want), err)
		}
		if _, err := DecodeSegmentIndex(got); err != nil {
			t.Fatalf("segment %d: %v", sg.Base, err)
		}
		junk := &memIndexFile{b: bytes.Repeat([]byte{0xa5}, len(want)+100)}
		n, err := s.WriteSegmentIndex(sg.Base, junk)
		if err != nil || !bytes.Equal(junk.b[:n], want) {
			t.Fatalf("segment %d: WriteSegmentIndex over garbage differs from the oracle (%v)", sg.Base, err)
		}
		f, err := os.CreateTemp(t.TempDir(), "idx")
		if err != nil {
			t.Fatal(err)
		}
		n, err = s.WriteSegmentIndex(sg.Base, f)
		if err != nil {
			t.Fatal(err)
		}
		back := make([]byte, n)
		if _, err := f.ReadAt(back, 0); err != nil || !bytes.Equal(back, want) {
			t.Fatalf("segment %d: WriteSegmentIndex into a file differs from the oracle (%v)", sg.Base, err)
		}
		f.Close()
	}
	return len(segs)
}

// TestSegmentIndexWriterMatchesOracle: the two-pass, bounded-memory build
// makes exactly the blobs the single-pass build made, over random
// segments with gaps, rewritten queue offsets, undispatched transactions,
// consumequeue files cut small, a deleted topic and restored queues.
func TestSegmentIndexWriterMatchesOracle(t *testing.T) {
	queues := []qref{{"A", 0}, {"A", 1}, {"A", 2}, {"B", 0}, {"B", 3}, {"CC", 1}}
	segs := 0
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 7))
		o := testOpts(vfs.NewMem())
		o.SegmentSize = 8 << 10
		o.MaxMessageSize = 2 << 10
		o.CQEntriesPerFile = 8
		s := mustOpen(t, o)
		fillIndexMix(t, s, rng, queues, 300)
		if seed%2 == 1 {
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if seed == 3 {
			if err := s.DeleteTopic("B"); err != nil {
				t.Fatal(err)
			}
		}
		if seed == 4 {
			// A segment of undispatched records only: no entries, every
			// queue's next offset.
			tx := msg("A", 1, "prepared")
			tx.SysFlag = sysFlagTxPrepared
			for range 3 {
				pos := s.MaxPhysOffset()
				if err := s.AppendRaw(pos, encodeTestRecord(tx, 0, pos, 1700000000000)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.SealActive(); err != nil {
				t.Fatal(err)
			}
			sgs := s.SealedSegments()
			x, err := s.BuildSegmentIndex(sgs[len(sgs)-1].Base)
			if err != nil {
				t.Fatal(err)
			}
			if d, err := DecodeSegmentIndex(x); err != nil || d.nEntries != 0 || len(d.Queues) == 0 {
				t.Fatalf("index of a segment of prepared transactions: %v", err)
			}
		}
		segs += checkIndexAgainstOracle(t, s)
		mustClose(t, s)
	}

	// Restored queues (a cold range below the local consumequeue).
	f := newRestoreFixture(t, 200)
	b := mustOpen(t, f.opts(vfs.NewMem()))
	defer mustClose(t, b)
	fillIndexMix(t, b, rand.New(rand.NewPCG(9, 9)), f.queues, 200)
	segs += checkIndexAgainstOracle(t, b)
	t.Logf("%d segments compared", segs)
}

// tinyMessageSegment fills one sealed segment of about segBytes on the
// real filesystem with 16-byte messages over nq queues, written as
// replicated records in 1 MiB batches.
func tinyMessageSegment(t testing.TB, segBytes int64, nq int) (*Store, int64) {
	t.Helper()
	o := testOpts(vfs.OS())
	o.Dir = filepath.Join(t.TempDir(), "store")
	o.SegmentSize = segBytes
	o.MaxMessageSize = 4 << 10
	o.CQEntriesPerFile = 1 << 20
	s := mustOpen(t, o)
	t.Cleanup(func() { s.Close() })
	next := make([]int64, nq)
	rng := rand.New(rand.NewPCG(1, 1))
	m := Message{Topic: "Tiny", Body: bytes.Repeat([]byte{'b'}, 16), BornHost: testBornHost, BornTimestamp: 1700000000000,
		Properties: "TAGS\x01t\x02"}
	size, _ := encodedSize(&m, false)
	var raw []byte
	for pos := int64(0); pos+int64(size) <= segBytes; {
		raw = raw[:0]
		for len(raw)+size <= 1<<20 && pos+int64(len(raw)+size) <= segBytes {
			m.QueueID = int32(rng.IntN(nq))
			raw = encodeAppend(raw, &m, next[m.QueueID], pos+int64(len(raw)))
			next[m.QueueID]++
		}
		if err := s.AppendRaw(pos, raw); err != nil {
			t.Fatal(err)
		}
		pos += int64(len(raw))
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	return s, 0
}

func encodeAppend(dst []byte, m *Message, qoff, phys int64) []byte {
	size, sys := encodedSize(m, false)
	return appendRecord(dst, m, size, sys, qoff, phys, 1700000000000, testStoreHost)
}

// heapPeak runs fn and returns how far the heap's object bytes rose above
// where they were before it, sampled every millisecond (with GOGC=10, so
// garbage does not hide what is live).
func heapPeak(fn func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if v := read(); v > peak {
				peak = v
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	fn()
	close(stop)
	wg.Wait()
	if v := read(); v > peak {
		peak = v
	}
	return max(peak, base) - base
}

// TestSegmentIndexBuildMemoryBounded: building the queue index of a
// segment of tiny messages holds fixed buffers and a few hundred bytes per
// queue, not the index: heap growth stays under 3 MiB + 512 bytes per
// queue while the blob is larger than that (the single-pass build grew by
// over twice the blob), with 8 queues and with 1024. BuildSegmentIndex
// adds just the blob it returns (checked with 8). Long form (STRATAMQ_LONG=1): a 250 MiB
// segment.
func TestSegmentIndexBuildMemoryBounded(t *testing.T) {
	long := os.Getenv("STRATAMQ_LONG") == "1"
	for _, nq := range []int{8, 1024} {
		segBytes := int64(32 << 20)
		if nq > 8 {
			segBytes = 24 << 20 // enough for a blob above the bound
		}
		if long {
			segBytes = 250 << 20
		}
		t.Run(fmt.Sprintf("queues=%d", nq), func(t *testing.T) {
			s, base := tinyMessageSegment(t, segBytes, nq)
			f, err := os.CreateTemp(t.TempDir(), "idx")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var size int64
			start := time.Now()
			growth := heapPeak(func() { size, err = s.WriteSegmentIndex(base, f) })
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			bound := uint64(3<<20 + 512*nq)
			t.Logf("segment %d MiB, %d queues: blob %.1f MiB, heap growth %.2f MiB (bound %.2f MiB), %v",
				segBytes>>20, nq, float64(size)/(1<<20), float64(growth)/(1<<20), float64(bound)/(1<<20), took)
			if size <= int64(bound) {
				t.Fatalf("blob of %d bytes is too small to tell a bounded build from one holding it", size)
			}
			if growth > bound {
				t.Fatalf("building a %d-byte blob grew the heap by %d bytes, want <= %d", size, growth, bound)
			}
			blob := make([]byte, size)
			if _, err := f.ReadAt(blob, 0); err != nil {
				t.Fatal(err)
			}
			if nq == 8 {
				var mem []byte
				growth = heapPeak(func() { mem, err = s.BuildSegmentIndex(base) })
				if err != nil || !bytes.Equal(mem, blob) {
					t.Fatalf("BuildSegmentIndex differs from the file WriteSegmentIndex wrote (%v)", err)
				}
				t.Logf("BuildSegmentIndex: heap growth %.2f MiB", float64(growth)/(1<<20))
				if growth > uint64(size)+bound {
					t.Fatalf("BuildSegmentIndex of a %d-byte blob grew the heap by %d bytes, want <= the blob + %d", size, growth, bound)
				}
			}
			x, err := DecodeSegmentIndex(blob)
			if err != nil {
				t.Fatal(err)
			}
			if len(x.Queues) != nq {
				t.Fatalf("%d queues in the directory, want %d", len(x.Queues), nq)
			}
			for _, q := range x.Queues {
				if mx := s.MaxQueueOffset(q.Topic, q.QueueID); q.FirstOffset != 0 || q.Count != mx {
					t.Fatalf("%s/%d: entries [%d, +%d), queue has %d", q.Topic, q.QueueID, q.FirstOffset, q.Count, mx)
				}
			}
		})
	}
}

// BenchmarkBuildSegmentIndex builds the queue index of a 256 MiB segment of
// 16-byte messages over 8 queues into a file.
func BenchmarkBuildSegmentIndex(b *testing.B) {
	s, base := tinyMessageSegment(b, 256<<20, 8)
	f, err := os.CreateTemp(b.TempDir(), "idx")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.SetBytes(256 << 20)
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.WriteSegmentIndex(base, f); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSegmentIndexWhileWriting: blobs built while Puts (and flushes)
// continue every queue are those built before: the new records are past
// the segment, so neither the tags codes nor the next offsets change.
func TestSegmentIndexWhileWriting(t *testing.T) {
	queues := []qref{{"A", 0}, {"A", 1}, {"B", 0}}
	o := testOpts(vfs.NewMem())
	o.SegmentSize = 8 << 10
	o.MaxMessageSize = 2 << 10
	o.CQEntriesPerFile = 8
	s := mustOpen(t, o)
	defer mustClose(t, s)
	fillIndexMix(t, s, rand.New(rand.NewPCG(5, 5)), queues, 300)
	segs := s.SealedSegments()
	want := map[int64][]byte{}
	for _, sg := range segs {
		b, err := s.oldBuildSegmentIndex(sg.Base)
		if err != nil {
			t.Fatal(err)
		}
		want[sg.Base] = b
	}
	done := make(chan error, 1)
	go func() {
		for i := range 2000 {
			q := queues[i%len(queues)]
			if _, err := s.Put(t.Context(), []Message{msg(q.topic, q.id, fmt.Sprint("more-", i))}); err != nil {
				done <- err
				return
			}
			if i%50 == 0 {
				if err := s.Flush(); err != nil {
					done <- err
					return
				}
			}
		}
		done <- nil
	}()
	for round := 0; ; round++ {
		for _, sg := range segs {
			got, err := s.BuildSegmentIndex(sg.Base)
			if err != nil || !bytes.Equal(got, want[sg.Base]) {
				t.Fatalf("round %d, segment %d: blob changed while writing (%v)", round, sg.Base, err)
			}
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if round == 0 {
				t.Log("the writes ended within the first round")
			}
			return
		default:
		}
	}
}
