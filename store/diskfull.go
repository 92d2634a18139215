package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// The disk-full state (see "Flush policy" in doc.go). Running out of space
// (ENOSPC) or quota (EDQUOT) is never sticky: the store refuses Puts with
// ErrDiskFull while free space is below MinFreeBytes or while flush work
// that failed for space is still owed, the flusher redoes that work every
// FlushInterval, and writes resume by themselves once it succeeded and
// there is room again. One log line when the state starts, one when it
// ends.

// freeSpaceMaxAge is how old the writer's free-space estimate may get
// before a Put measures again (statfs).
const freeSpaceMaxAge = 100 * time.Millisecond

// defaultMinFreeCap is the largest default reserve (MinFreeBytes): the
// default is 5% of the volume, at most this.
const defaultMinFreeCap = 256 << 20

// diskFull is the store's disk-full state and the flush work owed to it.
type diskFull struct {
	mu    sync.Mutex  // a leaf
	on    atomic.Bool // refusing writes for space (logged when set and when cleared); set under mu
	since time.Time
	work  error // flush work that failed for space; the flusher redoes it; nil when none

	// putFails counts Puts refused for space or failed with ENOSPC (their
	// own write or segment roll); the flusher ends the state only after a
	// round without any (statfs does not see quotas or inodes).
	putFails, putFailsSeen atomic.Int64

	// clRewrite: a commitlog fdatasync failed for space. The kernel may have
	// marked the pages of the failed writeback clean, so a later fdatasync
	// that succeeds proves nothing: syncCommitlog first re-writes
	// [flushed, target) from the files, syncs, and verifies every record of
	// the range before it advances flushed.
	clRewrite atomic.Bool
	// trimSyncing: trimTailLocked is in its fdatasync (under Store.mu):
	// syncCommitlog waits for it before trusting its own fdatasync (the
	// kernel reports a writeback error to one of two concurrent callers).
	trimSyncing atomic.Bool

	// Guarded by Store.flushMu.
	cqRewrite   bool                // a consumequeue fdatasync failed for space: rewrite entries from the commitlog
	ckDue       bool                // a checkpoint is owed (a round failed after deciding to write one)
	restoredDue bool                // <Dir>/restored is owed (its rewrite failed)
	dirs        map[string]bool     // directories with names not yet synced
	files       map[*cqFile]*cqueue // consumequeue files written and not yet synced
}

// isNoSpace reports whether err is the filesystem out of space or quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// defaultMinFree is the default reserve: 5% of the volume holding dir (the
// nearest existing ancestor before the store made it), at most
// defaultMinFreeCap, at least 1 byte; defaultMinFreeCap when the volume's
// size is unknown.
func defaultMinFree(fs vfs.FS, dir string) uint64 {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if total, err := fs.TotalSpace(d); err == nil {
			return max(min(defaultMinFreeCap, total/20), 1)
		}
		if filepath.Dir(d) == d {
			return defaultMinFreeCap
		}
	}
}

