package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stratamq/stratamq/infra/logtest"
	"github.com/stratamq/stratamq/infra/vfs"
)

// fillZeros runs the zero-filler until it wants no more (the background
// goroutine may run alongside; clSyncMu serializes them), whatever the
// size of the fdatasyncs so far.
func fillZeros(t *testing.T, s *Store) {
	t.Helper()
	s.clSyncMu.Lock()
	s.syncBytes.Store(0)
	s.clSyncMu.Unlock()
	buf := make([]byte, zeroChunk)
	for {
		more, err := s.zeroStep(buf)
		if err != nil {
			t.Fatalf("zero-fill: %v", err)
		}
		if !more {
			return
		}
	}
}

// zeroOpts is testOpts with the flush mode, segment and message size
// limits and ZeroAhead of a zero-filler test.
func zeroOpts(fs vfs.FS, mode FlushMode, segSize int64, maxMsg int, zeroAhead int64) Options {
	o := testOpts(fs)
	o.Flush = mode
	o.SegmentSize, o.MaxMessageSize, o.ZeroAhead = segSize, maxMsg, zeroAhead
	return o
}

// activeTail returns the active segment's path, logical size and zeroEnd.
func activeTail(t *testing.T, s *Store) (string, int64, int64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	sg := s.mu.active
	if sg == nil {
		t.Fatal("no active segment")
	}
	return sg.path, sg.size.Load(), sg.zeroEnd
}

