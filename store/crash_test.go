package store

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

func TestStoreCrashLosesOnlyUnsynced(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprintf("sync/seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			fs := vfs.NewMem()
			o := testOpts(fs)
			o.Flush = FlushSync
			o.SegmentSize = 16 << 10
			o.MaxMessageSize = 4 << 10
			o.FlushInterval = 5 * time.Millisecond // consumequeue flushes and checkpoints race the crash
			o.CQEntriesPerFile = 16
			s := mustOpen(t, o)

			const queues = 4
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			load := putLoad{topic: "C", writers: 8, queues: queues, puts: 2000, maxBatch: 4, maxPad: 1500}.start(ctx, t, s, &wg, seed)
			target := 50 + rng.IntN(400)
			snapshot := load.snapshotWhen(20*time.Second, func(n int) bool { return n >= target })
			crashed := fs.CrashClone()
			cancel()
			wg.Wait()
			mustClose(t, s)
			if len(snapshot) < target {
				t.Fatalf("only %d acks before the deadline", len(snapshot))
			}

			o.FS = crashed
			mustClose(t, openRecovered(t, o, "C", snapshot, queues))
			s3 := mustOpen(t, o)
			checkAcked(t, s3, "C", snapshot)
			mustClose(t, s3)
		})
	}
	t.Run("async/flushed-survives", func(t *testing.T) {
		o := testOpts(vfs.NewMem())
		o.SegmentSize = 16 << 10
		o.MaxMessageSize = 4 << 10
		var flushed, unflushed []Message
		for i := range 200 {
			flushed = append(flushed, msg("A", int32(i%3), fmt.Sprintf("m%d-%s", i, bytes.Repeat([]byte("y"), i*7))))
		}
		for i := range 50 {
			unflushed = append(unflushed, msg("A", int32(i%3), "unflushed"))
		}
		mustClose(t, recoverFlushed(t, o, (*vfs.Mem).CrashClone, "A", 3, flushed, unflushed))
	})
}

func TestStoreRecoverTornTail(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		o := testOpts(vfs.NewMem())
		o.SegmentSize = 8 << 10
		o.MaxMessageSize = 2 << 10
		var flushed, unflushed []Message
		for i := range 30 {
			flushed = append(flushed, msg("T", int32(i%2), fmt.Sprintf("%d-%s", i, bytes.Repeat([]byte("z"), rng.IntN(900)))))
		}
		for i := range 1 + rng.IntN(20) {
			unflushed = append(unflushed, msg("T", int32(i%2), string(bytes.Repeat([]byte("u"), rng.IntN(900)))))
		}
		torn := func(m *vfs.Mem) *vfs.Mem { return m.CrashCloneTorn(rng) }
		mustClose(t, recoverFlushed(t, o, torn, "T", 2, flushed, unflushed))
	}
}

// testRepair writes 30 records over several segments, closes cleanly,
// damages the files with corrupt, reopens and expects the first want
// records of queue P/0 to survive, and nothing after them.
func testRepair(t *testing.T, corrupt func(t *testing.T, fs *vfs.Mem, res []PutResult), want int) {
	t.Helper()
	fs := vfs.NewMem()
	o := testOpts(fs)
	o.SegmentSize = 4 << 10
	o.MaxMessageSize = 2 << 10
	o.CQEntriesPerFile = 8
	s := mustOpen(t, o)
	var res []PutResult
	var acks []acked
	for i := range 30 {
		m := msg("P", 0, fmt.Sprintf("%02d-%s", i, bytes.Repeat([]byte("r"), 300+i*10)))
		res = append(res, putAcked(t, s, &acks, m)...)
	}
	if n := len(s.SealedSegments()); n < 2 {
		t.Fatalf("want several segments, have %d sealed", n)
	}
	mustClose(t, s)
	corrupt(t, fs, res)
	s = mustOpen(t, o)
	checkAcked(t, s, "P", acks[:want])
	if got := s.MaxQueueOffset("P", 0); got != int64(want) {
		t.Fatalf("max queue offset %d, want %d", got, want)
	}
	wantEnd := int64(0)
	if want > 0 {
		wantEnd = res[want-1].PhysOffset + int64(res[want-1].Size)
	}
	if got := s.MaxPhysOffset(); got != wantEnd {
		t.Fatalf("log ends at %d, want %d", got, wantEnd)
	}
	checkConsistent(t, s, "P", 1)
	mustClose(t, s)
	s = mustOpen(t, o) // and it stays repaired
	checkConsistent(t, s, "P", 1)
	mustClose(t, s)
}

