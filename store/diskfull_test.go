package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/logtest"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
)

// noSpace is an errorfs injector: while on, the operations match selects
// fail with ENOSPC (the disk is full for them; statfs still reports room,
// so only the failed work keeps the store refusing). before, when set,
// runs first for each failing operation (to simulate what the kernel does
// to the pages of a failed writeback).
type noSpace struct {
	on     atomic.Bool
	hits   atomic.Int64
	match  func(op errorfs.Op, path string) bool
	before func(op errorfs.Op, path string)
}

func (n *noSpace) MaybeError(op errorfs.Op, path string) error {
	if !n.on.Load() || !n.match(op, path) {
		return nil
	}
	n.hits.Add(1)
	if n.before != nil {
		n.before(op, path)
	}
	return syscall.ENOSPC
}

// diskFullCase is one place where the disk runs out of space.
type diskFullCase struct {
	name  string
	mode  FlushMode
	match func(op errorfs.Op, path string) bool
	// hit runs the store into the failure (s is open, inj on) and returns
	// the error the store reported for it.
	hit func(t *testing.T, s *Store, put func(qid int32, body string) error) error
}

func inDir(dir string) func(errorfs.Op, string) bool {
	return func(_ errorfs.Op, path string) bool { return strings.Contains(path, "/"+dir+"/") }
}

func opIn(op errorfs.Op, dir string) func(errorfs.Op, string) bool {
	return func(o errorfs.Op, path string) bool { return o == op && strings.Contains(path, "/"+dir+"/") }
}

