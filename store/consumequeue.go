package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/stratamq/stratamq/infra/vfs"
)

// cqEntrySize is the size of a consumequeue entry: commitlog offset (int64),
// record size (int32), tags code (int64). An entry with size 0 is blank.
const cqEntrySize = 20

// cqFile is one consumequeue file. Its descriptor is opened on first use
// and may be closed when idle (fdCache): h is nil while it is closed.
type cqFile struct {
	start int64 // index of its first entry; the name is start*20
	path  string
	n     int64 // entries in the file, blanks included; guarded by cqueue.mu
	// needCut: the file holds stale entries after n (a truncation); the
	// flusher cuts them. Guarded by cqueue.mu.
	needCut bool
	// maxEnd is the end (commitlog offset + size) of the last non-blank
	// entry written to the file, 0 when none, -1 when unknown (a file
	// listed at Open, or cut by a truncation): reclaim reads it then.
	// Guarded by cqueue.mu.
	maxEnd int64

	h       *cqHandle   // guarded by fdCache.mu
	removed atomic.Bool // retired: removed, topic deleted or store closed
}

// cqueue is one topic/queue's consumequeue. Entries [min, written) are in
// files (page cache, maybe not synced); entries [written, max) are in pending,
// waiting for the flusher.
//
// mu is never held across I/O. Readers plan a read under mu (which files,
// which ranges; pending entries are copied), then pread without it, and
// retry when gen moved meanwhile. The flusher copies pending under mu,
// writes without it, and publishes the new written under mu. A truncation
// (truncateLocked) changes only memory: files describes the valid entries
// only, and the flusher removes (stale) or cuts (needCut) the files' stale
// entries on its next round, before it writes after them.
type cqueue struct {
	topic string
	id    int32
	dir   string
	fds   *fdCache

	// next is the queue offset the writer assigns next; guarded by Store.mu.
	next int64

	mu      sync.RWMutex
	files   []*cqFile
	min     int64
	max     int64
	written int64
	pending []byte
	deleted bool
	// stale are files taken off files by a truncation, for the flusher to
	// retire and remove.
	stale []*cqFile
	// cutLow is the lowest index truncated to since the flusher's last
	// snapshot of this queue (math.MaxInt64: none).
	cutLow int64
	// gen counts truncations (written under mu): a reader that planned a
	// read before one retries.
	gen atomic.Uint64

	// dirMade: dir exists (new dirs are synced by the flusher). Owned by
	// the flusher (flushMu) after Open.
	dirMade bool

	// coldEnd is the first index the local consumequeue serves: entries
	// below it are read through the cold index (Options.ColdIndex). It is
	// the restored max of a queue restored from the tier on an empty disk,
	// and rises when reclaim deletes the local files of entries whose
	// records were dropped to the tier (reclaim.go). It only rises; it is
	// written under mu (with a gen bump, so readers that planned a local
	// read of a file it retires plan again, cold) and read with or
	// without it.
	coldEnd atomic.Int64

	// jumpNext, when > 0, is where a promoted copy numbered the queue from
	// (Store.ResumeQueues), once the log reached jumpAt: the queue ends at
	// least there, the offsets between its last entry and it a hole. Kept
	// in <Dir>/restored; dropped when the queue is truncated below it (the
	// copy follows a master that numbers it lower). Guarded by mu.
	jumpAt, jumpNext int64
}

type cqEntry struct {
	phys int64
	size int32
	tags int64
}

func putEntry(b []byte, e cqEntry) {
	binary.BigEndian.PutUint64(b, uint64(e.phys))
	binary.BigEndian.PutUint32(b[8:], uint32(e.size))
	binary.BigEndian.PutUint64(b[12:], uint64(e.tags))
}

func getEntry(b []byte) cqEntry {
	return cqEntry{
		phys: int64(binary.BigEndian.Uint64(b)),
		size: int32(binary.BigEndian.Uint32(b[8:])),
		tags: int64(binary.BigEndian.Uint64(b[12:])),
	}
}

func (q *cqueue) bounds() (min, max int64) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.min, q.max
}

// appendLocked adds the entry for queue offset q.max.
func (q *cqueue) appendLocked(e cqEntry) {
	var b [cqEntrySize]byte
	putEntry(b[:], e)
	q.pending = append(q.pending, b[:]...)
	q.max++
}

