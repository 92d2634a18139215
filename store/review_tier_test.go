package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// mappedPaths returns the lines of /proc/self/maps that map a file under
// dir (a deleted one too: its line ends with " (deleted)").
func mappedPaths(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, dir) {
			out = append(out, l)
		}
	}
	return out
}

// reviewSealedStore opens a store on the real filesystem under dir with
// a few sealed segments (Cold set so that DropSegment is allowed).
func reviewSealedStore(t *testing.T, dir string) *Store {
	t.Helper()
	o := testOpts(vfs.OS())
	o.Dir = dir
	o.SegmentSize = 64 << 10
	o.Cold = noCold{}
	s := mustOpen(t, o)
	for i := range 600 {
		mustPut(t, s, msg("T", int32(i%4), fmt.Sprintf("body %04d %0200d", i, i)))
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	if n := len(s.SealedSegments()); n < 2 {
		t.Fatalf("%d sealed segments, want at least 2", n)
	}
	return s
}

// TestReviewIndexPlanOutlivesStore (finding 1): SegmentLayout leaves an
// index plan holding a read-only mapping of the segment in a package-level
// list (segplan.go) that only a later WriteSegmentIndex of the same
// *segment or two newer layouts release. Nothing releases it when the
// store closes, or when the segment is dropped: a closed store (a WAL cut's
// reopen, a replica reopened at a new restore point, a demoted broker that
// uploads no more) keeps the segment file mapped for the life of the
// process, and a dropped or removed segment's disk blocks stay allocated
// (the mapping pins the unlinked inode). Here: layout of a segment whose
// upload then fails before its index build (the plan is never taken), the
// segment is dropped, the store closes and its directory is removed; the
// file is still mapped.
func TestReviewIndexPlanOutlivesStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := reviewSealedStore(t, dir)
	base := s.SealedSegments()[0].Base
	if _, err := s.SegmentLayout(base); err != nil {
		t.Fatal(err)
	}
	if len(mappedPaths(t, dir)) == 0 {
		t.Skip("the segment was not mapped (not the operating system's filesystem?)")
	}
	// The upload fails here (bucket down, lease lost, fenced): no index
	// build takes the plan.
	if err := s.DropSegment(base); err != nil {
		t.Fatal(err)
	}
	if m := mappedPaths(t, dir); len(m) != 0 {
		t.Errorf("a dropped segment is still mapped (its disk space stays allocated):\n%s", strings.Join(m, "\n"))
	}
	mustClose(t, s)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if m := mappedPaths(t, dir); len(m) != 0 {
		t.Fatalf("after Close and the removal of its directory, the store's segment is still mapped:\n%s", strings.Join(m, "\n"))
	}
}

// TestReviewLayoutThenIndexAfterDrop: a plan left by SegmentLayout is
// never used for another segment: after its segment is dropped the index
// build of the next one (a different *segment) builds its own first pass,
// and equals the index built without any plan. Holds.
func TestReviewLayoutThenIndexAfterDrop(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := reviewSealedStore(t, dir)
	defer s.Close()
	segs := s.SealedSegments()
	if _, err := s.SegmentLayout(segs[0].Base); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SegmentLayout(segs[1].Base); err != nil {
		t.Fatal(err)
	}
	if err := s.DropSegment(segs[0].Base); err != nil {
		t.Fatal(err)
	}
	if _, err := s.BuildSegmentIndex(segs[0].Base); !errors.Is(err, ErrNotFound) {
		t.Fatalf("index of a dropped segment: %v, want ErrNotFound", err)
	}
	withPlan, err := s.BuildSegmentIndex(segs[1].Base)
	if err != nil {
		t.Fatal(err)
	}
	var alone []byte
	withoutMapping(func() { alone, err = s.BuildSegmentIndex(segs[1].Base) })
	if err != nil {
		t.Fatal(err)
	}
	if string(withPlan) != string(alone) {
		t.Fatal("index built from the layout's plan differs from the one built alone")
	}
}

// ---- group commit: ack only after an fdatasync that started after the write

// orderFS wraps the OS filesystem and stamps, from one global clock, the
// end of every commitlog write and the start and end of every commitlog
// fdatasync, per file.
type orderFS struct {
	vfs.FS
	clock atomic.Int64
	mu    sync.Mutex
	files map[string]*orderLog
}

