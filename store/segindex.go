package store

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// Segment index blobs (see "Segment index" in doc.go).
const (
	segIndexMagic = "SMQSIX01"
	// SegmentIndexHeaderSize is the fixed header of a segment index blob; the
	// directory follows it, then the entries.
	SegmentIndexHeaderSize = 40
	segIndexDirFixed       = 1 + 4 + 8 + 4 + 4 + 4 // per directory entry, plus the topic
)

// SegmentIndex is a decoded segment index blob: the consumequeue entries of
// every record in one commitlog segment, grouped per queue, plus a
// zero-count directory entry for every other queue the store knew, carrying
// that queue's next offset at the end of the segment.
type SegmentIndex struct {
	Base, Length int64               // the segment: [Base, Base+Length)
	Queues       []SegmentIndexQueue // sorted by topic (bytes), then queue id
	blob         []byte              // whole blob (nil when only the directory was decoded)
	dirLen       int64
	nEntries     int64
}

// SegmentIndexQueue is one directory entry.
type SegmentIndexQueue struct {
	Topic   string
	QueueID int32
	// FirstOffset is the queue offset of its first entry. With Count 0 the
	// queue has no record in the segment and FirstOffset is its next queue
	// offset at the end of the segment.
	FirstOffset int64
	Count       int64  // entries (blank entries, size 0, fill gaps in the queue)
	EntryPos    int64  // byte position of its first entry in the blob
	crc         uint32 // CRC32-IEEE of its Count*20 entry bytes
}

// End is the queue's next offset at the end of the segment.
func (q SegmentIndexQueue) End() int64 { return q.FirstOffset + q.Count }

// Find returns the directory position of topic/queueID.
func (x *SegmentIndex) Find(topic string, queueID int32) (int, bool) {
	return slices.BinarySearchFunc(x.Queues, qkey{topic, queueID}, func(e SegmentIndexQueue, k qkey) int {
		if c := cmp.Compare(e.Topic, k.topic); c != 0 {
			return c
		}
		return cmp.Compare(e.QueueID, k.id)
	})
}

// Entry returns the k-th entry (0 <= k < Count) of directory entry i: the
// commitlog offset, size (0: blank) and tags code. It needs a blob decoded
// with DecodeSegmentIndex.
func (x *SegmentIndex) Entry(i int, k int64) (phys int64, size int32, tags int64) {
	q := x.Queues[i]
	e := getEntry(x.blob[q.EntryPos+k*cqEntrySize:])
	return e.phys, e.size, e.tags
}

type qkey struct {
	topic string
	id    int32
}

