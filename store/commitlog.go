package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/stratamq/stratamq/infra/vfs"
)

// segment is one commitlog file. size is the number of valid bytes; it only
// grows while the segment is active and is final once sealed.
type segment struct {
	base   int64
	path   string
	f      vfs.File
	size   atomic.Int64
	sealed atomic.Bool
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
		sg := &segment{base: base, path: path, f: f}
		sg.size.Store(fi.Size())
		sg.sealed.Store(true)
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
// CRC) and calling fn for it. It returns the offset just past the last valid
// record: the valid end of the log.
func (s *Store) scanSegments(t segTable, from int64, fn func(m *recordMeta) error) (int64, error) {
	if len(t) == 0 {
		return from, nil
	}
	if from < t[0].base {
		from = t[0].base
	}
	buf := make([]byte, max(4<<20, s.opts.MaxMessageSize))
	pos := from
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
			for p+8 <= len(chunk) {
				size := int64(int32(binary.BigEndian.Uint32(chunk[p:])))
				if binary.BigEndian.Uint32(chunk[p+4:]) == MagicFiller && size >= 8 && pos+int64(p)+size == fileEnd {
					p = len(chunk) // filler runs to the end of the segment
					break
				}
				if size < RecordOverhead || pos+int64(p)+size > fileEnd {
					return pos + int64(p), nil
				}
				if int64(p)+size > int64(len(chunk)) {
					break // refill from here
				}
				m, err := parseMeta(chunk[p:p+int(size)], true)
				if err != nil || m.physOffset != pos+int64(p) {
					return pos + int64(p), nil
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

// readAt reads len(p) log bytes at global offset off; they must lie in one
// segment.
func (s *Store) readAt(p []byte, off int64) error {
	t := *s.segs.Load()
	sg := t.find(off)
	if sg == nil || off+int64(len(p)) > sg.end() {
		return fmt.Errorf("store: read %d bytes at %d: %w", len(p), off, ErrNotFound)
	}
	if err := readFull(sg.f, p, off-sg.base); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("store: read commitlog at %d: %w", off, err)
	}
	return nil
}
