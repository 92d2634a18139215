package store

import (
	"errors"
	"fmt"
	"time"
)

// The zero-filler keeps a region of zeros ahead of the write position in the
// active commitlog segment (Options.ZeroAhead). Records written there
// overwrite cached pages of allocated blocks: the pwrite neither grows the
// file nor allocates page-cache pages and reserves blocks for each new page
// on the writer's goroutine (about a tenth of the broker's CPU per 1 KiB
// send in the async benchmark, done on this goroutine instead, a chunk at a
// time). In FlushSync the zeros are also fdatasynced, so the group commit's
// fdatasync has no new file size or extents to commit (on ext4 that halves
// its latency). In FlushAsync the filler is off by default (Options.ZeroAhead:
// nobody waits for an fdatasync there, and the filler's own writes cost the
// process more CPU than the writer saves); when turned on, the flusher
// writes out whatever zeros are dirty when it runs along with the records,
// at most ZeroAhead per FlushInterval.
// When the writer catches up with the zeros it simply writes past them,
// growing the file as without the filler; it never waits for it.
//
// Invariants:
//   - zeros are written only under s.mu, at or after the end of the records
//     (max(size, zeroEnd)), so a record is never overwritten by zeros;
//   - zeros stop at SegmentSize-MaxMessageSize, so a segment that rolls
//     because its next record does not fit has normally run past them;
//   - a segment is cut to its records (trimTailLocked: truncate + fdatasync)
//     before it is sealed, and so before a next segment is created: only the
//     last segment of the log can have a zero tail after a crash, and
//     recovery cuts it as the clean end of the log.
//
// Errors: ENOSPC while filling is not an error of the store (the zeros are
// cut back off, the filler pauses); an fdatasync that fails for space puts
// the store in the disk-full state and the commitlog range it covered is
// re-written before it is trusted (diskfull.go: it might have been the
// writeback failure of records); any other failure of a write, truncate or
// fdatasync of the commitlog file is sticky like a failure of the write
// path. The filler idles while flush work failed for space is owed.

// zeroChunk is the zeros written and fdatasynced per round. A round holds
// clSyncMu (a group commit waits for it) and its write holds mu: on ext4 on
// virtio a 256 KiB round took 0.1 ms to write and 0.8 ms to sync, a 1 MiB
// one 0.4 ms and 2.7 ms, and 4 MiB rounds pushed the p99 ack of the sync
// benchmark to 15-18 ms. Small rounds keep the stall short.
//
// zeroMaxSyncBytes (FlushSync): zeros cost as much disk bandwidth as the
// records that overwrite them, and save about 0.3 ms of metadata commit
// per fdatasync. That pays when fdatasyncs are small and many (the sync benchmark with 64
// single-message writers: ~33 KB per fdatasync, 850 -> 450 us per
// fdatasync) and loses when they are large (64 writers of 32-message
// batches: ~1 MB per fdatasync, the zero rounds starved the group commit
// and throughput fell by a third; the async flusher: megabytes per
// fdatasync, nobody waiting for it). So the filler idles while the average
// fdatasync covers more than zeroMaxSyncBytes.
const (
	zeroChunk        = 256 << 10
	zeroNoSpaceFor   = time.Second
	zeroMaxSyncBytes = 128 << 10
)

var errZeroNoSpace = errors.New("store: no space to zero-fill")

// zeroLimit is the offset in a segment up to which zeros are kept.
func (s *Store) zeroLimit() int64 {
	return s.opts.SegmentSize - int64(s.opts.MaxMessageSize)
}

// zeroWantLocked returns where the records or zeros of sg end now (from),
// and how many bytes of zeros after from are wanted: none until at least a
// chunk (or half of ZeroAhead) is missing, or the rest up to the limit;
// in FlushSync none while fdatasyncs are large (zeroMaxSyncBytes).
// Caller holds s.mu.
func (s *Store) zeroWantLocked(sg *segment) (from, n int64) {
	size := sg.size.Load()
	from = max(sg.zeroEnd, size)
	if s.opts.Flush == FlushSync && s.syncBytes.Load() > zeroMaxSyncBytes {
		return from, 0
	}
	limit := s.zeroLimit()
	want := min(size+s.opts.ZeroAhead, limit)
	gap := want - from
	if gap <= 0 || gap < min(s.opts.ZeroAhead/2, zeroChunk) && want < limit {
		return from, 0
	}
	return from, gap
}

// wakeZeroLocked wakes the zero-filler when zeros are wanted ahead of the
// records of the active segment. Caller holds s.mu.
func (s *Store) wakeZeroLocked() {
	sg := s.mu.active
	if s.opts.ZeroAhead <= 0 || sg == nil {
		return
	}
	if _, n := s.zeroWantLocked(sg); n > 0 {
		select {
		case s.zeroReq <- struct{}{}:
		default:
		}
	}
}