type orderLog struct {
	writes []orderWrite
	syncs  []orderSync
}

type orderWrite struct {
	off, n int64
	done   int64
}

type orderSync struct{ start, end int64 }

type orderFile struct {
	vfs.File
	fs   *orderFS
	name string
}

func (f *orderFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	fl, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(filepath.Dir(name)) != "commitlog" {
		return fl, err
	}
	f.mu.Lock()
	if f.files[name] == nil || flag&os.O_TRUNC != 0 {
		f.files[name] = &orderLog{}
	}
	f.mu.Unlock()
	return &orderFile{File: fl, fs: f, name: name}, nil
}

func (f *orderFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	done := f.fs.clock.Add(1)
	f.fs.mu.Lock()
	l := f.fs.files[f.name]
	l.writes = append(l.writes, orderWrite{off: off, n: int64(n), done: done})
	f.fs.mu.Unlock()
	return n, err
}

func (f *orderFile) Sync() error {
	start := f.fs.clock.Add(1)
	err := f.File.Sync()
	end := f.fs.clock.Add(1)
	if err == nil {
		f.fs.mu.Lock()
		l := f.fs.files[f.name]
		l.syncs = append(l.syncs, orderSync{start, end})
		f.fs.mu.Unlock()
	}
	return err
}

// covered reports whether the byte at file offset off of name, as last
// written before now, was followed by a complete fdatasync of the file
// that started after that write and ended before now.
func (f *orderFS) covered(name string, off int64, now int64) (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.files[name]
	if l == nil {
		return false, "no such file"
	}
	var last int64 = -1
	for _, w := range l.writes {
		if w.done < now && off >= w.off && off < w.off+w.n && w.done > last {
			last = w.done
		}
	}
	if last < 0 {
		return false, "no write of the byte"
	}
	for _, s := range l.syncs {
		if s.start > last && s.end < now {
			return true, ""
		}
	}
	return false, fmt.Sprintf("written at %d, no fdatasync started after it ended before %d", last, now)
}

// TestReviewGroupCommitAckAfterCoveringSync: FlushSync, real files, with
// gathering on (a long SyncGather, so the cap is the last sync's own
// duration), closed-loop PutNotify writers and Put writers mixed, the
// flusher syncing every few ms, the zero-filler on and SealActive rolling
// segments meanwhile: every acknowledgement (PutNotify callback without
// error, Put returning) comes after an fdatasync of the record's file that
// started after the record's write ended; no Put times out; Close
// answers every callback. Holds.
func TestReviewGroupCommitAckAfterCoveringSync(t *testing.T) {
	fs := &orderFS{FS: vfs.OS(), files: map[string]*orderLog{}}
	o := testOpts(fs)
	o.Dir = filepath.Join(t.TempDir(), "store")
	o.Flush = FlushSync
	o.SegmentSize = 256 << 10
	o.SyncGather = time.Hour
	o.FlushInterval = 3 * time.Millisecond
	o.SyncFlushTimeout = 20 * time.Second
	s := mustOpen(t, o)
	clDir := filepath.Join(o.Dir, "commitlog")

	var bad atomic.Int64
	var acks atomic.Int64
	check := func(res []PutResult) {
		now := fs.clock.Add(1)
		for _, r := range res {
			end := r.PhysOffset + int64(r.Size) - 1
			var path string
			for _, sg := range s.LocalSegments() {
				if end >= sg.Base && end < sg.Base+sg.Length {
					path = sg.Path
				}
			}
			if path == "" {
				path = filepath.Join(clDir, segmentName(r.PhysOffset)) // best effort
			}
			base, _ := parseSegmentName(filepath.Base(path))
			if ok, why := fs.covered(path, end-base, now); !ok {
				if bad.Add(1) <= 5 {
					t.Errorf("record at %d acknowledged without a covering fdatasync: %s", r.PhysOffset, why)
				}
			}
			acks.Add(1)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Go(func() {
			for r := 0; ; r++ {
				select {
				case <-stop:
					return
				default:
				}
				m := msg("G", int32(w%4), fmt.Sprintf("w%d-r%d %0100d", w, r, r))
				if w%3 == 0 {
					res, err := s.Put(context.Background(), []Message{m})
					if err != nil {
						t.Errorf("put: %v", err)
						return
					}
					check(res)
					continue
				}
				done := make(chan error, 1)
				s.PutNotify([]Message{m}, func(res []PutResult, err error) {
					if err == nil {
						check(res)
					}
					done <- err
				})
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("PutNotify: %v", err)
						return
					}
				case <-time.After(20 * time.Second):
					t.Errorf("writer %d: no ack in 20s", w)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(7 * time.Millisecond):
			}
			if err := s.SealActive(); err != nil {
				t.Errorf("seal: %v", err)
				return
			}
		}
	})
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()

	// Callbacks still waiting when the store closes are all answered.
	var pending sync.WaitGroup
	for i := range 50 {
		pending.Add(1)
		s.PutNotify([]Message{msg("G", 0, fmt.Sprintf("late %d", i))}, func(res []PutResult, err error) {
			if err == nil {
				check(res)
			}
			pending.Done()
		})
	}
	mustClose(t, s)
	ch := make(chan struct{})
	go func() { pending.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("callbacks not answered after Close")
	}
	t.Logf("%d acks checked, %d fdatasync rounds, %d gathered", acks.Load(), s.nsyncs.Load(), s.syncGathers.Load())
	if acks.Load() < 100 {
		t.Fatalf("only %d acks", acks.Load())
	}
}