// writeFailed handles a failed write, fdatasync, truncate or state-file
// write of the store. Out of space or quota it is ErrDiskFull (wrapping
// err), the work is owed (the flusher redoes it) and the store refuses
// Puts until then; any other error is sticky.
func (s *Store) writeFailed(err error) error {
	if !isNoSpace(err) {
		return s.setSticky(err)
	}
	s.df.mu.Lock()
	if s.df.work == nil {
		s.df.work = err // the first failure, as it came: Puts' remarks name it
	}
	s.df.mu.Unlock()
	if !errors.Is(err, ErrDiskFull) {
		err = fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	free, _ := s.fs.FreeSpace(s.opts.Dir)
	s.enterDiskFull(err, free)
	return err
}

// restoredFailed handles a failed rewrite of <Dir>/restored outside the
// flusher: writeFailed, with the file owed (the flusher writes it, then
// the checkpoint after it). Caller holds flushMu.
func (s *Store) restoredFailed(err error) error {
	s.df.restoredDue = true
	return s.writeFailed(err)
}

// owedErr is the ErrDiskFull a Put gets while flush work failed for space
// is owed, or nil.
func (s *Store) owedErr(free uint64) error {
	s.df.mu.Lock()
	work := s.df.work
	s.df.mu.Unlock()
	if work == nil {
		return nil
	}
	return fmt.Errorf("%w (%s free, reserve %s); writes resume once space is freed and the store caught up: %w",
		ErrDiskFull, humanBytes(free), humanBytes(s.opts.MinFreeBytes), work)
}

// enterDiskFull starts the disk-full state (logged once) with reason.
func (s *Store) enterDiskFull(reason error, free uint64) {
	s.df.mu.Lock()
	defer s.df.mu.Unlock()
	if s.df.on.Load() {
		return
	}
	s.df.on.Store(true)
	s.df.since = time.Now()
	s.log.Warn("store: disk full; refusing writes until space is freed", "reason", reason,
		"free", humanBytes(free), "reserve", humanBytes(s.opts.MinFreeBytes), "dir", s.opts.Dir)
}

// flushSucceeded clears the owed work after a flush round that did all of
// it. Caller holds flushMu.
func (s *Store) flushSucceeded() {
	s.df.mu.Lock()
	s.df.work = nil
	s.df.mu.Unlock()
}

// putFailed notes a Put refused for space or failed with ENOSPC, and
// starts the disk-full state.
func (s *Store) putFailed(reason error, free uint64) {
	s.df.putFails.Add(1)
	s.enterDiskFull(reason, free)
}

// checkDiskFull ends the disk-full state (logged once) when no work is
// owed, no Put failed for space since the last call, and free space is
// back above the reserve, with 1 MiB to spare so that the state does not
// flap at the threshold. The flusher calls it every round.
func (s *Store) checkDiskFull() {
	fails := s.df.putFails.Load()
	quiet := s.df.putFailsSeen.Swap(fails) == fails
	if !s.df.on.Load() || !quiet || s.owing() {
		return
	}
	if free, err := s.fs.FreeSpace(s.opts.Dir); err == nil && free >= s.opts.MinFreeBytes+1<<20 {
		s.leaveDiskFull(free)
	}
}

// wroteOK ends the disk-full state after a commitlog write succeeded, when
// no work is owed and the writer's estimate (fresh: it measures on every
// Put while the state lasts) leaves room above the reserve, with the same
// 1 MiB to spare as checkDiskFull. Caller holds s.mu.
func (s *Store) wroteOK() {
	if s.df.on.Load() && s.mu.freeEst >= s.opts.MinFreeBytes+1<<20 && !s.owing() {
		s.leaveDiskFull(s.mu.freeEst)
	}
}

// leaveDiskFull ends the disk-full state (logged once) unless work is owed.
func (s *Store) leaveDiskFull(free uint64) {
	s.df.mu.Lock()
	defer s.df.mu.Unlock()
	if !s.df.on.Load() || s.df.work != nil {
		return
	}
	s.df.on.Store(false)
	s.log.Info("store: disk space available again; accepting writes", "free", humanBytes(free),
		"reserve", humanBytes(s.opts.MinFreeBytes), "full_for", time.Since(s.df.since).Round(time.Millisecond))
}

// owing reports whether flush work that failed for space is owed.
func (s *Store) owing() bool {
	s.df.mu.Lock()
	defer s.df.mu.Unlock()
	return s.df.work != nil
}

// DiskFull reports whether the store is refusing writes for space.
func (s *Store) DiskFull() bool { return s.df.on.Load() }

// humanBytes prints n with a binary unit, e.g. "12.50 MiB".
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n)/unit, 0
	for v >= unit && u < 4 {
		v /= unit
		u++
	}
	return fmt.Sprintf("%.2f %s", v, [...]string{"KiB", "MiB", "GiB", "TiB", "PiB"}[u])
}

