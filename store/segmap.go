package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/stratamq/stratamq/infra/mmap"
)

// Scanning a sealed segment from a read-only mapping of its file
// (SegmentLayout, WriteSegmentIndex): the records are parsed where they
// lie in the page cache, with no read calls and no copy into a buffer, so
// a scan that only walks the records' headers (the layout, an index's
// first pass) costs a few milliseconds for a 256 MiB segment of 1 KiB
// records, and one that checks the body CRCs reads each byte once. Where
// the file cannot be mapped (another vfs.FS than the operating system's,
// another OS), the scans read it through a buffer as before
// (scanSegmentsBuf).
//
// A sealed segment's file is never written again, but it may be cut
// shorter under a mapping (CutLog on a store whose segments another
// process still reads, a disk error on a page not cached): touching the
// lost pages raises SIGBUS. The scans read the mapping with faults turned
// into panics (debug.SetPanicOnFault) on their goroutine and return a
// fault inside the mapping as an error (errSegmentFault); they never
// crash the process. Unlinking a mapped file (DropSegment) is harmless:
// the mapping keeps its pages.

// noSegmentMap, set only by tests, makes the scans read segments through
// a buffer (scanSegmentsBuf) as where they cannot be mapped.
var noSegmentMap bool

// errSegmentFault marks a fault while reading a mapped segment.
var errSegmentFault = errors.New("fault reading the mapped segment")

// sealedMapping is a read-only mapping of a sealed segment's records.
type sealedMapping struct {
	sg      *segment
	data    []byte // the segment's bytes [0, size)
	touched byte   // keeps the loads of touchLines
	// refs counts the holders of data: this sealedMapping until its close,
	// and each borrow (SegmentBytes) until its release; the last one
	// unmaps it.
	refs atomic.Int32
}

// mapSealed maps the sealed segment sg's file (its size bytes). It
// returns nil, with no error, when the file cannot be mapped: the caller
// reads it instead.
func mapSealed(sg *segment) *sealedMapping {
	size := sg.size.Load()
	if size <= 0 || noSegmentMap {
		return nil
	}
	f, ok := sg.f.(mmap.File)
	if !ok {
		return nil
	}
	data, err := mmap.Map(f, size)
	if err != nil {
		return nil
	}
	m := &sealedMapping{sg: sg, data: data}
	m.refs.Store(1)
	return m
}

// close gives up this holder's reference (it is idempotent): the segment
// is unmapped once no borrow holds it either.
func (m *sealedMapping) close() {
	if m != nil && m.data != nil {
		unref(m.data, &m.refs)
		m.data = nil
	}
}

// borrow returns the mapped bytes and a release (idempotent) that keeps
// them mapped until it is called, whatever becomes of m.
func (m *sealedMapping) borrow() ([]byte, func()) {
	data, refs := m.data, &m.refs
	refs.Add(1)
	return data, sync.OnceFunc(func() { unref(data, refs) })
}

func unref(data []byte, refs *atomic.Int32) {
	if refs.Add(-1) == 0 {
		mmap.Unmap(data)
	}
}

// scan is scanSegmentsBuf over the mapped segment, from global offset
// from: it verifies each record (magic, size bounds, field lengths,
// PHYSICALOFFSET and, with checkCRC, the body CRC), calls fn for it (m's
// slices alias the mapping, valid during the call) and returns the
// offset just past the last valid record. A fault reading the mapping
// is an error matching errSegmentFault.
func (m *sealedMapping) scan(from int64, checkCRC bool, fn func(m *recordMeta) error) (valid int64, err error) {
	sg, data := m.sg, m.data
	base, end := sg.base, sg.base+int64(len(m.data))
	if from < base {
		from = base
	}
	pos := from
	var touch byte
	defer func() { m.touched = touch }()
	err = mmap.Guard(data, errSegmentFault, func() error {
		var rm recordMeta // one for the scan: fn must not keep &rm
		for pos < end {
			b := data[pos-base:]
			if len(b) < 8 {
				return nil // fewer than 8 bytes of tail
			}
			if !checkCRC {
				// Load every cache line of the record: parseMeta needs its
				// tail (topic, properties), and a scan that jumps from tail
				// to tail waits for memory once per record, while one that
				// streams through every line lets the prefetchers run
				// ahead (on a 256 MiB segment of 1 KiB records: ~40 ms
				// against ~20 ms).
				if size := int64(int32(binary.BigEndian.Uint32(b))); size > 0 && size <= int64(len(b)) {
					touch += touchLines(b[:size])
				}
			}
			step, size := recordAt(b, pos, end, checkCRC, &rm)
			switch step {
			case stepFiller:
				pos = end
				return nil
			case stepEnd, stepShort: // the mapping is the whole file: short is its end
				return nil
			}
			if err := fn(&rm); err != nil {
				return err
			}
			pos += size
		}
		return nil
	})
	if errors.Is(err, errSegmentFault) {
		err = fmt.Errorf("store: read segment %s: %w", sg.path, err)
	}
	return pos, err
}

// scanSealed scans the sealed segment sg from global offset from, through
// the mapping m when there is one, else through buf (scanSegmentsBuf).
func scanSealed(m *sealedMapping, sg *segment, from int64, buf []byte, checkCRC bool, fn func(m *recordMeta) error) (int64, error) {
	if m != nil {
		return m.scan(from, checkCRC, fn)
	}
	return scanSegmentsBuf(segTable{sg}, from, buf, checkCRC, fn)
}

// touchLines loads one byte of every 64-byte line of b.
func touchLines(b []byte) byte {
	var x byte
	for i := 0; i < len(b); i += 64 {
		x ^= b[i]
	}
	return x
}