// TestStoreDiskFullRecovers runs the disk out of space at each write path
// of the store: the store answers ErrDiskFull (never a sticky error) while
// the failed work is owed, redoes it once space is back, takes Puts again,
// and every acknowledged message is readable, also after a crash.
func TestStoreDiskFullRecovers(t *testing.T) {
	flushFails := func(t *testing.T, s *Store, put func(int32, string) error) error {
		if err := put(0, "before the flush"); err != nil {
			t.Fatalf("put before the failing flush: %v", err)
		}
		return s.Flush()
	}
	cases := []diskFullCase{
		{name: "checkpoint", match: func(op errorfs.Op, path string) bool {
			return op == errorfs.OpFileWrite && strings.Contains(path, "/"+checkpointName+".tmp")
		}, hit: flushFails},
		{name: "checkpoint-rename-dir-sync", match: func(op errorfs.Op, path string) bool {
			return op == errorfs.OpFileSync && path == "/data/store"
		}, hit: flushFails},
		{name: "consumequeue-write", match: opIn(errorfs.OpFileWriteAt, "consumequeue"), hit: flushFails},
		{name: "consumequeue-sync", match: opIn(errorfs.OpFileSync, "consumequeue"), hit: flushFails},
		{name: "consumequeue-file-create", match: opIn(errorfs.OpOpen, "consumequeue"), hit: func(t *testing.T, s *Store, put func(int32, string) error) error {
			for i := range 5 { // a new consumequeue file (CQEntriesPerFile 4)
				if err := put(0, fmt.Sprintf("cq file %d", i)); err != nil {
					t.Fatal(err)
				}
			}
			return s.Flush()
		}},
		{name: "consumequeue-dir", match: func(op errorfs.Op, path string) bool {
			return op == errorfs.OpMkdirAll && strings.Contains(path, "/consumequeue/")
		}, hit: func(t *testing.T, s *Store, put func(int32, string) error) error {
			if err := put(3, "first of a new queue"); err != nil { // a new queue directory
				t.Fatal(err)
			}
			return s.Flush()
		}},
		{name: "segment-roll", match: opIn(errorfs.OpOpen, "commitlog"), hit: func(t *testing.T, s *Store, put func(int32, string) error) error {
			var err error
			for i := 0; i < 100 && err == nil; i++ { // until the active segment is full
				err = put(1, fmt.Sprintf("roll %d %s", i, bytes.Repeat([]byte("r"), 900)))
			}
			return err
		}},
		{name: "commitlog-fdatasync-async", match: opIn(errorfs.OpFileSync, "commitlog"), hit: flushFails},
		{name: "commitlog-fdatasync-sync", mode: FlushSync, match: opIn(errorfs.OpFileSync, "commitlog"), hit: func(t *testing.T, s *Store, put func(int32, string) error) error {
			// The write is in the log; its fdatasync failed: not acknowledged.
			if err := put(0, "not durable"); !errors.Is(err, ErrFlushTimeout) {
				t.Fatalf("put whose fdatasync failed for space: %v, want ErrFlushTimeout", err)
			}
			return s.Flush()
		}},
		{name: "zero-filler-fdatasync", mode: FlushSync, match: opIn(errorfs.OpFileSync, "commitlog"), hit: func(t *testing.T, s *Store, put func(int32, string) error) error {
			s.opts.ZeroAhead = 64 << 10
			_, err := s.zeroStep(make([]byte, zeroChunk))
			return err
		}},
		{name: "zero-filler-write", mode: FlushSync, match: opIn(errorfs.OpFileWriteAt, "commitlog"), hit: func(t *testing.T, s *Store, put func(int32, string) error) error {
			s.opts.ZeroAhead = 64 << 10
			if _, err := s.zeroStep(make([]byte, zeroChunk)); !errors.Is(err, errZeroNoSpace) {
				t.Fatalf("zero-fill on a full disk: %v", err)
			}
			return put(0, "the write itself fails") // cut back, not sticky
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { testDiskFullCase(t, c) })
	}
}

func testDiskFullCase(t *testing.T, c diskFullCase) {
	mem := vfs.NewMem()
	inj := &noSpace{match: c.match}
	logs := &logtest.Recorder{}
	o := testOpts(errorfs.Wrap(mem, inj))
	o.SegmentSize = 16 << 10
	o.MaxMessageSize = 2 << 10
	o.CQEntriesPerFile = 4
	o.Flush = c.mode
	o.SyncFlushTimeout = 200 * time.Millisecond
	o.ZeroAhead = -1 // the zero cases run zeroStep themselves
	o.Logger = slog.New(logs)
	s := mustOpen(t, o)
	defer func() { s.Close() }()
	var acks []acked
	n := 0
	put := func(qid int32, body string) error {
		n++
		m := msg("S", qid, fmt.Sprintf("%d:%s", n, body))
		res, err := s.Put(context.Background(), []Message{m})
		if err == nil {
			acks = append(acks, acked{qid, res[0].QueueOffset, string(m.Body)})
		}
		return err
	}
	for i := range 6 {
		if err := put(int32(i%3), "before"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}

	inj.on.Store(true)
	err := c.hit(t, s, put)
	if inj.hits.Load() == 0 {
		t.Fatalf("nothing hit the full disk (err %v)", err)
	}
	if !errors.Is(err, ErrDiskFull) && !errors.Is(err, errZeroNoSpace) {
		t.Fatalf("failure for space: %v, want ErrDiskFull", err)
	}
	if serr := s.stickyErr(); serr != nil {
		t.Fatalf("ENOSPC became sticky: %v", serr)
	}
	// While the disk is full: refused with ErrDiskFull, nothing stored.
	maxBefore := s.MaxQueueOffset("S", 2)
	for i := range 3 {
		if err := put(2, "while full"); !errors.Is(err, ErrDiskFull) {
			if c.name == "zero-filler-write" && err == nil {
				continue // only the filler's own write failed: nothing is owed
			}
			t.Fatalf("put %d while the disk is full: %v, want ErrDiskFull", i, err)
		}
	}
	if c.name != "zero-filler-write" && s.MaxQueueOffset("S", 2) != maxBefore {
		t.Fatalf("refused puts took queue offsets")
	}
	if got := logs.CountPrefix("store: disk full; refusing writes"); got != 1 {
		t.Fatalf("%d log lines entering the disk-full state, want 1", got)
	}

	// Space is freed: the owed work is redone, writes resume.
	inj.on.Store(false)
	if err := s.Flush(); err != nil {
		t.Fatalf("flush after space was freed: %v", err)
	}
	s.checkDiskFull()
	for i := range 4 {
		if err := put(int32(i%3), "after"); err != nil {
			t.Fatalf("put after space was freed: %v", err)
		}
	}
	if s.DiskFull() {
		t.Fatal("still in the disk-full state")
	}
	if got := logs.CountPrefix("store: disk space available again"); got != 1 {
		t.Fatalf("%d log lines leaving the disk-full state, want 1", got)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	checkAcked(t, s, "S", acks)
	checkConsistent(t, s, "S", 4)
	acks = acks[:len(acks):len(acks)]

	// Everything acknowledged survives a power loss.
	o2 := o
	o2.FS = mem.CrashClone()
	o2.Logger = quietLog
	s2 := mustOpen(t, o2)
	checkAcked(t, s2, "S", acks)
	mustClose(t, s2)
}

// The flusher redoes failed work on its own: the disk fills up under a
// running store (Puts refused for the reserve, with a remark naming the
// free space), then its checkpoint write fails too; once space is freed
// Puts succeed again within a few flush intervals without anyone calling
// Flush.
func TestStoreDiskFullRecoversByItself(t *testing.T) {
	mem := vfs.NewMem()
	inj := &noSpace{match: func(op errorfs.Op, path string) bool {
		return op == errorfs.OpFileWrite && strings.Contains(path, "/"+checkpointName+".tmp")
	}}
	o := testOpts(errorfs.Wrap(mem, inj))
	o.FlushInterval = 20 * time.Millisecond
	o.MinFreeBytes = 8 << 10
	o.Flush = FlushSync
	s := mustOpen(t, o)
	defer mustClose(t, s)
	var acks []acked
	i := 0
	put := func() error {
		i++
		m := msg("R", int32(i%2), fmt.Sprintf("%d-%0900d", i, i))
		res, err := s.Put(context.Background(), []Message{m})
		if err == nil {
			acks = append(acks, acked{m.QueueID, res[0].QueueOffset, string(m.Body)})
		}
		return err
	}
	mem.SetFreeSpace(64 << 10)
	var err error
	for n := 0; n < 1000 && err == nil; n++ {
		err = put()
	}
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "free") || !strings.Contains(err.Error(), "reserve") {
		t.Fatalf("filling the disk: %v, want ErrDiskFull naming the free space and the reserve", err)
	}
	mem.SetFreeSpace(1 << 30)
	if err := put(); err != nil {
		t.Fatalf("put after space was freed: %v", err)
	}
	// The disk is full for the checkpoint: the flusher fails, the store
	// refuses writes until a round succeeds.
	inj.on.Store(true)
	// A record written now makes the next round owe a checkpoint, however
	// long ago the flusher checkpointed the last one (a busy machine may
	// run a round between that put and the injection). It is refused if
	// a round already failed for a checkpoint still owed.
	if err := put(); err != nil && !errors.Is(err, ErrDiskFull) {
		t.Fatalf("put as the checkpoint starts failing: %v", err)
	}
	waitFor(t, "the flusher's checkpoint to fail", s.owing)
	if err := put(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("put while the checkpoint fails for space: %v, want ErrDiskFull", err)
	}
	inj.on.Store(false)
	waitFor(t, "puts to succeed again", func() bool {
		err := put()
		if err != nil && !errors.Is(err, ErrDiskFull) {
			t.Fatalf("put after space was freed: %v", err)
		}
		return err == nil
	})
	waitFor(t, "the disk-full state to end", func() bool { return !s.DiskFull() })
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	checkAcked(t, s, "R", acks)
	o.FS = mem.CrashClone()
	s2 := openRecovered(t, o, "R", acks, 2)
	mustClose(t, s2)
}

// fsyncgate: after a failed writeback the kernel may drop the data of the
// pages it could not write. A commitlog whose bytes are gone after an
// fdatasync failed for space is never reported durable: the range is
// verified before flushed moves, and the loss is a sticky corruption.
func TestStoreDiskFullCommitlogPagesDropped(t *testing.T) {
	mem := vfs.NewMem()
	inj := &noSpace{match: opIn(errorfs.OpFileSync, "commitlog")}
	var end atomic.Int64 // of the records in the (first) segment: zeros may follow them
	inj.before = func(_ errorfs.Op, path string) { zeroBefore(t, mem, path, end.Load(), 300) }
	o := testOpts(errorfs.Wrap(mem, inj))
	s := mustOpen(t, o)
	defer s.Close()
	mustPut(t, s, msg("P", 0, "durable"))
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, msg("P", 0, strings.Repeat("lost", 200)))
	end.Store(s.MaxPhysOffset())
	inj.on.Store(true)
	if err := s.Flush(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("flush: %v", err)
	}
	inj.on.Store(false)
	if err := s.Flush(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flush over dropped pages: %v, want ErrCorrupt", err)
	}
	if _, err := s.Put(context.Background(), []Message{msg("P", 0, "x")}); err == nil || errors.Is(err, ErrDiskFull) {
		t.Fatalf("put after the loss: %v, want the sticky corruption", err)
	}
}

// The same for a consumequeue: its entries are written again from the
// commitlog, so nothing is lost.
func TestStoreDiskFullQueuePagesDropped(t *testing.T) {
	mem := vfs.NewMem()
	inj := &noSpace{match: opIn(errorfs.OpFileSync, "consumequeue")}
	inj.before = func(_ errorfs.Op, path string) { zeroTail(t, mem, path, 2*cqEntrySize) }
	o := testOpts(errorfs.Wrap(mem, inj))
	s := mustOpen(t, o)
	defer mustClose(t, s)
	var acks []acked
	for i := range 3 {
		putAcked(t, s, &acks, msg("Q", 0, fmt.Sprintf("q%d", i)))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 6; i++ {
		putAcked(t, s, &acks, msg("Q", 0, fmt.Sprintf("q%d", i)))
	}
	inj.on.Store(true)
	if err := s.Flush(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("flush: %v", err)
	}
	inj.on.Store(false)
	if err := s.Flush(); err != nil {
		t.Fatalf("flush after space was freed: %v", err)
	}
	checkAcked(t, s, "Q", acks)
	o.FS = mem.CrashClone()
	s2 := openRecovered(t, o, "Q", acks, 1)
	mustClose(t, s2)
}

// zeroTail zeroes the last n bytes of path in mem (pages of a failed
// writeback dropped).
func zeroTail(t *testing.T, mem *vfs.Mem, path string, n int64) {
	f, err := mem.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Errorf("zero tail: %v", err)
		return
	}
	fi, _ := f.Stat()
	f.Close()
	zeroBefore(t, mem, path, fi.Size(), n)
}

// zeroBefore zeroes the n bytes of path in mem that end at end.
func zeroBefore(t *testing.T, mem *vfs.Mem, path string, end, n int64) {
	f, err := mem.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Errorf("zero bytes: %v", err)
		return
	}
	defer f.Close()
	off := max(end-n, 0)
	if _, err := f.WriteAt(make([]byte, end-off), off); err != nil {
		t.Errorf("zero bytes: %v", err)
	}
}

