package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/stratamq/stratamq/infra/vfs"
)

// cqEntrySize is the size of a consumequeue entry: commitlog offset (int64),
// record size (int32), tags code (int64). An entry with size 0 is blank.
const cqEntrySize = 20

type cqFile struct {
	start   int64 // index of its first entry; the name is start*20
	path    string
	f       vfs.File
	n       int64 // entries in the file, blanks included
	removed atomic.Bool
}

// cqueue is one topic/queue's consumequeue. Entries [min, written) are in
// files (page cache, maybe not synced); entries [written, max) are in pending,
// waiting for the flusher.
type cqueue struct {
	topic string
	id    int32
	dir   string

	// next is the queue offset the writer assigns next; guarded by Store.mu.
	next int64

	mu      sync.RWMutex // not held across fsync
	files   []*cqFile
	min     int64
	max     int64
	written int64
	pending []byte
	dirMade bool // dir exists (new dirs are synced by the flusher)
	deleted bool

	// coldEnd is set (at Open, fixed after) for a queue restored from the
	// tier on an empty disk: entries below it are read through the cold
	// index (Options.ColdIndex); local files start at or above it.
	coldEnd int64
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

// readEntriesLocked copies entries [from, from+n) into dst (n*20 bytes) and
// returns how many it copied. It stops early at a hole (a missing file);
// copied == 0 with hole set means from itself is in a hole, and next is the
// first index after it.
func (q *cqueue) readEntriesLocked(dst []byte, from int64, n int) (copied int, hole bool, next int64, err error) {
	for copied < n {
		idx := from + int64(copied)
		if idx >= q.max {
			return copied, false, 0, nil
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
				return copied, false, 0, nil
			}
			return 0, true, min(nextStart, q.written), nil
		}
		cnt := min(int64(n-copied), f.start+f.n-idx, q.written-idx)
		b := dst[copied*cqEntrySize : (int64(copied)+cnt)*cqEntrySize]
		if err := readFull(f.f, b, (idx-f.start)*cqEntrySize); err != nil {
			return copied, false, 0, fmt.Errorf("store: read consumequeue %s: %w", f.path, err)
		}
		copied += int(cnt)
	}
	return copied, false, 0, nil
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
// consumequeue (the zero value; the caller holds q.mu) or, with cold set,
// the cold index of a restored queue (below q.coldEnd; no lock needed),
// with ctx.
type entrySource struct {
	cold *Store
	ctx  context.Context
}

// readEntries is readEntriesLocked, or coldEntries for a cold source.
func (q *cqueue) readEntries(src entrySource, dst []byte, from int64, n int) (copied int, hole bool, next int64, err error) {
	if src.cold != nil {
		return src.cold.coldEntries(src.ctx, q, dst, from, n)
	}
	return q.readEntriesLocked(dst, from, n)
}

// entryLocked returns the entry at idx (min <= idx < max).
func (q *cqueue) entryLocked(idx int64) (cqEntry, bool, error) {
	return q.entryFrom(entrySource{}, idx)
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

// firstEntryFromLocked returns the first non-blank entry at an index >= i,
// skipping blanks and holes; ok is false (and idx q.max) when there is none.
func (q *cqueue) firstEntryFromLocked(i int64) (idx int64, e cqEntry, ok bool, err error) {
	idx, e, ok, err = q.firstEntryIn(entrySource{}, i, q.max)
	if !ok && err == nil {
		idx = q.max
	}
	return idx, e, ok, err
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

// advanceMinLocked moves min to the first entry whose commitlog offset is
// >= floor (q.max when every entry is below it). Entries of a queue are in
// commitlog order, so this is a binary search over "the next non-blank entry
// from i is at or above floor".
func (q *cqueue) advanceMinLocked(floor int64) error {
	j, _, err := searchFloor(q.min, q.max, floor, q.firstEntryFromLocked)
	if err != nil {
		return err
	}
	if j > q.min {
		q.min = j
	}
	return nil
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

// truncateLocked drops entries at index n and above.
func (q *cqueue) truncateLocked(fs vfs.FS, n int64) error {
	if n >= q.max {
		return nil
	}
	if n >= q.written {
		q.pending = q.pending[:(n-q.written)*cqEntrySize]
		q.max = n
		return nil
	}
	q.pending = q.pending[:0]
	for len(q.files) > 0 {
		f := q.files[len(q.files)-1]
		if f.start < n {
			if keep := n - f.start; keep < f.n {
				if err := f.f.Truncate(keep * cqEntrySize); err != nil {
					return fmt.Errorf("store: truncate consumequeue %s: %w", f.path, err)
				}
				f.n = keep
			}
			break
		}
		f.removed.Store(true)
		f.f.Close()
		if err := fs.Remove(f.path); err != nil {
			return fmt.Errorf("store: remove consumequeue file: %w", err)
		}
		q.files = q.files[:len(q.files)-1]
	}
	q.written, q.max = n, n
	if q.min > n {
		q.min = n
	}
	return nil
}

// dispatchLocked records the entry for queue offset qoff, the one code path
// for Put, AppendRaw and recovery. Normally qoff == max. A lower qoff that
// matches the stored entry is a repeat (recovery replaying records already
// dispatched); one that does not match replaces everything from qoff on. A
// higher qoff leaves blank entries before it (or starts an empty queue there).
func (q *cqueue) dispatchLocked(fs vfs.FS, qoff int64, e cqEntry) error {
	switch {
	case qoff == q.max:
	case qoff > q.max:
		if q.min == q.max && q.written == q.max && len(q.files) == 0 {
			q.min, q.max, q.written = qoff, qoff, qoff
		} else {
			q.pending = append(q.pending, make([]byte, (qoff-q.max)*cqEntrySize)...)
			q.max = qoff
		}
	case qoff < q.min || qoff < q.coldEnd:
		return nil // below the retained range, or in the cold range of a restored queue
	default:
		old, ok, err := q.entryLocked(qoff)
		if err != nil {
			return err
		}
		if ok && old == e {
			return nil
		}
		if err := q.truncateLocked(fs, qoff); err != nil {
			return err
		}
	}
	q.appendLocked(e)
	return nil
}

// flushLocked writes pending entries to files, creating files as needed, and
// returns the files written (to sync) and whether new names need dir syncs.
func (q *cqueue) flushLocked(fs vfs.FS, perFile int64) (touched []*cqFile, newNames bool, err error) {
	for len(q.pending) > 0 {
		idx := q.written
		var f *cqFile
		if len(q.files) > 0 {
			if last := q.files[len(q.files)-1]; idx < fileLimit(last.start, perFile) && idx >= last.start {
				f = last
			}
		}
		if f == nil {
			if !q.dirMade {
				if err := fs.MkdirAll(q.dir, 0o755); err != nil {
					return touched, newNames, fmt.Errorf("store: make consumequeue dir: %w", err)
				}
				q.dirMade = true
			}
			// Files hold the aligned ranges [k*perFile, (k+1)*perFile); a
			// restored queue's first file starts at its coldEnd instead.
			start := max(idx/perFile*perFile, min(q.coldEnd, idx))
			path := filepath.Join(q.dir, segmentName(start*cqEntrySize))
			file, err := fs.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
			if err != nil {
				return touched, newNames, fmt.Errorf("store: create consumequeue file: %w", err)
			}
			f = &cqFile{start: start, path: path, f: file}
			q.files = append(q.files, f)
			newNames = true
		}
		cnt := min(int64(len(q.pending)/cqEntrySize), fileLimit(f.start, perFile)-idx)
		b := q.pending[:cnt*cqEntrySize]
		if _, err := f.f.WriteAt(b, (idx-f.start)*cqEntrySize); err != nil {
			return touched, newNames, fmt.Errorf("store: write consumequeue %s: %w", f.path, err)
		}
		f.n = idx - f.start + cnt
		q.written += cnt
		q.pending = q.pending[cnt*cqEntrySize:]
		if len(touched) == 0 || touched[len(touched)-1] != f {
			touched = append(touched, f)
		}
	}
	if cap(q.pending) > 64<<10 {
		q.pending = nil // do not pin a burst's buffer
	} else {
		q.pending = q.pending[:0:cap(q.pending)]
	}
	return touched, newNames, nil
}

// loadQueue opens the files of one queue directory.
func loadQueue(fs vfs.FS, topic string, id int32, dir string) (*cqueue, error) {
	q := &cqueue{topic: topic, id: id, dir: dir, dirMade: true}
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
		f, err := fs.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			q.closeFiles()
			return nil, fmt.Errorf("store: open consumequeue: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			q.closeFiles()
			return nil, fmt.Errorf("store: stat consumequeue: %w", err)
		}
		n := fi.Size() / cqEntrySize
		if fi.Size()%cqEntrySize != 0 {
			if err := f.Truncate(n * cqEntrySize); err != nil {
				f.Close()
				q.closeFiles()
				return nil, fmt.Errorf("store: truncate torn consumequeue entry: %w", err)
			}
		}
		cf := &cqFile{start: off / cqEntrySize, path: path, f: f, n: n}
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
		f.f.Close()
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
	buf := make([]byte, 4096*cqEntrySize)
	for q.min < q.max {
		n, hole, next, err := q.readEntriesLocked(buf, q.min, len(buf)/cqEntrySize)
		if err != nil {
			q.closeFiles()
			return nil, err
		}
		if hole {
			q.min = next
			continue
		}
		i := 0
		for i < n && getEntry(buf[i*cqEntrySize:]).size == 0 {
			i++
		}
		q.min += int64(i)
		if i < n {
			break
		}
	}
	return q, nil
}

// fileLimit is the end (exclusive index) of the file starting at start.
func fileLimit(start, perFile int64) int64 { return (start/perFile + 1) * perFile }

func (q *cqueue) closeFiles() {
	for _, f := range q.files {
		f.f.Close()
	}
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
