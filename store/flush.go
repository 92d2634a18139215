package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// flushLoop runs every FlushInterval: in FlushAsync it makes the commitlog
// durable; in both modes it writes and syncs consumequeue entries and then
// the checkpoint. Work that failed for space is redone here (not sticky),
// and the disk-full state ends here once it succeeded and there is room.
func (s *Store) flushLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		s.flushMu.Lock()
		if s.stickyErr() == nil {
			s.flushAllLocked() // a failure is sticky, or owed work for space, and reaches the next Put
		}
		s.flushMu.Unlock()
		s.checkDiskFull()
	}
}

// groupCommitLoop (FlushSync) fdatasyncs the commitlog whenever a writer asks:
// every record written before the fdatasync starts is covered by it, so all
// writers queued behind one sync share it.
//
// Gathering (Options.SyncGather): writers that wait for their ack send
// again as soon as they get it, and a sync started the moment the last one
// ended covers only those that came back during it; the others wait for
// the one after. With many such writers they split into two groups taking
// turns, each waiting for two syncs. So once a sync released n > 1
// waiters, the next waits until n writers asked for a sync after it ended
// (those it released coming back), or for at most SyncGather, capped at
// the last sync's own duration; then the groups merge and each writer
// waits for one sync and the way back. A lone writer never waits (n = 1).
// (Waiting for writers already inside Put before syncing was measured
// before: it did not change records per sync.)
func (s *Store) groupCommitLoop() {
	defer s.wg.Done()
	var gather *time.Timer
	var released int64     // waiters the last sync released
	var took time.Duration // the last sync's duration
	for {
		if s.writePos.Load() <= s.flushed.Load() || released <= 1 || s.opts.SyncGather <= 0 {
			select {
			case <-s.quit:
				return
			case <-s.syncReq:
			}
		}
		if d := min(s.opts.SyncGather, took); released > 1 && d > 0 {
			if gather == nil {
				gather = time.NewTimer(d)
			} else {
				gather.Reset(d)
			}
			s.syncGathers.Add(1)
		wait:
			for s.syncWants.Load()-s.wantsAtSync.Load() < released {
				select {
				case <-s.quit:
					return
				case <-s.syncReq:
				case <-gather.C:
					break wait
				}
			}
			gather.Stop()
		}
		fired, start := s.syncFired.Load(), time.Now()
		s.syncCommitlog(s.writePos.Load())
		released, took = s.syncFired.Load()-fired, time.Since(start)
	}
}

// SyncThrough makes the local commitlog durable up to off (an fdatasync
// of the segments in between, as the flusher's), unless it already is.
// The uploader calls it before it reads a sealed segment: in FlushAsync a
// segment is sealed without an fdatasync, and an object in the bucket
// must never hold bytes the local log could lose to a power cut (a log
// that restarted shorter than the bucket would have to be restored from
// it).
func (s *Store) SyncThrough(off int64) error {
	if off <= s.flushed.Load() {
		return nil
	}
	return s.syncCommitlog(min(off, s.writePos.Load()))
}

// syncCommitlog makes the commitlog durable up to target. An fdatasync
// that fails for space is not sticky, but the range it covered is not
// trusted again until it was re-written, synced and verified (diskFull's
// clRewrite).
func (s *Store) syncCommitlog(target int64) error {
	s.clSyncMu.Lock()
	defer s.clSyncMu.Unlock()
	if err := s.stickyErr(); err != nil {
		return err
	}
	from := s.flushed.Load()
	if target <= from {
		return nil
	}
	rewrite := s.df.clRewrite.Load()
	if rewrite {
		if err := s.rewriteLog(from, target); err != nil {
			return s.writeFailed(err)
		}
	}
	start := time.Now()
	for _, sg := range *s.segs.Load() {
		if sg.end() > from && sg.base < target {
			if err := sg.f.Sync(); err != nil && !sg.dropped.Load() {
				if isNoSpace(err) {
					s.df.clRewrite.Store(true)
				}
				return s.writeFailed(fmt.Errorf("store: fdatasync %s: %w", sg.path, err))
			}
		}
	}
	if s.df.trimSyncing.Load() {
		s.mu.Lock() // a seal's fdatasync is running: wait for its outcome
		s.mu.Unlock()
	}
	if !rewrite && s.df.clRewrite.Load() {
		// Another fdatasync of the commitlog failed meanwhile: ours may have
		// found the pages it failed to write marked clean.
		return s.writeFailed(fmt.Errorf("store: fdatasync of the commitlog failed concurrently: %w", errConcurrentNoSpace))
	}
	if rewrite {
		if err := s.verifyLog(from, target); err != nil {
			return s.setSticky(err)
		}
		s.df.clRewrite.Store(false)
		s.log.Info("store: commitlog re-written and synced after a failed fdatasync", "from", from, "to", target)
	}
	d := time.Since(start)
	if d > time.Second {
		s.log.Warn("store: slow fdatasync", "took", d, "bytes", target-from)
	}
	s.syncNs.Add(int64(d))
	s.nsyncs.Add(1)
	avg := s.syncBytes.Load()
	s.syncBytes.Store(avg + (target-from-avg)/8) // under clSyncMu
	s.flushed.Store(target)
	s.wantsAtSync.Store(s.syncWants.Load())
	s.notify.broadcast()
	s.fireWaiters(false)
	return nil
}