// fileRead is the part of an entry read that a file serves: entries
// [idx, idx+cnt) of f, into the destination from entry at.
type fileRead struct {
	f   *cqFile
	idx int64
	cnt int64
	at  int
}

// planLocked plans reading entries [from, from+n) into dst (n*20 bytes):
// entries still pending are copied now, the file parts are appended to
// reads (for runPlan, without mu). It returns how many entries the read
// covers and gen. It stops early at a hole (a missing file); copied == 0
// with hole set means from itself is in a hole, and next is the first index
// after it. Caller holds q.mu (read or write).
func (q *cqueue) planLocked(reads []fileRead, dst []byte, from int64, n int) (_ []fileRead, copied int, hole bool, next int64, gen uint64) {
	gen = q.gen.Load()
	for copied < n {
		idx := from + int64(copied)
		if idx >= q.max {
			return reads, copied, false, 0, gen
		}
		if idx >= q.written {
			off := (idx - q.written) * cqEntrySize
			c := copy(dst[copied*cqEntrySize:n*cqEntrySize], q.pending[off:])
			copied += c / cqEntrySize
			continue
		}
		f, nextStart := q.fileForLocked(idx)
		if f == nil {
			if copied > 0 {
				return reads, copied, false, 0, gen
			}
			return reads, 0, true, min(nextStart, q.written), gen
		}
		cnt := min(int64(n-copied), f.start+f.n-idx, q.written-idx)
		reads = append(reads, fileRead{f: f, idx: idx, cnt: cnt, at: copied})
		copied += int(cnt)
	}
	return reads, copied, false, 0, gen
}

// runPlan does the file reads of a plan made at gen, holding no queue
// lock. retry: the queue was truncated (or a file retired) since the plan;
// plan again.
func (q *cqueue) runPlan(reads []fileRead, dst []byte, gen uint64) (retry bool, err error) {
	for _, r := range reads {
		h, err := q.fds.acquire(r.f)
		if err == nil {
			b := dst[r.at*cqEntrySize : (int64(r.at)+r.cnt)*cqEntrySize]
			if err = readFull(h.f, b, (r.idx-r.f.start)*cqEntrySize); err != nil {
				err = fmt.Errorf("store: read consumequeue %s: %w", r.f.path, err)
			}
			q.fds.release(h)
		}
		if err != nil {
			switch {
			case q.gen.Load() != gen:
				return true, nil
			case errors.Is(err, errFileGone):
				// Retired without a truncation: the store closed.
				return false, fmt.Errorf("store: read consumequeue %s/%d: %w", q.topic, q.id, ErrClosed)
			}
			return false, err
		}
	}
	return q.gen.Load() != gen, nil
}

// maxReadTries bounds the plans of one read (each retry follows a
// truncation of the queue: replication rewriting it, or its deletion).
const maxReadTries = 100

// readEntriesLocal copies entries [from, from+n) of the local consumequeue
// into dst (n*20 bytes) and returns how many it copied, as planLocked
// says. It takes q.mu only to plan; the caller must not hold it.
func (q *cqueue) readEntriesLocal(dst []byte, from int64, n int) (copied int, hole bool, next int64, err error) {
	return q.readEntries(entrySource{}, dst, from, n)
}

