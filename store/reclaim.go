package store

import (
	"errors"
	"fmt"
	"os"
	"slices"
)

// Reclaim: local consumequeue files whose entries all point into dropped
// segments (below LocalMinPhysOffset), or lie wholly below the queue's
// min, are deleted; the queue's coldEnd rises to the first entry it still
// holds locally, and the entries below are read through the cold index
// (the queue index objects of the dropped segments) as for a restored
// queue. Only with a tier (Options.Cold and Options.ColdIndex): a segment
// is dropped only after it and its index are uploaded, so the cold index
// serves every entry of a file reclaim deletes.
//
// Crash safety: the new coldEnd of every queue (with its min) is written
// to <Dir>/restored (temp + fsync + rename) before any file goes; a crash
// after that leaves files wholly below coldEnd, which Open takes off the
// queue and removes (installRestored), and a crash before it leaves the
// files and the old coldEnd. Recovery never rebuilds them: the entries
// below coldEnd are not the local consumequeue's.

// reclaimFile is a consumequeue file taken off its queue by reclaim (or at
// Open), removed once the cold state naming its queue's coldEnd is
// durable.
type reclaimFile struct {
	q *cqueue
	f *cqFile
}

// reclaimLocked raises the coldEnd of every queue past its reclaimable
// files, makes the new cold state durable and removes the files. Caller
// holds flushMu.
func (s *Store) reclaimLocked() error {
	if s.opts.Cold == nil || s.cidx == nil {
		return nil
	}
	s.reclaimDue = false
	local := s.LocalMinPhysOffset()
	s.cidx.raiseLimit(local)
	changed := false
	for _, q := range s.allQueues() {
		c, err := s.reclaimQueue(q, local)
		if err != nil {
			s.reclaimDue = true
			err = fmt.Errorf("store: reclaim consumequeue %s/%d: %w", q.topic, q.id, err)
			if changed && s.saveRestoredLocked() != nil {
				s.df.restoredDue = true
			}
			return err
		}
		changed = changed || c
	}
	if changed {
		if err := s.saveRestoredLocked(); err != nil {
			// Owed: the flusher writes it (a failure there is the flush's:
			// disk full, or sticky), then the files go.
			s.df.restoredDue = true
			return err
		}
	}
	if err := s.removeReclaimedLocked(); err != nil {
		s.reclaimDue = true
		return err
	}
	return nil
}

// reclaimQueue raises q's coldEnd past the prefix of its files that are
// wholly written and either wholly below its min or whose entries all
// point below local (the local log's start), and moves those files to
// s.reclaimed. It reports whether coldEnd moved. The files' last entries
// are read without q.mu; a truncation meanwhile (gen) leaves q for the
// next round.
func (s *Store) reclaimQueue(q *cqueue, local int64) (bool, error) {
	type cand struct {
		f           *cqFile
		end, maxEnd int64
	}
	var arr [8]cand
	cands := arr[:0]
	q.mu.RLock()
	if q.deleted {
		q.mu.RUnlock()
		return false, nil
	}
	gen, mn, written := q.gen.Load(), q.min, q.written
	for _, f := range q.files {
		end := f.start + f.n
		if end > written {
			break
		}
		cands = append(cands, cand{f, end, f.maxEnd})
		if end > mn && f.maxEnd > local {
			break
		}
	}
	q.mu.RUnlock()

	ce := int64(-1)
	for _, c := range cands {
		if c.end > mn {
			me := c.maxEnd
			if me < 0 {
				var err error
				if me, err = q.fileMaxEnd(c.f); err != nil {
					if errors.Is(err, errFileGone) {
						return false, nil // retired meanwhile: a later round
					}
					return false, err
				}
				q.mu.Lock()
				if q.gen.Load() == gen {
					c.f.maxEnd = me
				}
				q.mu.Unlock()
			}
			if me > local {
				break
			}
		}
		ce = c.end
	}
	if ce < 0 {
		return false, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted || q.gen.Load() != gen || ce <= q.coldEnd.Load() {
		return false, nil
	}
	q.coldEnd.Store(ce)
	q.gen.Add(1) // readers that planned to read these files plan again, cold
	k := 0
	for k < len(q.files) && q.files[k].start+q.files[k].n <= ce {
		s.reclaimed = append(s.reclaimed, reclaimFile{q: q, f: q.files[k]})
		k++
	}
	q.files = slices.Delete(q.files, 0, k)
	return true, nil
}

// fileMaxEnd reads f backwards to the end (commitlog offset + size) of its
// last non-blank entry: 0 when every entry is blank.
func (q *cqueue) fileMaxEnd(f *cqFile) (int64, error) {
	q.mu.RLock()
	n := f.n
	q.mu.RUnlock()
	h, err := q.fds.acquire(f)
	if err != nil {
		return 0, err
	}
	defer q.fds.release(h)
	const chunk = 256
	var buf [chunk * cqEntrySize]byte
	for n > 0 {
		c := min(n, chunk)
		b := buf[:c*cqEntrySize]
		if err := readFull(h.f, b, (n-c)*cqEntrySize); err != nil {
			return 0, fmt.Errorf("store: read consumequeue %s: %w", f.path, err)
		}
		if e := lastEntryEnd(b); e > 0 {
			return e, nil
		}
		n -= c
	}
	return 0, nil
}

// removeReclaimedLocked removes the files reclaim took off their queues,
// once the cold state that names their queues' coldEnd is durable (not
// while its rewrite is owed). Their directories are synced by the next
// flush round: a removal a crash undoes is done again at Open. Caller
// holds flushMu.
func (s *Store) removeReclaimedLocked() error {
	if len(s.reclaimed) == 0 || s.df.restoredDue {
		return nil
	}
	if s.df.dirs == nil {
		s.df.dirs, s.df.files = map[string]bool{}, map[*cqFile]*cqueue{}
	}
	for len(s.reclaimed) > 0 {
		r := s.reclaimed[0]
		if err := s.fds.retire(r.f); err != nil {
			s.log.Warn("store: reclaim consumequeue file", "err", err)
		}
		if err := s.fs.Remove(r.f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("store: remove reclaimed consumequeue file: %w", err)
		}
		s.df.dirs[r.q.dir] = true
		s.reclaimed[0] = reclaimFile{}
		s.reclaimed = s.reclaimed[1:]
	}
	s.reclaimed = nil
	return nil
}

// forgetReclaimedLocked drops the pending removals of deleted queues'
// files (DeleteTopic removes their directory; a topic created again may
// reuse a name). Caller holds flushMu.
func (s *Store) forgetReclaimedLocked(deleted map[int32]*cqueue) {
	out := s.reclaimed[:0]
	for _, r := range s.reclaimed {
		if deleted[r.q.id] == r.q {
			s.fds.retire(r.f)
			continue
		}
		out = append(out, r)
	}
	clear(s.reclaimed[len(out):])
	s.reclaimed = out
}