// zeroLoop is the zero-filler goroutine.
func (s *Store) zeroLoop() {
	defer s.wg.Done()
	buf := make([]byte, min(zeroChunk, s.opts.ZeroAhead))
	var pausedUntil time.Time
	for {
		select {
		case <-s.quit:
			return
		case <-s.zeroReq:
		}
		if time.Now().Before(pausedUntil) {
			continue // the next write wakes it again
		}
		for {
			more, err := s.zeroStep(buf)
			if errors.Is(err, errZeroNoSpace) || errors.Is(err, ErrDiskFull) {
				pausedUntil = time.Now().Add(zeroNoSpaceFor)
			}
			if !more || err != nil {
				break
			}
			select {
			case <-s.quit:
				return
			default:
			}
		}
	}
}

// zeroStep writes one chunk of zeros after the records of the active
// segment and, in FlushSync, fdatasyncs it. It holds clSyncMu across both,
// so that the group commit's fdatasync never has to write the zeros out,
// and s.mu across the write only. more says another chunk is wanted.
func (s *Store) zeroStep(buf []byte) (more bool, err error) {
	s.clSyncMu.Lock()
	defer s.clSyncMu.Unlock()
	if s.stickyErr() != nil || s.owing() {
		return false, nil
	}
	s.mu.Lock()
	sg := s.mu.active
	if s.mu.closed || sg == nil {
		s.mu.Unlock()
		return false, nil
	}
	from, gap := s.zeroWantLocked(sg)
	n := min(gap, int64(len(buf)))
	if n <= 0 || sg.tailDirty {
		s.mu.Unlock()
		return false, nil
	}
	// Never eat into the reserve: writes refuse below MinFreeBytes, zeros
	// stop before. freeEst is the writer's estimate (statfs at most once a
	// second while it writes; not yet made before the first write, which
	// wakes the filler again).
	if s.mu.freeEst < s.opts.MinFreeBytes+uint64(n) {
		measured := s.mu.freeAt != 0
		s.mu.Unlock()
		if !measured {
			return false, nil
		}
		return false, errZeroNoSpace
	}
	if _, werr := sg.f.WriteAt(buf[:n], from); werr != nil {
		werr = fmt.Errorf("store: zero-fill commitlog %s: %w", sg.path, werr)
		// Cut off what was written: the file ends at the records or the
		// zeros written before, as the writer expects.
		if terr := sg.f.Truncate(from); terr != nil {
			sg.tailDirty = true
			s.mu.Unlock()
			return false, s.setSticky(errors.Join(werr, terr))
		}
		if isNoSpace(werr) {
			s.mu.freeEst = 0
			s.mu.Unlock()
			s.log.Info("store: disk full; zero-filling ahead of the commitlog paused", "segment", sg.path)
			return false, errZeroNoSpace
		}
		s.mu.Unlock()
		return false, s.setSticky(werr)
	}
	sg.zeroEnd = from + n
	s.mu.freeEst -= min(s.mu.freeEst, uint64(n))
	more = gap > n
	s.mu.Unlock()
	if s.opts.Flush != FlushSync {
		// The flusher syncs them (if still zeros) with the records.
		s.zeroBytes.Add(n)
		return more, nil
	}
	if err := sg.f.Sync(); err != nil && !sg.dropped.Load() {
		if isNoSpace(err) {
			s.df.clRewrite.Store(true) // under clSyncMu: no group commit trusted a sync meanwhile
		}
		return false, s.writeFailed(fmt.Errorf("store: fdatasync zero-filled commitlog %s: %w", sg.path, err))
	}
	s.zeroBytes.Add(n)
	return more, nil
}

// trimTailLocked cuts sg's file back to its records (its zero tail) and
// makes that durable, before sg is sealed. A failure is sticky, except
// for space (ErrDiskFull; the seal is tried again, and the records'
// range is re-written before it is trusted). Caller holds s.mu.
func (s *Store) trimTailLocked(sg *segment) error {
	size := sg.size.Load()
	if sg.zeroEnd <= size && !sg.tailDirty {
		return nil
	}
	if err := sg.f.Truncate(size); err != nil {
		return s.writeFailed(fmt.Errorf("store: cut zero tail of %s: %w", sg.path, err))
	}
	s.df.trimSyncing.Store(true)
	err := sg.f.Sync()
	if err != nil && isNoSpace(err) {
		s.df.clRewrite.Store(true) // before trimSyncing clears: see syncCommitlog
	}
	s.df.trimSyncing.Store(false)
	if err != nil {
		return s.writeFailed(fmt.Errorf("store: fdatasync %s after cutting its zero tail: %w", sg.path, err))
	}
	sg.zeroEnd, sg.tailDirty = size, false
	return nil
}

// newBytesLocked is how many of n bytes written at pos grow the file: the
// part of them that lands in the zeroed tail of the active segment takes
// no space. Caller holds s.mu.
func (s *Store) newBytesLocked(pos int64, n int) int {
	sg := s.mu.active
	if sg == nil || pos < sg.base || pos+int64(n) > sg.base+s.opts.SegmentSize {
		return n // in a new segment
	}
	z := sg.base + sg.zeroEnd
	return n - int(min(max(z-pos, 0), int64(n)))
}