// fileForLocked returns the file holding index idx, or nil and the start of
// the next file.
func (q *cqueue) fileForLocked(idx int64) (*cqFile, int64) {
	lo, hi := 0, len(q.files)
	for lo < hi {
		m := (lo + hi) / 2
		if q.files[m].start+q.files[m].n <= idx {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(q.files) {
		f := q.files[lo]
		if f.start <= idx {
			return f, 0
		}
		return nil, f.start
	}
	return nil, q.max
}

// entrySource is where a scan reads a queue's entries: the local
// consumequeue only (the zero value) or, with cold set, the whole queue:
// the cold index below q.coldEnd (as it is when each read is planned),
// the local consumequeue above it, with ctx. Neither needs q.mu held (the
// caller must not hold it).
type entrySource struct {
	cold *Store
	ctx  context.Context
}

// readEntries is readEntriesLocal for a local source. For a cold source it
// reads through the cold index (coldEntries, up to coldEnd) when from is
// below q.coldEnd, else locally; a local read that a reclaim overtook
// (the file it planned to read retired, coldEnd raised) plans again and
// goes cold.
func (q *cqueue) readEntries(src entrySource, dst []byte, from int64, n int) (copied int, hole bool, next int64, err error) {
	var arr [4]fileRead
	for try := 0; ; try++ {
		q.mu.RLock()
		if ce := q.coldEnd.Load(); src.cold != nil && from < ce {
			q.mu.RUnlock()
			return src.cold.coldEntries(src.ctx, q, ce, dst, from, n)
		}
		reads, copied, hole, next, gen := q.planLocked(arr[:0], dst, from, n)
		q.mu.RUnlock()
		retry, err := q.runPlan(reads, dst, gen)
		if !retry {
			return copied, hole, next, err
		}
		if try >= maxReadTries {
			return 0, false, 0, fmt.Errorf("store: consumequeue %s/%d kept changing under a read", q.topic, q.id)
		}
	}
}

// entryFrom returns the entry at idx, read from src; ok is false in a hole.
func (q *cqueue) entryFrom(src entrySource, idx int64) (cqEntry, bool, error) {
	var b [cqEntrySize]byte
	n, _, _, err := q.readEntries(src, b[:], idx, 1)
	if err != nil || n == 0 {
		return cqEntry{}, false, err
	}
	return getEntry(b[:]), true, nil
}

// firstEntryLocal returns the first non-blank local entry at an index >= i,
// skipping blanks and holes; ok is false (and idx where the scan stopped,
// the queue's max) when there is none.
func (q *cqueue) firstEntryLocal(i int64) (idx int64, e cqEntry, ok bool, err error) {
	return q.firstEntryIn(entrySource{}, i, math.MaxInt64)
}

// firstEntryIn returns the first non-blank entry at an index in [i, end),
// read from src, skipping blanks and holes; ok is false when there is none
// (idx is then where the scan stopped: end, or the end of what src has).
func (q *cqueue) firstEntryIn(src entrySource, i, end int64) (idx int64, e cqEntry, ok bool, err error) {
	const chunk = 64
	var buf [chunk * cqEntrySize]byte
	for i < end {
		n, hole, next, err := q.readEntries(src, buf[:], i, int(min(chunk, end-i)))
		if err != nil {
			return 0, cqEntry{}, false, err
		}
		if hole {
			i = next
			continue
		}
		if n == 0 {
			break
		}
		for k := range n {
			if e := getEntry(buf[k*cqEntrySize:]); e.size > 0 {
				return i + int64(k), e, true, nil
			}
		}
		i += int64(n)
	}
	return i, cqEntry{}, false, nil
}

// searchFloor finds the first entry in [lo, hi) whose commitlog offset is
// >= floor, given first(i), the first non-blank entry at an index >= i (a
// queue's entries are in commitlog order, so this is a binary search over
// "first(i) is at or above floor"). It returns first's idx and ok for the
// lowest such i; ok is false when every entry is below floor.
func searchFloor(lo, hi, floor int64, first func(i int64) (int64, cqEntry, bool, error)) (idx int64, ok bool, err error) {
	for lo < hi {
		m := lo + (hi-lo)/2
		j, e, ok, err := first(m)
		if err != nil {
			return 0, false, err
		}
		if !ok || e.phys >= floor {
			hi = m
		} else {
			lo = j + 1
		}
	}
	idx, _, ok, err = first(lo)
	return idx, ok, err
}

// truncateLocked drops entries at index n and above, in memory: files (or
// their parts) at or after n move off the queue's file list, and the
// flusher removes or cuts them (flushQueue) before it writes there.
// Readers that planned a read before it retry (gen).
func (q *cqueue) truncateLocked(n int64) {
	if n >= q.max {
		return
	}
	q.gen.Add(1)
	q.cutLow = min(q.cutLow, n)
	if n >= q.written {
		q.pending = q.pending[:(n-q.written)*cqEntrySize]
	} else {
		q.pending = q.pending[:0]
		q.written = n
		q.staleFromLocked(n)
	}
	q.max = n
	if q.min > n {
		q.min = n
	}
}

// staleFromLocked takes the file entries at index n and above off the
// file list: whole files go to stale (removed by the flusher), the file
// holding n is cut short (needCut: the flusher truncates it).
func (q *cqueue) staleFromLocked(n int64) {
	for len(q.files) > 0 {
		f := q.files[len(q.files)-1]
		if f.start >= n {
			q.stale = append(q.stale, f)
			q.files = q.files[:len(q.files)-1]
			continue
		}
		if f.start+f.n > n {
			f.n = n - f.start
			f.needCut = true
			f.maxEnd = -1
		}
		return
	}
}

// holeStartLocked reports whether index i lies in a gap of the local
// files below written (a jump's hole, or before the first file), and
// returns the gap's first index (the end of the file before it; coldEnd
// before the first file). Caller holds mu.
func (q *cqueue) holeStartLocked(i int64) (int64, bool) {
	if i >= q.written {
		return 0, false
	}
	k := sort.Search(len(q.files), func(k int) bool { return q.files[k].start+q.files[k].n > i })
	if k < len(q.files) && q.files[k].start <= i {
		return 0, false
	}
	if k == 0 {
		return q.coldEnd.Load(), true
	}
	return q.files[k-1].start + q.files[k-1].n, true
}

// raiseToJumpLocked makes the queue end at jumpNext when it ends below:
// a hole after its last entry (nothing is pending then: at Open, and in
// ResumeQueues after a flush), else blank entries. Caller holds mu.
func (q *cqueue) raiseToJumpLocked() {
	if q.deleted || q.max >= q.jumpNext {
		return
	}
	if len(q.pending) > 0 || q.written != q.max {
		q.pending = append(q.pending, make([]byte, (q.jumpNext-q.max)*cqEntrySize)...)
	} else {
		q.written = q.jumpNext
	}
	q.max = q.jumpNext
	q.next = q.max
}

// dispatch records the entry for queue offset qoff, the one code path for
// Put, AppendRaw and recovery (the writer: the caller holds Store.mu or is
// recovering), and returns the queue's new max. Normally qoff == max. A
// lower qoff that matches the stored entry is a repeat (recovery replaying
// records already dispatched); one that does not match replaces everything
// from qoff on. A higher qoff leaves blank entries before it (or starts an
// empty queue there). The stored entry is read without q.mu (only the
// writer changes entries).
func (q *cqueue) dispatch(qoff int64, e cqEntry) (mx int64, jumpDropped bool, err error) {
	q.mu.Lock()
	if qoff < q.max && qoff >= q.min && qoff >= q.coldEnd.Load() {
		q.mu.Unlock()
		old, ok, err := q.entryFrom(entrySource{}, qoff)
		q.mu.Lock()
		if err != nil {
			q.mu.Unlock()
			return 0, false, err
		}
		if ok && old == e || qoff < q.min || qoff < q.coldEnd.Load() {
			// A repeat, or an offset reclaim (or retention) took below the
			// local range meanwhile: nothing to replace.
			mx := q.max
			q.mu.Unlock()
			return mx, false, nil
		}
		q.truncateLocked(qoff)
		if qoff < q.jumpNext {
			// The master numbers the queue below this copy's jump: its
			// numbering wins (a slave follows its master).
			q.jumpAt, q.jumpNext, jumpDropped = 0, 0, true
		}
	}
	defer q.mu.Unlock()
	switch {
	case qoff == q.max:
	case qoff > q.max:
		switch {
		case q.min == q.max && q.written == q.max && len(q.files) == 0:
			q.min, q.max, q.written = qoff, qoff, qoff
		case len(q.pending) == 0 && q.written == q.max:
			// A jump (a promoted master numbering the queue past what the
			// bucket says was handed out): a hole up to qoff, which the
			// flush leaves as a gap before a file starting at qoff (past
			// the last file, or past the cold range of a queue with none).
			q.max, q.written = qoff, qoff
		default:
			// Entries not yet written: blank entries up to qoff.
			q.pending = append(q.pending, make([]byte, (qoff-q.max)*cqEntrySize)...)
			q.max = qoff
		}
	default:
		return q.max, jumpDropped, nil // below the retained range, or in the cold range of a restored queue
	}
	q.appendLocked(e)
	return q.max, jumpDropped, nil
}

// newQueue makes the (empty, in-memory) consumequeue of topic/id, at its
// tombstone when it was deleted before (tombstone.go). Caller holds qmu.
func (s *Store) newQueue(topic string, id int32) *cqueue {
	q := &cqueue{topic: topic, id: id, dir: filepath.Join(s.cqDir, topic, queueDirName(id)), fds: s.fds}
	s.startAtTomb(q)
	return q
}

// admitQueue makes sure topic/id has a consumequeue before a Put writes to
// it, creating it within Options.MaxTopics and MaxQueuesPerTopic
// (ErrQueueLimit past them).
func (s *Store) admitQueue(topic string, id int32) error {
	s.qmu.RLock()
	q := s.topics[topic][id]
	s.qmu.RUnlock()
	if q != nil {
		return nil
	}
	s.qmu.Lock()
	defer s.qmu.Unlock()
	qs := s.topics[topic]
	if qs == nil {
		if n := len(s.topics); n >= s.opts.MaxTopics {
			return fmt.Errorf("%w: topic %q would be topic %d of the store, the limit is %d (MaxTopics)", ErrQueueLimit, topic, n+1, s.opts.MaxTopics)
		}
		qs = map[int32]*cqueue{}
		s.topics[topic] = qs
	}
	if qs[id] == nil {
		if n := len(qs); n >= s.opts.MaxQueuesPerTopic {
			return fmt.Errorf("%w: queue %d would be queue %d of topic %q, the limit is %d (MaxQueuesPerTopic)", ErrQueueLimit, id, n+1, topic, s.opts.MaxQueuesPerTopic)
		}
		qs[id] = s.newQueue(topic, id)
	}
	return nil
}

// cqWrite is a file write of one flushQueue round.
type cqWrite struct {
	f      *cqFile
	end    int64 // entries in the file after the write
	maxEnd int64 // lastEntryEnd of the entries written
}

// lastEntryEnd is the end (commitlog offset + size) of the last non-blank
// entry in b (whole entries), 0 when all are blank.
func lastEntryEnd(b []byte) int64 {
	for i := len(b)/cqEntrySize - 1; i >= 0; i-- {
		if e := getEntry(b[i*cqEntrySize:]); e.size > 0 {
			return e.phys + int64(e.size)
		}
	}
	return 0
}

// flushQueue writes the queue's pending entries to its files, creating
// files as needed and first cutting the stale entries a truncation left,
// holding q.mu only to take a copy of pending and to publish the result:
// the writer's dispatch never waits for this I/O. It returns the files
// written (to sync), whether new names need dir syncs, and the queue's max
// that the files will hold once synced (0 for a deleted queue). buf is
// scratch, returned for reuse. Caller holds flushMu.
func (q *cqueue) flushQueue(fs vfs.FS, perFile int64, buf []byte) (touched []*cqFile, newNames bool, mark int64, _ []byte, err error) {
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return nil, false, 0, buf, nil
	}
	from := q.written
	buf = append(buf[:0], q.pending...)
	q.cutLow = math.MaxInt64
	mark = q.max
	drop := q.stale
	q.stale = nil
	var last, cut *cqFile
	var cutTo, lastEnd int64
	if len(q.files) > 0 {
		last = q.files[len(q.files)-1]
		if last.needCut {
			cut, cutTo = last, last.n
			last.needCut = false
		}
		lastEnd = last.start + last.n
	} else {
		lastEnd = max(q.coldEnd.Load(), 0)
	}
	q.mu.Unlock()
	if len(buf) == 0 && cut == nil && len(drop) == 0 {
		return nil, false, mark, buf, nil
	}

	var created []*cqFile
	var writes []cqWrite
	done := int64(0) // entries of buf written
	dropped, cutDone := 0, cut == nil
	err = func() error {
		for _, f := range drop {
			if err := q.fds.retire(f); err != nil {
				return err
			}
			if err := fs.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("store: remove consumequeue file: %w", err)
			}
			dropped++
			newNames = true
		}
		if cut != nil {
			h, err := q.fds.acquire(cut)
			if err != nil {
				return err
			}
			err = h.f.Truncate(cutTo * cqEntrySize)
			q.fds.release(h)
			if err != nil {
				return fmt.Errorf("store: truncate consumequeue %s: %w", cut.path, err)
			}
			cutDone = true
			touched = append(touched, cut)
		}
		total := int64(len(buf) / cqEntrySize)
		for done < total {
			idx := from + done
			f := last
			jumped := done == 0 && idx > lastEnd
			if f != nil && (jumped || !(idx < fileLimit(f.start, perFile) && idx >= f.start)) {
				f = nil
			}
			var h *cqHandle
			if f == nil {
				if !q.dirMade {
					if err := fs.MkdirAll(q.dir, 0o755); err != nil {
						return fmt.Errorf("store: make consumequeue dir: %w", err)
					}
					q.dirMade = true
				}
				// Files hold the aligned ranges [k*perFile, (k+1)*perFile); a
				// restored queue's first file starts at its coldEnd instead.
				// After a hole (the entries from the last file's end, or
				// the cold range's, up to idx: a jump, or a queue that
				// starts past 0) a file starts at idx, so that the hole is a
				// gap before it rather than blank entries to scan.
				start := max(idx/perFile*perFile, min(q.coldEnd.Load(), idx))
				if jumped {
					start = idx
				}
				f = &cqFile{start: start, path: filepath.Join(q.dir, segmentName(start*cqEntrySize))}
				var err error
				if h, err = q.fds.create(f); err != nil {
					return err
				}
				created = append(created, f)
				last = f
				newNames = true
			} else {
				var err error
				if h, err = q.fds.acquire(f); err != nil {
					return err
				}
			}
			cnt := min(total-done, fileLimit(f.start, perFile)-idx)
			_, err := h.f.WriteAt(buf[done*cqEntrySize:(done+cnt)*cqEntrySize], (idx-f.start)*cqEntrySize)
			q.fds.release(h)
			if err != nil {
				return fmt.Errorf("store: write consumequeue %s: %w", f.path, err)
			}
			w := cqWrite{f: f, end: idx - f.start + cnt}
			w.maxEnd = lastEntryEnd(buf[done*cqEntrySize : (done+cnt)*cqEntrySize])
			done += cnt
			writes = append(writes, w)
			if len(touched) == 0 || touched[len(touched)-1] != f {
				touched = append(touched, f)
			}
		}
		return nil
	}()

	q.mu.Lock()
	q.files = append(q.files, created...)
	for _, w := range writes {
		w.f.n = w.end
		if w.maxEnd > 0 {
			// Writes append: the last non-blank entry written is the
			// file's last (a queue's entries are in commitlog order).
			w.f.maxEnd = w.maxEnd
		}
	}
	if dropped < len(drop) { // a failure: the next round tries again
		q.stale = append(drop[dropped:], q.stale...)
	}
	if !cutDone {
		cut.needCut = true
	}
	// Publish what was written, unless a truncation meanwhile made it stale
	// (its entries then stay pending, or are gone).
	end := from + done
	var moved int64
	switch c := q.cutLow; {
	case c >= end:
		q.written, moved = end, done
	case c >= from:
		q.written, moved = c, c-from
	}
	if moved > 0 {
		n := copy(q.pending, q.pending[moved*cqEntrySize:])
		q.pending = q.pending[:n]
	}
	if len(q.pending) == 0 && cap(q.pending) > 64<<10 {
		q.pending = nil // do not pin a burst's buffer
	}
	// Files written past a truncation made meanwhile are stale.
	q.staleFromLocked(q.written)
	q.cutLow = math.MaxInt64
	q.mu.Unlock()
	return touched, newNames, mark, buf, err
}

