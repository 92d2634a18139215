package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// segment is one commitlog file. size is the number of valid bytes; it only
// grows while the segment is active and is final once sealed. dropped is set
// (after the segment left the table, before its file is closed) by
// DropSegment: a reader that still held it retries through the cold tier.
//
// While a segment is active its file may be longer than size: zeroEnd is
// the end of the zeros the zero-filler wrote ahead of the records (see
// zero.go). A segment is trimmed to size before it is sealed, so a sealed
// segment's file is exactly its records.
type segment struct {
	zeroEnd   int64 // file offset where the zero-filled tail ends; guarded by Store.mu
	tailDirty bool  // the file may be longer than max(size, zeroEnd) (a failed cut); guarded by Store.mu

	base    int64
	path    string
	f       vfs.File
	created time.Time
	size    atomic.Int64
	sealed  atomic.Bool
	dropped atomic.Bool
	firstTS atomic.Int64 // store time of the first record (unix ms), 0 unknown
	lastTS  atomic.Int64 // store time of the last record, 0 unknown
	// raStart and raEnd are the file range readAhead last advised, raLast
	// the file offset of the last read and raStreak the reads in a row
	// near the one before.
	raStart, raEnd, raLast, raStreak atomic.Int64
}

// noteTS records that records stored at ts went into sg.
func (sg *segment) noteTS(ts int64) {
	if sg.firstTS.Load() == 0 {
		sg.firstTS.Store(ts)
	}
	sg.lastTS.Store(ts)
}

func (sg *segment) info() SegmentInfo {
	return SegmentInfo{Base: sg.base, Length: sg.size.Load(), Path: sg.path, Sealed: sg.sealed.Load(),
		Created: sg.created, FirstStoreTime: sg.firstTS.Load(), LastStoreTime: sg.lastTS.Load()}
}

func (sg *segment) end() int64 { return sg.base + sg.size.Load() }

// segTable is an immutable, sorted list of segments, swapped atomically.
type segTable []*segment

// find returns the segment holding offset off, or nil.
func (t segTable) find(off int64) *segment {
	i, _ := slices.BinarySearchFunc(t, off, func(sg *segment, off int64) int {
		switch {
		case sg.base > off:
			return 1
		case sg.end() <= off:
			return -1
		}
		return 0
	})
	if i < len(t) && t[i].base <= off && off < t[i].end() {
		return t[i]
	}
	return nil
}

// segmentName is the 20-digit zero-padded global offset of a segment's (or a
// consumequeue file's) first byte.
func segmentName(off int64) string { return fmt.Sprintf("%020d", off) }

func parseSegmentName(name string) (int64, bool) {
	if len(name) != 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(name, 10, 64)
	return v, err == nil && v >= 0
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("store: open dir for sync: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store: sync dir %s: %w", dir, err)
	}
	return nil
}

// readFull reads exactly len(p) bytes at off.
func readFull(f vfs.File, p []byte, off int64) error {
	n, err := f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// loadSegments opens the commitlog segments in dir. Segments must be
// contiguous; anything after the first gap or overlap is removed (it cannot
// be reached without the bytes in the gap).
func (s *Store) loadSegments() (segTable, error) {
	dir := filepath.Join(s.opts.Dir, "commitlog")
	names, err := s.fs.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: list commitlog: %w", err)
	}
	var t segTable
	var drop []string
	for _, name := range names {
		base, ok := parseSegmentName(name)
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		if len(t) > 0 && (len(drop) > 0 || base != t[len(t)-1].end()) {
			drop = append(drop, path)
			continue
		}
		f, err := s.fs.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("store: open segment: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			t.close()
			return nil, fmt.Errorf("store: stat segment: %w", err)
		}
		sg := &segment{base: base, path: path, f: f, created: fi.ModTime()}
		sg.size.Store(fi.Size())
		sg.sealed.Store(true)
		if fi.Size() >= storeTSEnd {
			var b [storeTSEnd]byte
			if readFull(f, b[:], 0) == nil && binary.BigEndian.Uint32(b[offMagic:]) == MagicV1 &&
				int64(binary.BigEndian.Uint64(b[offPhysOffset:])) == base {
				if ts := storeTimestampOf(b[:]); ts > 0 {
					sg.firstTS.Store(ts)
					sg.created = time.UnixMilli(ts)
				}
			}
		}
		t = append(t, sg)
	}
	for _, path := range drop {
		s.log.Error("store: commitlog segment after a gap removed", "path", path)
		if err := s.fs.Remove(path); err != nil {
			t.close()
			return nil, fmt.Errorf("store: remove segment after gap: %w", err)
		}
	}
	if len(drop) > 0 {
		if err := syncDir(s.fs, dir); err != nil {
			t.close()
			return nil, err
		}
	}
	return t, nil
}