// TestReviewHandOffFaultIsAnError: the mapping an index plan hands from
// SegmentLayout to the index build is faulted (its file cut shorter in
// between, as an outside truncation or a disk error would): the build
// returns an error instead of crashing, leaves no plan and no mapping
// behind, restores the goroutine's panic-on-fault setting, and a later
// layout and index of the same segment fail the same way, while the
// store goes on serving writes. Holds. The plan here holds no entries (a
// segment of more than maxPlanEntries records), so the build scans the
// mapping again; one with entries places them as the layout's scan read
// and checked them, and the uploader's copy of the frames from the same
// mapping, made before the index is built, is what meets the cut
// (tier/segfile's mapped tests).
func TestReviewHandOffFaultIsAnError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	o := testOpts(vfs.OS())
	o.Dir = dir
	o.SegmentSize = 1 << 20
	s := mustOpen(t, o)
	defer s.Close()
	for i := range 3000 {
		mustPut(t, s, msg("T", int32(i%4), fmt.Sprintf("body %04d %0200d", i, i)))
	}
	if err := s.SealActive(); err != nil {
		t.Fatal(err)
	}
	info := s.SealedSegments()[0]
	if _, err := s.SegmentLayout(info.Base); err != nil {
		t.Fatal(err)
	}
	sg := (*s.segs.Load()).find(info.Base)
	plan := s.takeIndexPlan(sg)
	if plan == nil || plan.mp == nil {
		t.Skip("no mapped plan (not the operating system's filesystem?)")
	}
	plan.p1.collected = false
	s.putIndexPlan(plan)
	if err := os.Truncate(info.Path, 64<<10); err != nil {
		t.Fatal(err)
	}
	idx, err := os.CreateTemp(t.TempDir(), "idx")
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	if _, err := s.WriteSegmentIndex(info.Base, idx); err == nil {
		t.Fatal("index of a segment cut under the plan's mapping built")
	} else {
		t.Logf("index build: %v", err)
	}
	if debug.SetPanicOnFault(false) {
		t.Fatal("panic-on-fault left on after the faulted scan")
	}
	if s.takeIndexPlan(sg) != nil {
		t.Fatal("a plan left behind")
	}
	if m := mappedPaths(t, dir); len(m) != 0 {
		t.Fatalf("mapping left behind:\n%s", strings.Join(m, "\n"))
	}
	if _, err := s.SegmentLayout(info.Base); err != nil {
		t.Logf("layout of the cut segment: %v", err)
	}
	if _, err := s.BuildSegmentIndex(info.Base); err == nil {
		t.Fatal("index of the cut segment built")
	}
	mustPut(t, s, msg("T", 0, "after"))
}