// segOf returns the path and base of the segment holding off.
func segOf(t *testing.T, fs *vfs.Mem, off int64) (string, int64) {
	t.Helper()
	names, err := fs.ReadDir("/data/store/commitlog")
	if err != nil {
		t.Fatal(err)
	}
	for i := len(names) - 1; i >= 0; i-- {
		base, _ := parseSegmentName(names[i])
		if base <= off {
			return "/data/store/commitlog/" + names[i], base
		}
	}
	t.Fatalf("no segment holds %d", off)
	return "", 0
}

func modify(t *testing.T, fs *vfs.Mem, path string, fn func(f vfs.File)) {
	t.Helper()
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fn(f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStoreRepair(t *testing.T) {
	t.Run("torn last record", func(t *testing.T) {
		testRepair(t, func(t *testing.T, fs *vfs.Mem, res []PutResult) {
			path, base := segOf(t, fs, res[29].PhysOffset)
			modify(t, fs, path, func(f vfs.File) { f.Truncate(res[29].PhysOffset - base + 50) })
		}, 29)
	})
	t.Run("torn middle record, checkpoint lost", func(t *testing.T) {
		testRepair(t, func(t *testing.T, fs *vfs.Mem, res []PutResult) {
			path, base := segOf(t, fs, res[15].PhysOffset)
			modify(t, fs, path, func(f vfs.File) { f.WriteAt([]byte("XX"), res[15].PhysOffset-base+100) })
			fs.Remove("/data/store/checkpoint")
		}, 15)
	})
	t.Run("torn middle record after an unclean shutdown", func(t *testing.T) {
		testRepair(t, func(t *testing.T, fs *vfs.Mem, res []PutResult) {
			path, base := segOf(t, fs, res[20].PhysOffset)
			modify(t, fs, path, func(f vfs.File) { f.WriteAt([]byte{0xff, 0xff}, res[20].PhysOffset-base) })
			fs.Remove("/data/store/checkpoint")
			f, err := fs.OpenFile("/data/store/abort", os.O_CREATE|os.O_RDWR, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}, 20)
	})
	t.Run("zeroed tail", func(t *testing.T) {
		testRepair(t, func(t *testing.T, fs *vfs.Mem, res []PutResult) {
			path, base := segOf(t, fs, res[29].PhysOffset)
			modify(t, fs, path, func(f vfs.File) { f.WriteAt(make([]byte, 300), res[29].PhysOffset-base+int64(res[29].Size)) })
		}, 30)
	})
	t.Run("log cut at a record boundary: consumequeue trimmed", func(t *testing.T) {
		testRepair(t, func(t *testing.T, fs *vfs.Mem, res []PutResult) {
			path, base := segOf(t, fs, res[21].PhysOffset)
			modify(t, fs, path, func(f vfs.File) { f.Truncate(res[21].PhysOffset - base) })
			// later segments are gone too
			names, _ := fs.ReadDir("/data/store/commitlog")
			for _, n := range names {
				if b, _ := parseSegmentName(n); b > base {
					fs.Remove("/data/store/commitlog/" + n)
				}
			}
		}, 21)
	})
	t.Run("truncated consumequeue is rebuilt", func(t *testing.T) {
		testRepair(t, func(t *testing.T, fs *vfs.Mem, res []PutResult) {
			names, _ := fs.ReadDir("/data/store/consumequeue/P/0")
			for _, n := range names[1:] {
				fs.Remove("/data/store/consumequeue/P/0/" + n)
			}
			modify(t, fs, "/data/store/consumequeue/P/0/"+names[0], func(f vfs.File) { f.Truncate(5*cqEntrySize + 7) })
		}, 30)
	})
	t.Run("deleted consumequeue is rebuilt", func(t *testing.T) {
		testRepair(t, func(t *testing.T, fs *vfs.Mem, res []PutResult) {
			fs.RemoveAll("/data/store/consumequeue/P")
		}, 30)
	})
	t.Run("garbage checkpoint", func(t *testing.T) {
		testRepair(t, func(t *testing.T, fs *vfs.Mem, res []PutResult) {
			modify(t, fs, "/data/store/checkpoint", func(f vfs.File) { f.WriteAt([]byte("garbage"), 3) })
		}, 30)
	})
	t.Run("first record torn", func(t *testing.T) {
		testRepair(t, func(t *testing.T, fs *vfs.Mem, res []PutResult) {
			modify(t, fs, "/data/store/commitlog/00000000000000000000", func(f vfs.File) { f.WriteAt([]byte{1}, 95) })
			fs.Remove("/data/store/checkpoint")
		}, 0)
	})
}