func (t segTable) close() error {
	var first error
	for _, sg := range t {
		if err := sg.f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// scanSegments reads records from offset from to the end of the log,
// verifying each (magic, size bounds, field lengths, PHYSICALOFFSET, body
// CRC) and calling fn for it (m and its slices are valid only during the
// call). It returns the offset just past the last valid record: the valid
// end of the log.
func (s *Store) scanSegments(t segTable, from int64, fn func(m *recordMeta) error) (int64, error) {
	if len(t) == 0 {
		return from, nil
	}
	return scanSegmentsBuf(t, from, make([]byte, max(4<<20, s.opts.MaxMessageSize)), true, fn)
}

// recordStep is what recordAt found.
type recordStep int

const (
	stepRecord recordStep = iota // a valid record (its size and meta)
	stepFiller                   // a filler that runs to the segment's end
	stepEnd                      // no valid record: the records end here
	stepShort                    // b ends inside the record: read more
)

// recordAt checks the record at the start of b (at least 8 bytes), at
// global offset pos in a segment file ending at fileEnd: its size bounds,
// its fields (parseMeta; with checkCRC its body CRC) and its
// PHYSICALOFFSET. The scans of the log (scanSegmentsBuf, through a
// buffer, and sealedMapping.scan, over a mapping) take it as their one
// rule of what a valid record is. m is filled for stepRecord.
func recordAt(b []byte, pos, fileEnd int64, checkCRC bool, m *recordMeta) (recordStep, int64) {
	size := int64(int32(binary.BigEndian.Uint32(b)))
	if binary.BigEndian.Uint32(b[4:]) == MagicFiller && size >= 8 && pos+size == fileEnd {
		return stepFiller, size
	}
	if size < RecordOverhead || pos+size > fileEnd {
		return stepEnd, 0
	}
	if size > int64(len(b)) {
		return stepShort, size
	}
	rm, err := parseMeta(b[:size], checkCRC)
	if err != nil || rm.physOffset != pos {
		return stepEnd, 0
	}
	*m = rm
	return stepRecord, size
}

// scanSegmentsBuf is scanSegments reading through buf (grown for a record
// bigger than it); checkCRC false skips the body CRCs.
func scanSegmentsBuf(t segTable, from int64, buf []byte, checkCRC bool, fn func(m *recordMeta) error) (int64, error) {
	if len(t) == 0 {
		return from, nil
	}
	if from < t[0].base {
		from = t[0].base
	}
	pos := from
	var m recordMeta // one for the scan: fn must not keep &m
	for _, sg := range t {
		fileEnd := sg.end()
		if fileEnd <= pos {
			continue
		}
		if sg.base > pos {
			return pos, nil // unreachable: loadSegments keeps them contiguous
		}
		for pos < fileEnd {
			want := min(int64(len(buf)), fileEnd-pos)
			chunk := buf[:want]
			if err := readFull(sg.f, chunk, pos-sg.base); err != nil {
				return pos, fmt.Errorf("store: read segment %s: %w", sg.path, err)
			}
			p := 0
		records:
			for p+8 <= len(chunk) {
				step, size := recordAt(chunk[p:], pos+int64(p), fileEnd, checkCRC, &m)
				switch step {
				case stepFiller:
					p = len(chunk)
					break records
				case stepEnd:
					return pos + int64(p), nil
				case stepShort:
					break records // refill from here
				}
				if err := fn(&m); err != nil {
					return pos + int64(p), err
				}
				p += int(size)
			}
			if p == 0 {
				if len(chunk) < 8 {
					return pos, nil // fewer than 8 bytes of tail
				}
				// A record bigger than the buffer: grow and retry.
				size := int64(binary.BigEndian.Uint32(chunk))
				buf = make([]byte, size)
				continue
			}
			pos += int64(p)
		}
	}
	return pos, nil
}

// readLog fills p with the log bytes at global offset off: from the local
// segments where they are, from Options.Cold below the first local segment.
// The range may cross segment boundaries and the cold/local boundary.
func (s *Store) readLog(ctx context.Context, p []byte, off int64) error {
	for len(p) > 0 {
		t := *s.segs.Load()
		if len(t) == 0 || off < t[0].base {
			end := s.writePos.Load()
			if len(t) > 0 {
				end = t[0].base
			}
			n := min(int64(len(p)), end-off)
			if n <= 0 || off < 0 {
				return fmt.Errorf("store: read %d bytes at %d (log ends at %d): %w", len(p), off, end, ErrNotFound)
			}
			if err := s.readCold(ctx, p[:n], off); err != nil {
				return err
			}
			p, off = p[n:], off+n
			continue
		}
		sg := t.find(off)
		if sg == nil {
			return fmt.Errorf("store: read %d bytes at %d: %w", len(p), off, ErrNotFound)
		}
		n := min(int64(len(p)), sg.end()-off)
		sg.readAhead(off - sg.base)
		if err := readFull(sg.f, p[:n], off-sg.base); err != nil {
			if sg.dropped.Load() {
				continue // dropped under us: it is no longer in the table; read it cold
			}
			if errors.Is(err, os.ErrClosed) {
				return ErrClosed
			}
			return fmt.Errorf("store: read commitlog at %d: %w", off, err)
		}
		p, off = p[n:], off+n
	}
	return nil
}

// readCold fills p from Options.Cold at off.
func (s *Store) readCold(ctx context.Context, p []byte, off int64) error {
	c := s.opts.Cold
	if c == nil {
		return fmt.Errorf("store: offset %d is below the local commitlog and no cold tier is configured: %w", off, ErrNotFound)
	}
	for n := 0; n < len(p); {
		k, err := c.ReadAt(ctx, off+int64(n), p[n:])
		if k < 0 || k > len(p)-n {
			return fmt.Errorf("%w: %d bytes at %d: reader returned %d", ErrColdRead, len(p), off, k)
		}
		n += k
		if n == len(p) {
			return nil
		}
		switch {
		case err == io.EOF:
			return fmt.Errorf("%w: %d bytes at %d: past the end of the tier after %d: %w", ErrColdRead, len(p), off, n, ErrNotFound)
		case err != nil:
			return fmt.Errorf("%w: %d bytes at %d: %w", ErrColdRead, len(p), off, err)
		case k == 0:
			return fmt.Errorf("%w: %d bytes at %d: %w", ErrColdRead, len(p), off, io.ErrNoProgress)
		}
	}
	return nil
}