var (
	// errStopScan ends a scanSegments early.
	errStopScan = errors.New("store: stop scan")
	// errConcurrentNoSpace: another fdatasync of the commitlog failed for
	// space while one succeeded; the range is re-written (clRewrite).
	errConcurrentNoSpace = fmt.Errorf("another fdatasync of the commitlog failed: %w", syscall.ENOSPC)
)

// rewriteLog re-writes the commitlog bytes [from, to) with what the files
// hold now, so that the next fdatasync writes them out again (after a
// failed one, the kernel may have marked their pages clean). Caller holds
// clSyncMu. Nothing else writes below writePos.
func (s *Store) rewriteLog(from, to int64) error {
	buf := make([]byte, min(to-from, 1<<20))
	for _, sg := range *s.segs.Load() {
		lo, hi := max(from, sg.base), min(to, sg.end())
		for off := lo; off < hi; {
			b := buf[:min(int64(len(buf)), hi-off)]
			if err := readFull(sg.f, b, off-sg.base); err != nil {
				if sg.dropped.Load() {
					break
				}
				return fmt.Errorf("store: re-read commitlog %s at %d: %w", sg.path, off, err)
			}
			if _, err := sg.f.WriteAt(b, off-sg.base); err != nil {
				return fmt.Errorf("store: re-write commitlog %s at %d: %w", sg.path, off, err)
			}
			off += int64(len(b))
		}
	}
	return nil
}

// verifyLog checks that the commitlog bytes [from, to) are whole, valid
// records (magic, sizes, PHYSICALOFFSET, body CRC) ending exactly at to.
func (s *Store) verifyLog(from, to int64) error {
	t := *s.segs.Load()
	valid, err := s.scanSegments(t, from, func(m *recordMeta) error {
		if m.physOffset >= to {
			return errStopScan
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return err
	}
	if valid != to {
		return corruptf("commitlog [%d, %d) after a failed fdatasync: valid records end at %d; the kernel dropped the data of the failed writeback",
			from, to, valid)
	}
	return nil
}

// rewriteQueues writes again, at their places in the consumequeue files,
// the entries of the records in [from, to), computed from the commitlog
// (durable up to to), and owes a sync of every file it wrote: after a
// failed consumequeue fdatasync the kernel may have dropped their pages.
// Entries not yet in a file (pending) are left to the flush. Caller holds
// flushMu.
func (s *Store) rewriteQueues(from, to int64) error {
	t := *s.segs.Load()
	if len(t) == 0 || from >= to {
		return nil
	}
	var lastQ *cqueue
	_, err := s.scanSegments(t, from, func(m *recordMeta) error {
		if m.physOffset >= to {
			return errStopScan
		}
		if notDispatched(m.sysFlag) {
			return nil
		}
		q := lastQ
		if q == nil || q.id != m.queueID || q.topic != string(m.topic) {
			if q = s.queue(string(m.topic), m.queueID); q == nil {
				return nil // deleted
			}
			lastQ = q
		}
		e := cqEntry{phys: m.physOffset, size: m.size, tags: s.tagsCode(m)}
		idx := m.queueOffset
		q.mu.RLock()
		var f *cqFile
		if !q.deleted && idx >= q.min && idx < q.written {
			f, _ = q.fileForLocked(idx)
		}
		q.mu.RUnlock()
		if f == nil {
			return nil
		}
		// Written without the queue's lock (the writer's dispatch never
		// waits for I/O); a truncation meanwhile only makes the entry stale,
		// and the flusher (not concurrent: flushMu) cuts stale entries
		// before it writes there.
		h, err := s.fds.acquire(f)
		if errors.Is(err, errFileGone) {
			return nil
		}
		if err != nil {
			return err
		}
		var b [cqEntrySize]byte
		putEntry(b[:], e)
		_, err = h.f.WriteAt(b[:], (idx-f.start)*cqEntrySize)
		s.fds.release(h)
		if err != nil {
			return fmt.Errorf("store: re-write consumequeue %s: %w", f.path, err)
		}
		s.df.files[f] = q
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return err
	}
	return nil
}
