package segfile_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stratamq/stratamq/tier/segfile"
)

// countingFile counts the reads a WriteFrom makes of a segment file.
type countingFile struct {
	f     *os.File
	reads atomic.Int64
}

func (c *countingFile) ReadAt(p []byte, off int64) (int, error) {
	c.reads.Add(1)
	return c.f.ReadAt(p, off)
}

// layoutSegment writes a segment file of n records of about size bytes,
// queue i%queues each (a producer sending round robin), and returns it
// with its queue-major layout: one run per record, runs in queue order.
// With bigEvery > 0, every bigEvery-th record is 300-700 KiB instead.
func layoutSegment(tb testing.TB, n, size, queues, bigEvery int) (*os.File, int64, []segfile.Run) {
	tb.Helper()
	rng := rand.New(rand.NewPCG(1, uint64(queues)))
	var data bytes.Buffer
	type rec struct{ off, len int64 }
	byQueue := make([][]rec, queues)
	for i := range n {
		l := size + rng.IntN(64)
		if bigEvery > 0 && i%bigEvery == 3 {
			l = 300<<10 + rng.IntN(400<<10)
		}
		b := make([]byte, l)
		for j := range b {
			b[j] = byte('a' + rng.IntN(8))
		}
		byQueue[i%queues] = append(byQueue[i%queues], rec{int64(data.Len()), int64(l)})
		data.Write(b)
	}
	var runs []segfile.Run
	var pos int64
	for q, rs := range byQueue {
		for _, r := range rs {
			runs = append(runs, segfile.Run{Off: r.off, Len: r.len, Pos: pos, Group: int64(q)})
			pos += r.len
		}
	}
	path := filepath.Join(tb.TempDir(), "seg")
	if err := os.WriteFile(path, data.Bytes(), 0o600); err != nil {
		tb.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f, int64(data.Len()), runs
}

// BenchmarkWriteFromLayout: encoding a 32 MiB segment queue-major from a
// file in the page cache, records of ~1.1 KiB sent round robin to 4, 8 and
// 64 queues (reads per segment reported).
//
//	go test ./tier/segfile -run '^$' -bench WriteFromLayout -benchtime 5x
func BenchmarkWriteFromLayout(b *testing.B) {
	for _, queues := range []int{4, 8, 64} {
		b.Run(fmt.Sprintf("queues=%d", queues), func(b *testing.B) {
			f, size, runs := layoutSegment(b, 30000, 1100, queues, 0)
			cf := &countingFile{f: f}
			b.SetBytes(size)
			for b.Loop() {
				cf.reads.Store(0)
				w, err := segfile.NewWriter(io.Discard, segfile.Options{FrameSize: 1 << 20, Layout: runs})
				if err != nil {
					b.Fatal(err)
				}
				if err := w.WriteFrom(cf, size); err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cf.reads.Load()), "reads/segment")
		})
	}
}
