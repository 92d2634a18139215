package store

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// BenchmarkReclaimSteadyState writes histories of 10x, 30x and 100x the
// local retention on the real filesystem, dropping segments as the broker
// does (each sealed segment's queue index is built and "uploaded", then
// the oldest segments are dropped while more than the retention is local),
// and reports, at the end of each history, the local consumequeue bytes
// and files, the store's open consumequeue descriptors and the process's
// open fds. With reclaim they stay flat; reclaim=false (no cold index: the
// store before issue 12 item 2) grows with history.
//
//	go test ./store -run '^$' -bench ReclaimSteadyState -benchtime 1x
func BenchmarkReclaimSteadyState(b *testing.B) {
	for _, reclaim := range []bool{true, false} {
		for _, mult := range []int{10, 30, 100} {
			b.Run(fmt.Sprintf("reclaim=%v/history=%dx", reclaim, mult), func(b *testing.B) {
				for range b.N {
					reclaimHistory(b, reclaim, mult)
				}
			})
		}
	}
}

// noCold is a ColdReader for a benchmark that never reads cold bytes.
type noCold struct{}

func (noCold) ReadAt(ctx context.Context, off int64, p []byte) (int, error) {
	return 0, fmt.Errorf("bench: no cold bytes: %w", ErrNotFound)
}

func reclaimHistory(b *testing.B, reclaim bool, mult int) {
	const (
		segSize = 1 << 20
		keep    = 4 // local retention, in sealed segments
		queues  = 64
		perFile = 1024 // entries per consumequeue file
	)
	dir := b.TempDir()
	baseFDs := countFDs(b)
	idx := newFakeIndex()
	o := Options{
		FS: vfs.OS(), Dir: dir, SegmentSize: segSize, StoreHost: testStoreHost, Logger: quietLog,
		CQEntriesPerFile: perFile, Cold: noCold{}, MaxMessageSize: 64 << 10,
	}
	if reclaim {
		o.ColdIndex = idx
	}
	s, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	body := make([]byte, 256)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	batch := make([]Message, queues)
	for i := range batch {
		batch[i] = Message{Topic: "History", QueueID: int32(i), Body: body, BornHost: testBornHost,
			Properties: "TAGS\x01a\x02", TagsCode: 97}
	}
	history := int64(mult) * keep * segSize
	ctx := context.Background()
	dropped := 0
	b.ResetTimer()
	for s.MaxPhysOffset() < history {
		if _, err := s.Put(ctx, batch); err != nil {
			b.Fatal(err)
		}
		segs := s.SealedSegments()
		for len(segs) > keep {
			// As the broker: the segment, its queue index and key index are
			// uploaded before the drop (only the index blob is kept here).
			blob, err := s.BuildSegmentIndex(segs[0].Base)
			if err != nil {
				b.Fatal(err)
			}
			idx.mu.Lock()
			idx.blobs[segs[0].Base] = blob
			idx.mu.Unlock()
			if err := s.DropSegment(segs[0].Base); err != nil {
				b.Fatal(err)
			}
			dropped++
			segs = segs[1:]
		}
	}
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if reclaim {
		// Entries below the local log still answer, from the cold index.
		if _, _, _, ok, err := s.QueueEntry("History", 0, s.MinQueueOffset("History", 0)); err != nil || !ok {
			b.Fatalf("first entry of History/0: %v %v", ok, err)
		}
	}
	var cqBytes, cqFiles int64
	filepath.WalkDir(filepath.Join(dir, "consumequeue"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				cqBytes += fi.Size()
				cqFiles++
			}
		}
		return nil
	})
	b.ReportMetric(float64(history>>20), "history-MiB")
	b.ReportMetric(float64(dropped), "segs-dropped")
	b.ReportMetric(float64(s.MaxQueueOffset("History", 0)), "entries/queue")
	b.ReportMetric(float64(cqBytes), "cq-bytes")
	b.ReportMetric(float64(cqFiles), "cq-files")
	b.ReportMetric(float64(s.fds.openCount()), "cq-fds")
	b.ReportMetric(float64(countFDs(b)-baseFDs), "fds")
}

// countFDs is the number of open file descriptors of the process (Linux;
// 0 elsewhere).
func countFDs(b *testing.B) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}