// loadQueue lists the files of one queue directory. No file is opened
// except to cut a torn entry and to find the queue's min (the first
// non-blank entry, through fds): the rest open on first use.
func loadQueue(fs vfs.FS, fds *fdCache, topic string, id int32, dir string) (*cqueue, error) {
	q := &cqueue{topic: topic, id: id, dir: dir, fds: fds, dirMade: true, cutLow: math.MaxInt64}
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: list consumequeue: %w", err)
	}
	for _, name := range names {
		off, ok := parseSegmentName(name)
		if !ok || off%cqEntrySize != 0 {
			continue
		}
		path := filepath.Join(dir, name)
		fi, err := fs.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("store: stat consumequeue: %w", err)
		}
		n := fi.Size() / cqEntrySize
		if fi.Size()%cqEntrySize != 0 {
			if err := truncateFile(fs, path, n*cqEntrySize); err != nil {
				return nil, fmt.Errorf("store: truncate torn consumequeue entry: %w", err)
			}
		}
		cf := &cqFile{start: off / cqEntrySize, path: path, n: n, maxEnd: -1}
		if len(q.files) > 0 {
			if last := q.files[len(q.files)-1]; last.start+last.n > cf.start {
				last.n = cf.start - last.start // overlapping files: the later one wins
			}
		}
		q.files = append(q.files, cf)
	}
	// Drop empty trailing files; they carry no entries.
	for len(q.files) > 0 && q.files[len(q.files)-1].n == 0 {
		f := q.files[len(q.files)-1]
		if err := fs.Remove(f.path); err != nil {
			return nil, fmt.Errorf("store: remove empty consumequeue file: %w", err)
		}
		q.files = q.files[:len(q.files)-1]
	}
	if len(q.files) == 0 {
		return q, nil
	}
	last := q.files[len(q.files)-1]
	q.max = last.start + last.n
	q.written = q.max
	// min: the first non-blank entry.
	q.min = q.files[0].start
	idx, _, ok, err := q.firstEntryLocal(q.min)
	if err != nil {
		q.closeFiles()
		return nil, err
	}
	if ok {
		q.min = idx
	} else {
		q.min = q.max
	}
	return q, nil
}