func compareQKey(a, b qkey) int {
	if c := cmp.Compare(a.topic, b.topic); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// errPartEnd stops a scan of a part of a segment at its end.
var errPartEnd = errors.New("store: end of the part")

// DecodeSegmentIndex parses and verifies a whole blob made by
// BuildSegmentIndex (header and directory CRC, every queue's entry CRC).
func DecodeSegmentIndex(b []byte) (*SegmentIndex, error) {
	x, err := DecodeSegmentIndexDirectory(b)
	if err != nil {
		return nil, err
	}
	if want := int64(SegmentIndexHeaderSize) + x.dirLen + x.nEntries*cqEntrySize; int64(len(b)) != want {
		return nil, corruptf("segment index %d: %d bytes, want %d", x.Base, len(b), want)
	}
	for _, q := range x.Queues {
		if crc32.ChecksumIEEE(b[q.EntryPos:q.EntryPos+q.Count*cqEntrySize]) != q.crc {
			return nil, corruptf("segment index %d: entries of %s/%d: CRC mismatch", x.Base, q.Topic, q.QueueID)
		}
	}
	x.blob = b
	return x, nil
}

// DecodeSegmentIndexDirectory parses and verifies the header and directory
// of a blob; b may be just a prefix holding them
// (SegmentIndexHeaderSize + the directory size in header bytes 28..32).
// Entry cannot be used on the result.
func DecodeSegmentIndexDirectory(b []byte) (*SegmentIndex, error) {
	be := binary.BigEndian
	if len(b) < SegmentIndexHeaderSize || string(b[:8]) != segIndexMagic {
		return nil, corruptf("segment index: bad header")
	}
	x := &SegmentIndex{Base: int64(be.Uint64(b[8:])), Length: int64(be.Uint64(b[16:]))}
	nq, dirLen, nEntries := int(be.Uint32(b[24:])), int(be.Uint32(b[28:])), int64(be.Uint32(b[32:]))
	if len(b) < SegmentIndexHeaderSize+dirLen {
		return nil, corruptf("segment index %d: directory truncated", x.Base)
	}
	dir := b[SegmentIndexHeaderSize : SegmentIndexHeaderSize+dirLen]
	h := crc32.NewIEEE()
	h.Write(b[:36])
	h.Write(dir)
	if h.Sum32() != be.Uint32(b[36:]) {
		return nil, corruptf("segment index %d: header CRC mismatch", x.Base)
	}
	if x.Base < 0 || x.Length < 0 || nq > dirLen/segIndexDirFixed {
		return nil, corruptf("segment index %d: bad header fields", x.Base)
	}
	x.dirLen, x.nEntries = int64(dirLen), nEntries
	entriesAt := int64(SegmentIndexHeaderSize + dirLen)
	x.Queues = make([]SegmentIndexQueue, 0, nq)
	next := int64(0)
	p := dir
	for range nq {
		if len(p) < 1 {
			return nil, corruptf("segment index %d: directory truncated", x.Base)
		}
		tl := int(p[0])
		if tl == 0 || tl > MaxTopicLen || len(p) < segIndexDirFixed+tl {
			return nil, corruptf("segment index %d: bad directory entry", x.Base)
		}
		q := SegmentIndexQueue{
			Topic:       string(p[1 : 1+tl]),
			QueueID:     int32(be.Uint32(p[1+tl:])),
			FirstOffset: int64(be.Uint64(p[5+tl:])),
			Count:       int64(be.Uint32(p[13+tl:])),
		}
		first := int64(be.Uint32(p[17+tl:]))
		q.crc = be.Uint32(p[21+tl:])
		if q.FirstOffset < 0 || q.QueueID < 0 || first != next || first+q.Count > nEntries {
			return nil, corruptf("segment index %d: bad directory entry for %s/%d", x.Base, q.Topic, q.QueueID)
		}
		if n := len(x.Queues); n > 0 && compareQKey(qkey{x.Queues[n-1].Topic, x.Queues[n-1].QueueID}, qkey{q.Topic, q.QueueID}) >= 0 {
			return nil, corruptf("segment index %d: directory not sorted", x.Base)
		}
		next = first + q.Count
		q.EntryPos = entriesAt + first*cqEntrySize
		x.Queues = append(x.Queues, q)
		p = p[segIndexDirFixed+tl:]
	}
	if len(p) != 0 || next != nEntries {
		return nil, corruptf("segment index %d: directory and entry count disagree", x.Base)
	}
	return x, nil
}

// SegmentIndexFile is where WriteSegmentIndex builds a blob (an *os.File,
// or memory): it writes the entries, reads them back to add the tags codes
// and CRCs, then writes the header and directory. If it has a
// Truncate(size int64) error method (an *os.File does), it is first cut or
// extended to the blob's size.
type SegmentIndexFile interface {
	io.ReaderAt
	io.WriterAt
}

const (
	segIndexScanBuf = 1 << 20 // commitlog read buffer of a build (grown for a bigger record)
	// segIndexWriteBuf is the entry write buffer of a build, shared by its
	// queues (at least segIndexMinRun entries each).
	segIndexWriteBuf = 256 << 10
	segIndexMinRun   = 16
	segIndexChunk    = 3276 // entries read back per step (64 KiB)
)

// idxQueue is one queue with records in the segment, while its index is
// built. Its entries are those dispatchLocked would leave from the
// segment's records: the next offset appends, a higher one leaves blank
// entries before it, a lower one replaces everything from it on. So after
// any record the run ends just past that record's queue offset, and it
// starts at the lowest queue offset that emptied it.
type idxQueue struct {
	k            qkey
	first, end   int64 // after pass 1: the final run [first, end)
	cfirst, cend int64 // pass 2: the run so far
	started      bool  // pass 2 saw a record of the queue
	pos          int64 // byte position of entry first in the blob
	buf          []byte
	bufAt        int64   // queue offset of buf's first entry
	q            *cqueue // local consumequeue for tags codes (nil: none, or deleted)
	crc          uint32
	// ents are the queue's entries in log order when the layout's scan
	// collected them (indexPass1.collect), in chunks (appending never
	// copies more than the first one): the build places them without a
	// second scan of the segment.
	ents [][]planEntry
}

// planChunk is the entries of a whole chunk of idxQueue.ents (32 KiB).
const planChunk = 1024

// planEntry is one dispatched record as pass 2 places it.
type planEntry struct {
	qoff int64
	e    cqEntry
}

// span1 is pass 1's step for a record at queue offset qoff.
func (r *idxQueue) span1(qoff int64, seen bool) error {
	if !seen || qoff < r.first {
		r.first = qoff
	}
	// count = qoff+1-first must fit the u32 entry count (unsigned: no overflow).
	if uint64(qoff)-uint64(r.first) >= 1<<32-1 {
		return fmt.Errorf("queue %s/%d spans too many entries (offsets %d..%d)", r.k.topic, r.k.id, r.first, qoff)
	}
	r.end = qoff + 1
	return nil
}

// put places n entries at queue offset at (e: one entry, or nil for n
// blank ones), keeping those inside the final run. Later puts at the same
// offset replace earlier ones, as dispatch does; every offset of the final
// run is put after the last record that cut the run below it, so the file
// ends up holding exactly the final run.
func (r *idxQueue) put(w io.WriterAt, at, n int64, e []byte) error {
	lo, hi := max(at, r.first), min(at+n, r.end)
	if lo >= hi {
		return nil
	}
	if len(r.buf) > 0 && r.bufAt+int64(len(r.buf)/cqEntrySize) != lo {
		if err := r.flush(w); err != nil {
			return err
		}
	}
	for lo < hi {
		if len(r.buf) == cap(r.buf) {
			if err := r.flush(w); err != nil {
				return err
			}
		}
		if len(r.buf) == 0 {
			r.bufAt = lo
		}
		k := min(hi-lo, int64((cap(r.buf)-len(r.buf))/cqEntrySize))
		if e != nil {
			r.buf = append(r.buf, e...) // n == 1
		} else {
			n := len(r.buf)
			r.buf = r.buf[:n+int(k)*cqEntrySize] // within cap
			clear(r.buf[n:])
		}
		lo += k
	}
	return nil
}

func (r *idxQueue) flush(w io.WriterAt) error {
	if len(r.buf) == 0 {
		return nil
	}
	if _, err := w.WriteAt(r.buf, r.pos+(r.bufAt-r.first)*cqEntrySize); err != nil {
		return err
	}
	r.buf = r.buf[:0]
	return nil
}

// memIndexFile is a SegmentIndexFile in memory.
type memIndexFile struct{ b []byte }

// Truncate sizes the buffer at once (WriteSegmentIndex calls it).
func (m *memIndexFile) Truncate(size int64) error {
	if size > int64(len(m.b)) {
		b := make([]byte, size)
		copy(b, m.b)
		m.b = b
	}
	m.b = m.b[:size]
	return nil
}

func (m *memIndexFile) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.Truncate(end)
	}
	return copy(m.b[off:], p), nil
}