// flushAllLocked makes the commitlog, then the consumequeues, durable up to
// the current end of the log, and then records that in the checkpoint.
// Failing for space it returns ErrDiskFull and owes the work: the next
// round (any caller) redoes it. Any other failure is sticky. Caller holds
// flushMu.
func (s *Store) flushAllLocked() error {
	if err := s.stickyErr(); err != nil {
		return err
	}
	if err := s.flushRoundLocked(); err != nil {
		return s.writeFailed(err)
	}
	s.flushSucceeded()
	return nil
}

// flushRoundLocked is one round of flushAllLocked. Everything it leaves
// undone on an error (files and directories to sync, the restore state,
// the checkpoint) is remembered in s.df, so that a later round finishes
// it.
func (s *Store) flushRoundLocked() (err error) {
	w := s.writePos.Load() // every record before w is already dispatched
	if err := s.syncCommitlog(w); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			s.df.ckDue = true // the round decided to write one and failed
		}
	}()
	if s.df.dirs == nil {
		s.df.dirs, s.df.files = map[string]bool{}, map[*cqFile]*cqueue{}
	}
	if s.df.cqRewrite {
		// From the last checkpoint: every entry after it was written since.
		if err := s.rewriteQueues(max(s.ckWritten, 0), w); err != nil {
			return err
		}
		s.df.cqRewrite = false
		s.df.ckDue = true
	}
	qs := s.allQueues()

	perFile := int64(s.opts.CQEntriesPerFile)
	marks := make([]queueMark, 0, len(qs))
	var buf []byte
	for _, q := range qs {
		// No queue lock is held across the writes (the writer's dispatch
		// never waits for them).
		hadDir := q.dirMade
		touched, newNames, mark, b, err := q.flushQueue(s.fs, perFile, buf)
		buf = b
		if !hadDir && q.dirMade {
			s.df.dirs[s.cqDir] = true
			s.df.dirs[filepath.Dir(q.dir)] = true
		}
		if newNames {
			s.df.dirs[q.dir] = true
		}
		if mark > 0 {
			marks = append(marks, queueMark{topic: q.topic, id: q.id, max: mark})
		}
		for _, f := range touched {
			s.df.files[f] = q
		}
		if err != nil {
			return err
		}
	}
	synced := len(s.df.files) + len(s.df.dirs)
	for f, q := range s.df.files {
		q.mu.RLock()
		gone := q.deleted || f.removed.Load()
		q.mu.RUnlock()
		if !gone {
			if err := s.fds.sync(f); err != nil {
				if isNoSpace(err) {
					s.df.cqRewrite = true
				}
				return err
			}
		}
		delete(s.df.files, f)
	}
	// Deepest first is not required for correctness: all are synced before
	// the checkpoint names their entries.
	sorted := make([]string, 0, len(s.df.dirs))
	for d := range s.df.dirs {
		sorted = append(sorted, d)
	}
	slices.Sort(sorted)
	for _, d := range sorted {
		if err := syncDir(s.fs, d); err != nil {
			if _, serr := s.fs.Stat(d); serr == nil || !errors.Is(serr, os.ErrNotExist) {
				return err
			}
			// Removed since (DeleteTopic): nothing of it to make durable.
		}
		delete(s.df.dirs, d)
	}
	if s.jumpsChanged.Swap(false) {
		s.df.restoredDue = true
	}
	if s.df.restoredDue {
		if err := s.saveRestoredLocked(); err != nil {
			return err
		}
		s.df.restoredDue, s.df.ckDue = false, true // the checkpoint follows it
	}
	if w != s.ckWritten || synced > 0 || s.df.ckDue {
		if err := s.writeCheckpoint(w, marks); err != nil {
			return err
		}
		s.ckWritten, s.df.ckDue = w, false
	}
	// Consumequeue files reclaim left (reclaim.go): after the cold state
	// naming their coldEnd, written above if it was owed. A failure is
	// not the flush's: reclaim runs again next round.
	if s.reclaimDue || len(s.reclaimed) > 0 {
		if err := s.reclaimLocked(); err != nil {
			s.log.Warn("store: reclaim consumequeue files; retrying", "err", err)
		}
	}
	return nil
}
