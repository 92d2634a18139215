package store

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"
)

// flushLoop runs every FlushInterval: in FlushAsync it makes the commitlog
// durable; in both modes it writes and syncs consumequeue entries and then
// the checkpoint.
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
			s.flushAllLocked() // a failure is sticky and reaches the next Put
		}
		s.flushMu.Unlock()
	}
}

// groupCommitLoop (FlushSync) fdatasyncs the commitlog whenever a writer asks:
// every record written before the fdatasync starts is covered by it, so all
// writers queued behind one sync share it. (Waiting for writers already
// inside Put before syncing was measured: it did not change records per
// sync.)
func (s *Store) groupCommitLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.quit:
			return
		case <-s.syncReq:
		}
		s.syncCommitlog(s.writePos.Load())
	}
}

// syncCommitlog makes the commitlog durable up to target.
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
	start := time.Now()
	for _, sg := range *s.segs.Load() {
		if sg.end() > from && sg.base < target {
			if err := sg.f.Sync(); err != nil && !sg.dropped.Load() {
				return s.setSticky(fmt.Errorf("store: fdatasync %s: %w", sg.path, err))
			}
		}
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
	s.notify.broadcast()
	s.fireWaiters(false)
	return nil
}

// flushAllLocked makes the commitlog, then the consumequeues, durable up to
// the current end of the log, and then records that in the checkpoint.
// Caller holds flushMu.
func (s *Store) flushAllLocked() error {
	if err := s.stickyErr(); err != nil {
		return err
	}
	w := s.writePos.Load() // every record before w is already dispatched
	if err := s.syncCommitlog(w); err != nil {
		return err
	}
	qs := s.allQueues()

	perFile := int64(s.opts.CQEntriesPerFile)
	var files []*cqFile
	dirs := map[string]bool{}
	marks := make([]queueMark, 0, len(qs))
	for _, q := range qs {
		q.mu.Lock()
		if q.deleted {
			q.mu.Unlock()
			continue
		}
		hadDir := q.dirMade
		touched, newNames, err := q.flushLocked(s.fs, perFile)
		if !hadDir && q.dirMade {
			dirs[s.cqDir] = true
			dirs[filepath.Dir(q.dir)] = true
		}
		if newNames {
			dirs[q.dir] = true
		}
		if q.max > 0 {
			marks = append(marks, queueMark{topic: q.topic, id: q.id, max: q.max})
		}
		q.mu.Unlock()
		if err != nil {
			return s.setSticky(err)
		}
		files = append(files, touched...)
	}
	for _, f := range files {
		if err := f.f.Sync(); err != nil && !f.removed.Load() {
			return s.setSticky(fmt.Errorf("store: sync consumequeue %s: %w", f.path, err))
		}
	}
	// Deepest first is not required for correctness: all are synced before
	// the checkpoint names their entries.
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	slices.Sort(sorted)
	for _, d := range sorted {
		if err := syncDir(s.fs, d); err != nil {
			return s.setSticky(err)
		}
	}
	if w == s.ckWritten && len(files) == 0 && len(dirs) == 0 {
		return nil
	}
	if err := s.writeCheckpoint(w, marks); err != nil {
		return s.setSticky(err)
	}
	s.ckWritten = w
	return nil
}
