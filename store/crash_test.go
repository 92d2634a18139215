package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

type acked struct {
	qid  int32
	qoff int64
	body string
}

// checkAcked asserts every acked message is in s at its queue offset.
func checkAcked(t *testing.T, s *Store, topic string, acks []acked) {
	t.Helper()
	for _, a := range acks {
		r, err := s.Get(context.Background(), GetRequest{Topic: topic, QueueID: a.qid, Offset: a.qoff, MaxMsgs: 1})
		if err != nil {
			t.Fatalf("get %d@%d: %v", a.qid, a.qoff, err)
		}
		if r.Status != Found {
			t.Fatalf("acked %d@%d (%.20s) lost: %v (max %d)", a.qid, a.qoff, a.body, r.Status, r.MaxOffset)
		}
		rec, _, err := DecodeRecord(r.Records[0])
		if err != nil || string(rec.Body) != a.body {
			t.Fatalf("acked %d@%d: got %.20q, want %.20q (%v)", a.qid, a.qoff, rec.Body, a.body, err)
		}
	}
}

// checkConsistent asserts the recovered log is a clean prefix: every queue
// reads back without error, queue offsets are dense, and a new Put lands at
// the end.
func checkConsistent(t *testing.T, s *Store, topic string, queues int32) {
	t.Helper()
	n := 0
	for q := range queues {
		recs := readQueue(t, s, topic, q)
		for i, r := range recs {
			if r.QueueOffset != int64(i) {
				t.Fatalf("queue %d: record %d has queue offset %d", q, i, r.QueueOffset)
			}
			if r.PhysOffset+int64(r.Size) > s.MaxPhysOffset() {
				t.Fatalf("record past the end of the log")
			}
		}
		if int64(len(recs)) != s.MaxQueueOffset(topic, q) {
			t.Fatalf("queue %d: %d records, max offset %d", q, len(recs), s.MaxQueueOffset(topic, q))
		}
		n += len(recs)
	}
	end := s.MaxPhysOffset()
	res := mustPut(t, s, msg(topic, 0, "after-recovery"))
	if res[0].PhysOffset != end || res[0].QueueOffset != s.MaxQueueOffset(topic, 0)-1 {
		t.Fatalf("put after recovery: %+v (end was %d)", res[0], end)
	}
}

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

			const writers, queues = 8, 4
			var mu sync.Mutex
			var acks []acked
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(seed, uint64(w)))
					for i := 0; i < 2000 && ctx.Err() == nil; i++ {
						var batch []Message
						for j := range 1 + r.IntN(4) {
							body := fmt.Sprintf("w%d-%d-%d-%s", w, i, j, bytes.Repeat([]byte("x"), r.IntN(1500)))
							batch = append(batch, msg("C", int32(w%queues), body))
						}
						res, err := s.Put(ctx, batch)
						if err != nil {
							if !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
								t.Errorf("put: %v", err)
							}
							return
						}
						mu.Lock()
						for k, pr := range res {
							acks = append(acks, acked{batch[k].QueueID, pr.QueueOffset, string(batch[k].Body)})
						}
						mu.Unlock()
					}
				}()
			}
			target := 50 + rng.IntN(400)
			deadline := time.Now().Add(20 * time.Second)
			for {
				mu.Lock()
				n := len(acks)
				mu.Unlock()
				if n >= target || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			mu.Lock()
			snapshot := append([]acked(nil), acks...)
			mu.Unlock()
			crashed := fs.CrashClone()
			cancel()
			wg.Wait()
			mustClose(t, s)
			if len(snapshot) < target {
				t.Fatalf("only %d acks before the deadline", len(snapshot))
			}

			o.FS = crashed
			s2 := mustOpen(t, o)
			checkAcked(t, s2, "C", snapshot)
			checkConsistent(t, s2, "C", queues)
			mustClose(t, s2)
			s3 := mustOpen(t, o)
			checkAcked(t, s3, "C", snapshot)
			mustClose(t, s3)
		})
	}
	t.Run("async/flushed-survives", func(t *testing.T) {
		fs := vfs.NewMem()
		o := testOpts(fs)
		o.SegmentSize = 16 << 10
		o.MaxMessageSize = 4 << 10
		s := mustOpen(t, o)
		var acks []acked
		for i := range 200 {
			m := msg("A", int32(i%3), fmt.Sprintf("m%d-%s", i, bytes.Repeat([]byte("y"), i*7)))
			res := mustPut(t, s, m)
			acks = append(acks, acked{m.QueueID, res[0].QueueOffset, string(m.Body)})
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			mustPut(t, s, msg("A", int32(i%3), "unflushed"))
		}
		crashed := fs.CrashClone()
		mustClose(t, s)
		o.FS = crashed
		s2 := mustOpen(t, o)
		defer mustClose(t, s2)
		checkAcked(t, s2, "A", acks)
		checkConsistent(t, s2, "A", 3)
	})
}

func TestStoreRecoverTornTail(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		fs := vfs.NewMem()
		o := testOpts(fs)
		o.SegmentSize = 8 << 10
		o.MaxMessageSize = 2 << 10
		s := mustOpen(t, o)
		var acks []acked
		for i := range 30 {
			m := msg("T", int32(i%2), fmt.Sprintf("%d-%s", i, bytes.Repeat([]byte("z"), rng.IntN(900))))
			res := mustPut(t, s, m)
			acks = append(acks, acked{m.QueueID, res[0].QueueOffset, string(m.Body)})
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		for i := range 1 + rng.IntN(20) {
			mustPut(t, s, msg("T", int32(i%2), string(bytes.Repeat([]byte("u"), rng.IntN(900)))))
		}
		crashed := fs.CrashCloneTorn(rng)
		mustClose(t, s)
		o.FS = crashed
		s2 := mustOpen(t, o)
		checkAcked(t, s2, "T", acks)
		checkConsistent(t, s2, "T", 2)
		mustClose(t, s2)
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
		r := mustPut(t, s, m)
		res = append(res, r...)
		acks = append(acks, acked{0, r[0].QueueOffset, string(m.Body)})
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