func (m *memIndexFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// BuildSegmentIndex returns the blob WriteSegmentIndex writes, in memory.
func (s *Store) BuildSegmentIndex(base int64) ([]byte, error) {
	var m memIndexFile
	n, err := s.WriteSegmentIndex(base, &m)
	if err != nil {
		return nil, err
	}
	return m.b[:n], nil
}

// BuildSegmentIndexPart is BuildSegmentIndex of the part [from, to) of
// the segment at base (WriteSegmentIndexPart).
func (s *Store) BuildSegmentIndexPart(base, from, to int64) ([]byte, error) {
	var m memIndexFile
	n, err := s.WriteSegmentIndexPart(base, from, to, &m)
	if err != nil {
		return nil, err
	}
	return m.b[:n], nil
}

// WriteSegmentIndex writes the segment index blob of the sealed local
// segment starting at base into f at [0, size): every consumequeue entry
// of its records, and every other known queue's next offset at its end
// (layout in doc.go). The blob is deterministic for a segment, given the
// same consumequeues (the tags code of an entry comes from the local
// consumequeue when it holds that entry, else from Options.TagsCode; a
// topic deleted in between drops out). ErrNotFound: no such local
// segment; a segment that is not sealed is refused.
//
// It scans the segment twice (to lay out each queue's run, then to write
// the entries at their places, checking every record's body CRC) and
// reads the entries back to add tags codes and CRCs, so its memory is a
// fixed buffer plus a few hundred bytes per queue, whatever the segment
// holds (after SegmentLayout, whose plan may hold the entries: see
// segplan.go). On the operating system's filesystem both scans read one
// read-only mapping of the segment file instead of a 1 MiB buffer
// (segmap.go), with the same checks; after SegmentLayout of the same
// segment, the first pass and the mapping are the ones its scan left
// (segplan.go), and the second pass reads the segment only when the plan
// holds no entries (and checks no CRC: the layout's scan did).
func (s *Store) WriteSegmentIndex(base int64, f SegmentIndexFile) (size int64, err error) {
	return s.WriteSegmentIndexPart(base, base, -1, f)
}

// WriteSegmentIndexPart is WriteSegmentIndex of the part [from, to) of
// the sealed local segment at base (to -1: its end): the blob of a
// segment starting at from and ending at to (its header says so), holding
// the entries of the records there only. from and to must be record
// boundaries in the segment: a broker that took over uploads only the
// parts of its local segments the manifest lacks (tier/upload,
// Segment.Skip), and its segment boundaries may differ from the old
// master's.
func (s *Store) WriteSegmentIndexPart(base, from, to int64, f SegmentIndexFile) (size int64, err error) {
	t := *s.segs.Load()
	i := slices.IndexFunc(t, func(sg *segment) bool { return sg.base == base })
	if i < 0 {
		return 0, fmt.Errorf("store: segment index %d: no such local segment: %w", base, ErrNotFound)
	}
	sg := t[i]
	if !sg.sealed.Load() {
		return 0, fmt.Errorf("store: segment index %d: segment is not sealed", base)
	}
	end := sg.end()
	if to < 0 {
		to = end
	}
	if from < base || to <= from || to > end {
		return 0, fmt.Errorf("store: segment index %d: part [%d, %d) is not inside [%d, %d)", base, from, to, base, end)
	}
	end = to
	var plan *indexPlan
	if from == base && to == sg.end() {
		plan = s.takeIndexPlan(sg)
	}
	var mp *sealedMapping
	if plan != nil {
		mp = plan.mp
	} else {
		mp = mapSealed(sg)
	}
	defer mp.close()
	var scanBuf []byte
	if mp == nil {
		scanBuf = make([]byte, segIndexScanBuf)
	}
	scan := func(checkCRC bool, fn func(m *recordMeta) error) error {
		valid, err := scanSealed(mp, sg, from, scanBuf, checkCRC, func(m *recordMeta) error {
			if m.physOffset >= end {
				return errPartEnd
			}
			if notDispatched(m.sysFlag) {
				return nil
			}
			return fn(m)
		})
		if errors.Is(err, errPartEnd) {
			err = nil
		}
		if err != nil {
			return fmt.Errorf("store: segment index %d: %w", base, err)
		}
		if valid != end {
			return corruptf("segment index %d: records end at %d, the segment at %d", base, valid, end)
		}
		return nil
	}

	// Pass 1: each queue's final run. The body CRCs are checked by pass 2.
	// SegmentLayout's scan of the whole segment may have done it already
	// (takeIndexPlan), with the same checks.
	var p1 *indexPass1
	if plan != nil {
		p1 = plan.p1
	} else {
		p1 = newIndexPass1()
		if err = scan(false, p1.add); err != nil {
			return 0, err
		}
	}
	runs, nRuns := p1.runs, p1.n
	var last *idxQueue

	// The directory: the runs, and the next offset of every queue without
	// a record here. The tags codes of a run come from its consumequeue.
	qs := s.allQueues()
	type dirEnt struct {
		k   qkey
		run *idxQueue
		nxt int64
	}
	dir := make([]dirEnt, 0, len(qs)+nRuns)
	for _, byID := range runs {
		for _, r := range byID {
			dir = append(dir, dirEnt{k: r.k, run: r})
		}
	}
	for _, q := range qs {
		k := qkey{q.topic, q.id}
		q.mu.RLock()
		deleted := q.deleted
		q.mu.RUnlock()
		if deleted {
			continue
		}
		if r := runs[k.topic][k.id]; r != nil {
			r.q = q
			continue
		}
		// No queue lock is held across the reads: the writer's dispatch
		// never waits for them.
		nxt, err := q.nextAt(end)
		if err != nil {
			return 0, fmt.Errorf("store: segment index %d: %w", base, err)
		}
		if nxt > 0 {
			dir = append(dir, dirEnt{k: k, nxt: nxt})
		}
	}
	slices.SortFunc(dir, func(a, b dirEnt) int { return compareQKey(a.k, b.k) })
	dirLen, nEntries := int64(0), int64(0)
	for _, d := range dir {
		dirLen += int64(segIndexDirFixed + len(d.k.topic))
		if d.run != nil {
			nEntries += d.run.end - d.run.first
		}
	}
	if uint64(nEntries) > 1<<32-1 || uint64(dirLen) > 1<<32-1 {
		return 0, fmt.Errorf("store: segment index %d: too large", base)
	}
	size = SegmentIndexHeaderSize + dirLen + nEntries*cqEntrySize
	if tf, ok := f.(interface{ Truncate(int64) error }); ok {
		if err := tf.Truncate(size); err != nil {
			return 0, fmt.Errorf("store: segment index %d: %w", base, err)
		}
	}
	per := max(segIndexWriteBuf/cqEntrySize/max(nRuns, 1), segIndexMinRun)
	slab := make([]byte, per*nRuns*cqEntrySize)
	idx := int64(0)
	for _, d := range dir {
		if r := d.run; r != nil {
			r.pos = SegmentIndexHeaderSize + dirLen + idx*cqEntrySize
			idx += r.end - r.first
			r.buf, slab = slab[:0:per*cqEntrySize], slab[per*cqEntrySize:]
		}
	}

	// Pass 2: every entry (and blank) at its place: from the entries the
	// layout's scan collected (it checked every record, body CRC
	// included, and that they end where the segment does), or from a
	// second scan of the segment.
	var e [cqEntrySize]byte
	place := func(r *idxQueue, qoff int64, ce cqEntry) error {
		switch {
		case !r.started || qoff < r.cfirst:
			r.started, r.cfirst = true, qoff
		case qoff > r.cend:
			if err := r.put(f, r.cend, qoff-r.cend, nil); err != nil {
				return err
			}
		}
		r.cend = qoff + 1
		putEntry(e[:], ce)
		return r.put(f, qoff, 1, e[:])
	}
	if plan != nil && plan.p1.collected {
		for _, d := range dir {
			r := d.run
			if r == nil {
				continue
			}
			for _, c := range r.ents {
				for _, pe := range c {
					if err := place(r, pe.qoff, pe.e); err != nil {
						return 0, err
					}
				}
			}
			r.ents = nil
		}
	} else {
		// A plan's layout scan checked every body CRC already.
		err = scan(plan == nil, func(m *recordMeta) error {
			r := last
			if r == nil || r.k.id != m.queueID || r.k.topic != string(m.topic) {
				if r = runs[string(m.topic)][m.queueID]; r == nil {
					return corruptf("queue %s/%d appeared between two scans", m.topic, m.queueID)
				}
				last = r
			}
			return place(r, m.queueOffset, cqEntry{phys: m.physOffset, size: m.size, tags: s.tagsCode(m)})
		})
		if err != nil {
			return 0, err
		}
	}
	for _, d := range dir {
		r := d.run
		if r == nil {
			continue
		}
		if err := r.flush(f); err != nil {
			return 0, fmt.Errorf("store: segment index %d: %w", base, err)
		}
		if !r.started || r.cfirst != r.first || r.cend != r.end {
			return 0, corruptf("segment index %d: queue %s/%d changed between two scans", base, r.k.topic, r.k.id)
		}
		r.buf = nil
	}
	scanBuf, slab = nil, nil
	mp.close()

	// Tags codes and CRCs, reading each run back in chunks.
	chunk := make([]byte, 2*segIndexChunk*cqEntrySize)
	chunk, local := chunk[:segIndexChunk*cqEntrySize], chunk[segIndexChunk*cqEntrySize:]
	for _, d := range dir {
		if d.run != nil {
			if err := d.run.finish(f, chunk, local); err != nil {
				return 0, fmt.Errorf("store: segment index %d: %w", base, err)
			}
		}
	}

	be := binary.BigEndian
	b := make([]byte, SegmentIndexHeaderSize, SegmentIndexHeaderSize+dirLen)
	copy(b, segIndexMagic)
	be.PutUint64(b[8:], uint64(from))
	be.PutUint64(b[16:], uint64(end-from))
	be.PutUint32(b[24:], uint32(len(dir)))
	be.PutUint32(b[28:], uint32(dirLen))
	be.PutUint32(b[32:], uint32(nEntries))
	idx = 0
	for _, d := range dir {
		b = append(b, byte(len(d.k.topic)))
		b = append(b, d.k.topic...)
		b = be.AppendUint32(b, uint32(d.k.id))
		first, n, crc := d.nxt, int64(0), crc32.ChecksumIEEE(nil)
		if r := d.run; r != nil {
			first, n, crc = r.first, r.end-r.first, r.crc
		}
		b = be.AppendUint64(b, uint64(first))
		b = be.AppendUint32(b, uint32(n))
		b = be.AppendUint32(b, uint32(idx))
		b = be.AppendUint32(b, crc)
		idx += n
	}
	h := crc32.NewIEEE()
	h.Write(b[:36])
	h.Write(b[SegmentIndexHeaderSize:])
	be.PutUint32(b[36:], h.Sum32())
	if _, err := f.WriteAt(b, 0); err != nil {
		return 0, fmt.Errorf("store: segment index %d: %w", base, err)
	}
	return size, nil
}

// finish reads r's entries back from f in chunks, replaces their tags
// codes by those of the same entries in the local consumequeue (where it
// holds them), writes back the chunks that changed, and sets r.crc.
func (r *idxQueue) finish(f SegmentIndexFile, chunk, local []byte) error {
	lo, hi := int64(0), int64(0) // entries the local consumequeue may hold
	if q := r.q; q != nil {
		q.mu.RLock()
		lo, hi = max(r.first, q.localLowLocked()), min(r.end, q.max)
		q.mu.RUnlock()
	}
	crc := uint32(0)
	for at := r.first; at < r.end; {
		n := min(r.end-at, int64(len(chunk)/cqEntrySize))
		b := chunk[:n*cqEntrySize]
		off := r.pos + (at-r.first)*cqEntrySize
		if k, err := f.ReadAt(b, off); k < len(b) {
			return fmt.Errorf("read back entries of %s/%d: %w", r.k.topic, r.k.id, cmp.Or(err, io.ErrUnexpectedEOF))
		}
		changed := false
		for from := max(at, lo); from < min(at+n, hi); {
			c := int(min(at+n, hi) - from)
			got, hole, next, err := r.q.readEntriesLocal(local[:c*cqEntrySize], from, c)
			if err != nil {
				return err
			}
			if hole {
				from = next
				continue
			}
			if got == 0 {
				hi = 0 // as the whole-run overlay: no more local entries
				break
			}
			for j := range int64(got) {
				le := getEntry(local[j*cqEntrySize:])
				p := b[(from+j-at)*cqEntrySize:]
				if e := getEntry(p); e.size > 0 && e.phys == le.phys && e.size == le.size && e.tags != le.tags {
					binary.BigEndian.PutUint64(p[12:], uint64(le.tags))
					changed = true
				}
			}
			from += int64(got)
		}
		if changed {
			if _, err := f.WriteAt(b, off); err != nil {
				return err
			}
		}
		crc = crc32.Update(crc, crc32.IEEETable, b)
		at += n
	}
	r.crc = crc
	return nil
}

// localLowLocked is the first queue index the local consumequeue holds
// (files below min included): entries below it are cold or gone.
func (q *cqueue) localLowLocked() int64 {
	lo := q.written
	if len(q.files) > 0 {
		lo = min(lo, q.files[0].start)
	}
	return max(lo, q.coldEnd.Load())
}

// nextAt is the queue's next offset at commitlog offset end: the first
// index whose next non-blank entry is at or above end. Entries below the
// local consumequeue (cold) are all below any local segment's end.
func (q *cqueue) nextAt(end int64) (int64, error) {
	q.mu.RLock()
	lo, hi := q.localLowLocked(), q.max
	jumpAt, jumpNext := q.jumpAt, q.jumpNext
	q.mu.RUnlock()
	next, err := q.searchPhys(lo, hi, end)
	if jumpNext > 0 && end >= jumpAt {
		// The log had reached the queue's jump by end: its next offset is
		// at least the jump's, records of it there or not.
		next = max(next, min(jumpNext, hi))
	}
	return next, err
}

// searchPhys returns the first index j in [lo, hi] such that the first
// non-blank entry at or after j has a commitlog offset >= phys (hi when
// there is none). Entries of a queue are in commitlog order.
func (q *cqueue) searchPhys(lo, hi, phys int64) (int64, error) {
	for lo < hi {
		m := lo + (hi-lo)/2
		j, e, ok, err := q.firstEntryLocal(m)
		if err != nil {
			return 0, err
		}
		if m < q.coldEnd.Load() {
			// Reclaimed meanwhile (the local scan skipped the files it
			// removed): entries below coldEnd lie below the local log,
			// below phys (the end of a local segment).
			lo = m + 1
			continue
		}
		if !ok || e.phys >= phys {
			hi = m
		} else {
			lo = j + 1
		}
	}
	return lo, nil
}