// The default reserve fits small volumes: 5% of the volume, at most 256 MiB.
func TestStoreDefaultMinFree(t *testing.T) {
	for _, c := range []struct{ total, want uint64 }{
		{64 << 20, 64 << 20 / 20},
		{100 << 30, 256 << 20},
		{0, 1},
	} {
		mem := vfs.NewMem()
		mem.SetTotalSpace(c.total)
		o := testOpts(mem)
		o.MinFreeBytes = 0
		s := mustOpen(t, o)
		if s.opts.MinFreeBytes != c.want {
			t.Errorf("volume of %d bytes: reserve %d, want %d", c.total, s.opts.MinFreeBytes, c.want)
		}
		mustClose(t, s)
	}
}

// Item 11b: restored state present, checkpoint missing or damaged: Open
// recovers (full rescan of the local log, or the log continues at the
// restore point) instead of panicking on the missing checkpoint.
func TestStoreRestoredWithoutCheckpoint(t *testing.T) {
	for _, c := range []struct {
		name     string
		damage   func(t *testing.T, m *vfs.Mem)
		keepAcks bool
	}{
		{"checkpoint-missing", func(t *testing.T, m *vfs.Mem) { removeDurably(t, m, "/data/store/"+checkpointName) }, true},
		{"checkpoint-damaged", func(t *testing.T, m *vfs.Mem) {
			if err := vfs.WriteFileAtomic(m, "/data/store/"+checkpointName, []byte("SMQCKPT2 not a checkpoint")); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"checkpoint-and-commitlog-missing", func(t *testing.T, m *vfs.Mem) {
			removeDurably(t, m, "/data/store/"+checkpointName)
			names, _ := m.ReadDir("/data/store/commitlog")
			for _, n := range names {
				removeDurably(t, m, "/data/store/commitlog/"+n)
			}
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewMem()
			o := testOpts(mem)
			o.Restore = &Restore{CommitLogStart: 5000, Queues: map[string]map[int32]QueueRange{"W": {0: {Min: 2, Max: 10}}}}
			s := mustOpen(t, o)
			var acks []acked
			for i := range 5 {
				putAcked(t, s, &acks, msg("W", 0, fmt.Sprintf("w%d", i)))
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			crashed := mem.CrashClone()
			mustClose(t, s)
			c.damage(t, crashed)
			o.FS, o.Restore = crashed, nil
			s2 := mustOpen(t, o)
			defer mustClose(t, s2)
			if c.keepAcks {
				checkAcked(t, s2, "W", acks)
			}
			if mn := s2.MinQueueOffset("W", 0); mn != 2 {
				t.Fatalf("restored queue's min %d, want 2", mn)
			}
			res := mustPut(t, s2, msg("W", 0, "after"))
			if res[0].PhysOffset < 5000 || res[0].QueueOffset < 10 {
				t.Fatalf("put after recovery at %+v: offsets below the restore point reused", res[0])
			}
		})
	}
}

func removeDurably(t *testing.T, m *vfs.Mem, path string) {
	t.Helper()
	if err := m.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(m, filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
}

// At the threshold (small Puts fit above the reserve, big ones do not) the
// disk-full state starts once and does not flap with every request.
func TestStoreDiskFullLogsOncePerEpisode(t *testing.T) {
	mem := vfs.NewMem()
	logs := &logtest.Recorder{}
	o := testOpts(mem)
	o.MinFreeBytes = 16 << 10
	o.Logger = slog.New(logs)
	s := mustOpen(t, o)
	defer mustClose(t, s)
	mem.SetFreeSpace(20 << 10)
	for i := range 10 {
		if _, err := s.Put(context.Background(), []Message{msg("T", 0, strings.Repeat("b", 7<<10))}); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("big put %d above the reserve: %v", i, err)
		}
		mustPut(t, s, msg("T", 0, "small"))
	}
	if got := logs.CountPrefix("store: disk full; refusing writes"); got != 1 {
		t.Fatalf("%d log lines entering the disk-full state, want 1", got)
	}
	if got := logs.CountPrefix("store: disk space available again"); got != 0 {
		t.Fatalf("%d log lines leaving it while still at the threshold", got)
	}
	mem.SetFreeSpace(1 << 30)
	mustPut(t, s, msg("T", 0, "room again"))
	if s.DiskFull() || logs.CountPrefix("store: disk space available again") != 1 {
		t.Fatal("the disk-full state did not end once with room again")
	}
}
