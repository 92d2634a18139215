package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// slowSyncFS makes every fdatasync of a commitlog file take d, like a
// disk whose cache flush takes that long.
type slowSyncFS struct {
	vfs.FS
	d time.Duration
}

type slowSyncFile struct {
	vfs.File
	d time.Duration
}

func (f slowSyncFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	fl, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(filepath.Dir(name)) != "commitlog" {
		return fl, err
	}
	return slowSyncFile{fl, f.d}, nil
}

func (f slowSyncFile) Sync() error {
	time.Sleep(f.d)
	return f.File.Sync()
}

// closedLoop runs writers that each send rounds messages, one at a time,
// each after the previous one's ack (PutNotify), and returns the records
// per commitlog fdatasync over the run.
func closedLoop(t *testing.T, s *Store, writers, rounds int) float64 {
	t.Helper()
	syncs := s.nsyncs.Load()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				done := make(chan error, 1)
				s.PutNotify([]Message{msg("G", int32(w%4), fmt.Sprintf("w%d-r%d", w, r))}, func(_ []PutResult, err error) { done <- err })
				select {
				case err := <-done:
					if err != nil {
						errs <- err
						return
					}
				case <-time.After(30 * time.Second):
					errs <- fmt.Errorf("writer %d round %d: no ack in 30s", w, r)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := s.nsyncs.Load() - syncs
	if n == 0 {
		t.Fatal("no fdatasync")
	}
	return float64(writers*rounds) / float64(n)
}

// With many writers that send again as soon as they are acked, a group
// commit waits for those it released to come back (Options.SyncGather), so
// they share one fdatasync instead of splitting into groups that take
// turns. A lone writer never waits.
func TestGroupCommitGathersReturningWriters(t *testing.T) {
	const syncTakes = 20 * time.Millisecond // the cap: writers have this long to come back
	open := func(gather time.Duration) *Store {
		o := testOpts(slowSyncFS{vfs.NewMem(), syncTakes})
		o.Flush, o.SegmentSize, o.SyncGather = FlushSync, 4<<20, gather
		return mustOpen(t, o)
	}

	s := open(time.Hour)
	const writers, rounds = 16, 12
	per := closedLoop(t, s, writers, rounds)
	t.Logf("gathering: %.1f records per fdatasync, %d of %d syncs waited", per, s.syncGathers.Load(), s.nsyncs.Load())
	if per < writers*3/4 {
		t.Fatalf("%.1f records per fdatasync with %d writers gathered, want at least %d", per, writers, writers*3/4)
	}
	mustClose(t, s)

	s = open(time.Hour)
	per = closedLoop(t, s, 1, 20)
	if n := s.syncGathers.Load(); n != 0 {
		t.Fatalf("a lone writer's syncs waited to gather %d times", n)
	}
	if per != 1 {
		t.Fatalf("a lone writer: %.2f records per fdatasync, want 1", per)
	}
	mustClose(t, s)

	s = open(-1)
	per = closedLoop(t, s, writers, rounds)
	t.Logf("not gathering: %.1f records per fdatasync", per)
	if n := s.syncGathers.Load(); n != 0 {
		t.Fatalf("SyncGather < 0: %d syncs waited to gather", n)
	}
	mustClose(t, s)
}