// truncateFile cuts the file at path to size bytes.
func truncateFile(fs vfs.FS, path string, size int64) error {
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// fileLimit is the end (exclusive index) of the file starting at start.
func fileLimit(start, perFile int64) int64 { return (start/perFile + 1) * perFile }

// closeFiles retires every file of the queue (closing their descriptors,
// at once or at the release of their last reader) and returns the first
// close error.
func (q *cqueue) closeFiles() error {
	q.mu.RLock()
	files := append(slices.Clip(q.files), q.stale...)
	q.mu.RUnlock()
	var first error
	for _, f := range files {
		if err := q.fds.retire(f); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func queueDirName(id int32) string { return strconv.FormatInt(int64(id), 10) }

// QueueFileInfo describes a full consumequeue file: every one of its
// CQEntriesPerFile entries is written, and no later write touches it.
type QueueFileInfo struct {
	Topic      string
	QueueID    int32
	FirstIndex int64 // queue offset of its first entry
	Entries    int64
	Path       string
}

// SealedQueueFiles lists the full consumequeue files of every queue (the
// uploader's source of consumequeue objects), ordered by topic, queue and
// first index. The last, partly filled file of a queue is never listed.
func (s *Store) SealedQueueFiles() []QueueFileInfo {
	per := int64(s.opts.CQEntriesPerFile)
	qs := s.allQueues()
	var out []QueueFileInfo
	for _, q := range qs {
		q.mu.RLock()
		if !q.deleted {
			for _, f := range q.files {
				if f.start%per == 0 && f.n >= per && !f.removed.Load() && q.written >= f.start+per {
					out = append(out, QueueFileInfo{Topic: q.topic, QueueID: q.id, FirstIndex: f.start, Entries: per, Path: f.path})
				}
			}
		}
		q.mu.RUnlock()
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.QueueID != b.QueueID {
			return a.QueueID < b.QueueID
		}
		return a.FirstIndex < b.FirstIndex
	})
	return out
}

// QueueEntry is QueueEntryContext without a deadline.
func (s *Store) QueueEntry(topic string, queueID int32, idx int64) (phys int64, size int32, tags int64, ok bool, err error) {
	return s.QueueEntryContext(context.Background(), topic, queueID, idx)
}

// QueueEntryContext returns the commitlog offset, record size and tags code
// of the queue's entry at idx; ok is false when idx is outside [min, max)
// or the entry is blank. Below the local consumequeue of a restored queue
// the entry is read through the cold index (ErrColdRead on failure).
func (s *Store) QueueEntryContext(ctx context.Context, topic string, queueID int32, idx int64) (phys int64, size int32, tags int64, ok bool, err error) {
	q := s.queue(topic, queueID)
	if q == nil {
		return 0, 0, 0, false, nil
	}
	if mn, mx := q.bounds(); idx < mn || idx >= mx {
		return 0, 0, 0, false, nil
	}
	e, ok, err := s.entryAt(ctx, q, idx)
	if err != nil || !ok || e.size <= 0 {
		return 0, 0, 0, false, err
	}
	return e.phys, e.size, e.tags, true, nil
}