func fileSize(t *testing.T, fs vfs.FS, path string) int64 {
	t.Helper()
	fi, err := fs.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// staleFree makes the writer's next space check run statfs.
func staleFree(s *Store) {
	s.mu.Lock()
	s.mu.freeAt = 0
	s.mu.Unlock()
}

// A crash with the zeroed tail present: every acknowledged record is back,
// the log ends right after the last one, the tail is cut (and logged as the
// clean end, not as corruption), and new Puts continue there.
func TestZeroTailCrash(t *testing.T) {
	for _, mode := range []FlushMode{FlushSync, FlushAsync} {
		t.Run(mode.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			o := zeroOpts(fs, mode, 256<<10, 8<<10, 64<<10)
			s := mustOpen(t, o)
			var acks []acked
			put := func(i int) {
				putAcked(t, s, &acks, msg("Z", int32(i%3), fmt.Sprintf("z%d-%s", i, bytes.Repeat([]byte("q"), i%700))))
			}
			for i := range 20 {
				put(i)
			}
			fillZeros(t, s)
			for i := 20; i < 60; i++ {
				put(i)
			}
			if mode == FlushAsync {
				if err := s.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			end := s.MaxPhysOffset()
			if mode == FlushAsync {
				// Written, never synced: these land in synced zeros, which
				// is what the crash leaves there.
				for i := range 10 {
					mustPut(t, s, msg("Z", int32(i%3), "unsynced"))
				}
			}
			path, size, zeroEnd := activeTail(t, s)
			if phys := fileSize(t, fs, path); phys <= size || zeroEnd <= size {
				t.Fatalf("no zero tail at the crash: file %d, records %d, zeros to %d", phys, size, zeroEnd)
			}
			crashed := fs.CrashClone()
			mustClose(t, s)

			logs := &logtest.Recorder{}
			o.FS, o.Logger = crashed, slog.New(logs)
			s2 := mustOpen(t, o)
			if got := s2.MaxPhysOffset(); got != end {
				t.Fatalf("log ends at %d after the crash, want %d (after the last synced record)", got, end)
			}
			checkAcked(t, s2, "Z", acks)
			for _, sg := range s2.LocalSegments() {
				if n := fileSize(t, crashed, sg.Path); n != sg.Length {
					t.Fatalf("segment %d: file %d bytes, length %d", sg.Base, n, sg.Length)
				}
			}
			if lv := logs.Levels("zero-filled tail"); len(lv) != 1 || lv[0] >= slog.LevelWarn {
				t.Fatalf("zero tail logged at %v, want one info line", lv)
			}
			if lvl, m := logs.Worst(); lvl > slog.LevelWarn || len(logs.Levels("truncating")) > 0 {
				t.Fatalf("recovery logged %v %q for a clean zero tail", lvl, m)
			}
			checkConsistent(t, s2, "Z", 3) // a new Put lands at the end
			mustClose(t, s2)
			s3 := mustOpen(t, o)
			checkAcked(t, s3, "Z", acks)
			mustClose(t, s3)
		})
	}
}

// Sealed segments (roll, SealActive, Close) are cut to their records on
// the real filesystem; only the active one is longer.
func TestZeroTailTrimmedOnSeal(t *testing.T) {
	o := Options{FS: vfs.OS(), Dir: t.TempDir(), Flush: FlushSync, SegmentSize: 1 << 20, MaxMessageSize: 64 << 10,
		ZeroAhead: 256 << 10, StoreHost: testStoreHost, MinFreeBytes: 1, Logger: quietLog, FlushInterval: 5 << 30}
	s := mustOpen(t, o)
	body := string(bytes.Repeat([]byte("b"), 40<<10))
	var acks []acked
	put := func(n int) {
		var batch []Message
		for i := range n {
			batch = append(batch, msg("S", int32(i%2), fmt.Sprintf("%d-%d-%s", len(acks), i, body)))
		}
		putAcked(t, s, &acks, batch...)
	}
	checkSealed := func(when string, wantSealed int) {
		t.Helper()
		sealed := s.SealedSegments()
		if len(sealed) != wantSealed {
			t.Fatalf("%s: %d sealed segments, want %d", when, len(sealed), wantSealed)
		}
		for _, sg := range sealed {
			if n := fileSize(t, o.FS, sg.Path); n != sg.Length {
				t.Fatalf("%s: sealed segment %d: file %d bytes, length %d", when, sg.Base, n, sg.Length)
			}
		}
	}
	expectTail := func(when string) {
		t.Helper()
		fillZeros(t, s)
		path, size, _ := activeTail(t, s)
		if n := fileSize(t, o.FS, path); n <= size {
			t.Fatalf("%s: active segment file %d bytes, records %d: no zero tail", when, n, size)
		}
	}

	put(3) // 120 KiB
	expectTail("before the roll")
	// 23 records (~945 KiB) do not fit after ~123 KiB: the request starts
	// a new segment while the old one still has zeros ahead of its records.
	put(23)
	checkSealed("after a roll", 1)
	expectTail("before SealActive")
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	checkSealed("after SealActive", 2)
	put(2)
	expectTail("before Close")
	active := s.LocalSegments()[2]
	mustClose(t, s)
	if n := fileSize(t, o.FS, active.Path); n != active.Length || active.Sealed {
		t.Fatalf("after Close: active segment file %d bytes, length %d", n, active.Length)
	}
	s = mustOpen(t, o)
	defer mustClose(t, s)
	checkSealed("after reopen", 3)
	checkAcked(t, s, "S", acks)
}

// growFS counts commitlog writes of records (not of zeros) that grow
// their file.
type growFS struct {
	vfs.FS
	grows, writes atomic.Int64
	syncs         atomic.Int64 // of commitlog files
}

type growFile struct {
	vfs.File
	g *growFS
}

func (g *growFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(filepath.Dir(name)) != "commitlog" {
		return f, err
	}
	return growFile{f, g}, nil
}

func (f growFile) WriteAt(p []byte, off int64) (int, error) {
	if len(bytes.Trim(p, "\x00")) > 0 {
		f.g.writes.Add(1)
		if fi, err := f.Stat(); err == nil && off+int64(len(p)) > fi.Size() {
			f.g.grows.Add(1)
		}
	}
	return f.File.WriteAt(p, off)
}

func (f growFile) Sync() error {
	f.g.syncs.Add(1)
	return f.File.Sync()
}

// In FlushAsync the filler is off by default: every record write grows
// the file, and no zeros are written.
func TestZeroTailAsyncOffByDefault(t *testing.T) {
	g := &growFS{FS: vfs.NewMem()}
	s := mustOpen(t, zeroOpts(g, FlushAsync, 16<<20, 64<<10, 0))
	defer mustClose(t, s)
	if s.opts.ZeroAhead >= 0 {
		t.Fatalf("ZeroAhead %d in FlushAsync by default, want it off", s.opts.ZeroAhead)
	}
	var acks []acked
	for i := range 200 {
		putAcked(t, s, &acks, msg("A", int32(i%4), fmt.Sprintf("a%d-%01000d", i, 0)))
	}
	if _, size, zeroEnd := activeTail(t, s); zeroEnd > size {
		t.Fatalf("zeros written to %d past the records' end %d with the filler off", zeroEnd, size)
	}
	if g.grows.Load() == 0 {
		t.Fatal("no record write grew the file: something wrote ahead of them")
	}
	checkAcked(t, s, "A", acks)
}

// With ZeroAhead set in FlushAsync the filler runs by itself and never
// fdatasyncs: the writer's records land in the zeros it wrote (no write
// grows the file), and nothing is synced until the flusher runs.
func TestZeroTailAsyncInBackground(t *testing.T) {
	const ahead1 = 1 << 20
	mem := vfs.NewMem()
	g := &growFS{FS: mem}
	s := mustOpen(t, zeroOpts(g, FlushAsync, 16<<20, 64<<10, ahead1)) // FlushInterval: an hour
	defer mustClose(t, s)
	var acks []acked
	ahead := func(min int64) func() bool {
		return func() bool { _, size, zeroEnd := activeTail(t, s); return zeroEnd-size >= min }
	}
	putAcked(t, s, &acks, msg("A", 0, "first")) // grows the new file, wakes the filler
	waitFor(t, "zeros ahead of the first record", ahead(ahead1/2))
	grows := g.grows.Load()
	for round := range 8 { // 8 × ~110 KiB, each round waiting for the filler to refill
		for i := range 100 {
			putAcked(t, s, &acks, msg("A", int32(i%4), fmt.Sprintf("a%d-%d-%01000d", round, i, 0)))
		}
		waitFor(t, "the filler to keep up", ahead(ahead1/2))
	}
	if n := g.grows.Load() - grows; n != 0 {
		t.Fatalf("%d of %d record writes grew the file in front of the zeros", n, g.writes.Load())
	}
	if n := g.syncs.Load(); n != 0 {
		t.Fatalf("%d fdatasyncs of the commitlog in FlushAsync before any flush", n)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	checkAcked(t, s, "A", acks)
	checkConsistent(t, s, "A", 4)
}

// While the writer stays within the zeroed tail, its writes (and so the
// group commit's fdatasyncs) never grow the file. When it outruns the
// filler it writes on past the zeros without waiting.
func TestZeroTailHotPathDoesNotGrowFile(t *testing.T) {
	mem := vfs.NewMem()
	g := &growFS{FS: mem}
	s := mustOpen(t, zeroOpts(g, FlushSync, 16<<20, 64<<10, 4<<20))
	var acks []acked
	put := func(n int) { // in Puts of 10 records
		for ; n > 0; n -= 10 {
			var batch []Message
			for i := range min(n, 10) {
				batch = append(batch, msg("H", int32(i%4), fmt.Sprintf("h%d-%01000d", len(acks)+i, 0)))
			}
			putAcked(t, s, &acks, batch...)
		}
	}
	put(1) // the first record of a new file grows it
	fillZeros(t, s)
	path, _, zeroEnd := activeTail(t, s)
	before, grows := fileSize(t, mem, path), g.grows.Load()
	if before != zeroEnd {
		t.Fatalf("file %d bytes after zero-filling to %d", before, zeroEnd)
	}
	put(200) // ~220 KiB: below a chunk, the filler is not even woken
	if after := fileSize(t, mem, path); after != before {
		t.Fatalf("puts within the zeroed tail changed the file size %d -> %d", before, after)
	}
	for range 4 { // 4 × 450 KiB, the filler keeping up
		put(400)
		fillZeros(t, s)
	}
	if n := g.grows.Load() - grows; n != 0 {
		t.Fatalf("%d of %d record writes grew the file within the zeroed tail", n, g.writes.Load())
	}

	// The writer outruns the filler (held off by clSyncMu): it writes on
	// past the zeros, through the straddling write, and loses nothing.
	mustClose(t, s)
	s = mustOpen(t, zeroOpts(mem, FlushAsync, 16<<20, 64<<10, 256<<10))
	put(1)
	fillZeros(t, s)
	s.clSyncMu.Lock()
	put(1000) // ~1.1 MiB, async: no fdatasync needed
	path, size, zeroEnd := activeTail(t, s)
	phys := fileSize(t, mem, path)
	s.clSyncMu.Unlock()
	if size <= zeroEnd || phys != size {
		t.Fatalf("writer did not run past the zeros: records %d, zeros to %d, file %d", size, zeroEnd, phys)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	checkAcked(t, s, "H", acks)
	checkConsistent(t, s, "H", 4)
	mustClose(t, s)
}

// Disk full with a zeroed tail: the filler's ENOSPC is cut back and not
// sticky; writes that land in zeros need no space; writes that need space
// keep today's behaviour (ErrDiskFull, refused cleanly).
func TestZeroTailDiskFull(t *testing.T) {
	fs := vfs.NewMem()
	o := zeroOpts(fs, FlushAsync, 256<<10, 8<<10, -1) // no background filler: the test runs zeroStep itself
	s := mustOpen(t, o)
	defer mustClose(t, s)
	s.opts.ZeroAhead = 64 << 10
	var acks []acked
	put := func(i, size int) error {
		m := msg("D", 0, fmt.Sprintf("%d-%s", i, bytes.Repeat([]byte("d"), size)))
		res, err := s.Put(context.Background(), []Message{m})
		if err == nil {
			acks = append(acks, acked{0, res[0].QueueOffset, string(m.Body)})
		}
		return err
	}
	if err := put(0, 1000); err != nil {
		t.Fatal(err)
	}
	// The disk fills up under the filler (its estimate is still high).
	fs.SetFreeSpace(2 << 10)
	if _, err := s.zeroStep(make([]byte, zeroChunk)); !errors.Is(err, errZeroNoSpace) {
		t.Fatalf("zero-fill on a full disk: %v", err)
	}
	path, size, zeroEnd := activeTail(t, s)
	if n := fileSize(t, fs, path); n != size || zeroEnd > size {
		t.Fatalf("after the filler's ENOSPC: file %d bytes, records %d, zeros to %d", n, size, zeroEnd)
	}
	if err := s.stickyErr(); err != nil {
		t.Fatalf("the filler's ENOSPC is sticky: %v", err)
	}
	if err := put(1, 500); err != nil {
		t.Fatalf("a put that fits after the filler's ENOSPC: %v", err)
	}
	if err := put(2, 4000); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("a put that does not fit: %v", err)
	}

	fs.SetFreeSpace(1 << 30)
	staleFree(s)
	if err := put(3, 1000); err != nil {
		t.Fatal(err)
	}
	fillZeros(t, s)
	// Nearly full again, and the writer knows it: writes into the zeros
	// need no space, a write past them does.
	fs.SetFreeSpace(100)
	staleFree(s)
	for i := 4; i < 40; i++ {
		if err := put(i, 1000); err != nil {
			t.Fatalf("put %d into the zeroed tail: %v", i, err)
		}
	}
	var big []Message
	for range 60 {
		big = append(big, msg("D", 0, string(bytes.Repeat([]byte("B"), 1000))))
	}
	if _, err := s.Put(context.Background(), big); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("a put past the zeroed tail: %v", err)
	}
	if _, err := s.zeroStep(make([]byte, zeroChunk)); !errors.Is(err, errZeroNoSpace) {
		t.Fatalf("zero-fill below the reserve: %v", err)
	}
	if got := s.MaxQueueOffset("D", 0); got != int64(len(acks)) {
		t.Fatalf("failed puts took queue offsets: max %d, %d acked", got, len(acks))
	}
	fs.SetFreeSpace(1 << 30)
	if err := put(40, 1000); err != nil {
		t.Fatalf("put after space came back: %v", err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	o.FS = fs.CrashClone()
	s2 := openRecovered(t, o, "D", acks, 1)
	defer mustClose(t, s2)
}

// The filler idles while fdatasyncs are large: zeros would double the disk
// bandwidth for a small saving per fdatasync.
func TestZeroTailIdlesOnLargeSyncs(t *testing.T) {
	s := mustOpen(t, zeroOpts(vfs.NewMem(), FlushSync, 1<<20, 64<<10, 256<<10))
	defer mustClose(t, s)
	big := make([]Message, 8)
	for i := range big {
		big[i] = msg("L", 0, string(bytes.Repeat([]byte("l"), 60<<10)))
	}
	for range 12 { // ~480 KiB per fdatasync: the average passes 128 KiB
		mustPut(t, s, big...)
	}
	if avg := s.syncBytes.Load(); avg <= zeroMaxSyncBytes {
		t.Fatalf("average fdatasync %d bytes", avg)
	}
	mustPut(t, s, big[:1]...) // the active segment was started well after the average passed 128 KiB
	if more, err := s.zeroStep(make([]byte, zeroChunk)); more || err != nil {
		t.Fatalf("zero step: %v %v", more, err)
	}
	if _, size, zeroEnd := activeTail(t, s); zeroEnd > size {
		t.Fatalf("zero-filled to %d past records ending at %d while fdatasyncs are large", zeroEnd, size)
	}
}
