package store

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
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

// idxRun collects one queue's entries while a segment is scanned.
type idxRun struct {
	first   int64
	entries []byte
}

func (r *idxRun) end() int64 { return r.first + int64(len(r.entries)/cqEntrySize) }

// add mirrors dispatchLocked: the next offset appends, a higher one leaves
// blank entries before it, a lower one replaces everything from it on.
func (r *idxRun) add(qoff int64, e cqEntry) {
	switch end := r.end(); {
	case len(r.entries) == 0:
		r.first = qoff
	case qoff > end:
		r.entries = append(r.entries, make([]byte, (qoff-end)*cqEntrySize)...)
	case qoff < r.first:
		r.first, r.entries = qoff, r.entries[:0]
	case qoff < end:
		r.entries = r.entries[:(qoff-r.first)*cqEntrySize]
	}
	var b [cqEntrySize]byte
	putEntry(b[:], e)
	r.entries = append(r.entries, b[:]...)
}

// BuildSegmentIndex returns the segment index blob of the sealed local
// segment starting at base: every consumequeue entry of its records, and
// every other known queue's next offset at its end (layout in doc.go). The
// blob is deterministic for a segment, given the same consumequeues (the
// tags code of an entry comes from the local consumequeue when it holds
// that entry, else from Options.TagsCode; a topic deleted in between drops
// out). ErrNotFound: no such local segment; a segment that is not sealed
// is refused.
func (s *Store) BuildSegmentIndex(base int64) ([]byte, error) {
	t := *s.segs.Load()
	i := slices.IndexFunc(t, func(sg *segment) bool { return sg.base == base })
	if i < 0 {
		return nil, fmt.Errorf("store: segment index %d: no such local segment: %w", base, ErrNotFound)
	}
	sg := t[i]
	if !sg.sealed.Load() {
		return nil, fmt.Errorf("store: segment index %d: segment is not sealed", base)
	}
	end := sg.end()
	runs := map[qkey]*idxRun{}
	var lastK qkey
	var last *idxRun
	valid, err := s.scanSegments(segTable{sg}, base, func(m *recordMeta) error {
		if notDispatched(m.sysFlag) {
			return nil
		}
		if last == nil || lastK.id != m.queueID || lastK.topic != string(m.topic) {
			lastK = qkey{string(m.topic), m.queueID}
			if last = runs[lastK]; last == nil {
				last = &idxRun{}
				runs[lastK] = last
			}
		}
		last.add(m.queueOffset, cqEntry{phys: m.physOffset, size: m.size, tags: s.tagsCode(m)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: segment index %d: %w", base, err)
	}
	if valid != end {
		return nil, corruptf("segment index %d: records end at %d, the segment at %d", base, valid, end)
	}
	// Tags codes as the consumequeue has them (Put takes Message.TagsCode as
	// given); and the next offset of every queue without a record here.
	qs := s.allQueues()
	type dirEnt struct {
		k   qkey
		run *idxRun
		nxt int64
	}
	dir := make([]dirEnt, 0, len(qs)+len(runs))
	for k, r := range runs {
		dir = append(dir, dirEnt{k: k, run: r})
	}
	for _, q := range qs {
		k := qkey{q.topic, q.id}
		q.mu.RLock()
		deleted := q.deleted
		q.mu.RUnlock()
		if deleted {
			continue
		}
		// No queue lock is held across the reads: the writer's dispatch
		// never waits for them.
		if r := runs[k]; r != nil {
			err = q.overlayTags(r)
		} else {
			var nxt int64
			if nxt, err = q.nextAt(end); err == nil && nxt > 0 {
				dir = append(dir, dirEnt{k: k, nxt: nxt})
			}
		}
		if err != nil {
			return nil, fmt.Errorf("store: segment index %d: %w", base, err)
		}
	}
	slices.SortFunc(dir, func(a, b dirEnt) int { return compareQKey(a.k, b.k) })

	be := binary.BigEndian
	dirLen, nEntries := 0, 0
	for _, d := range dir {
		dirLen += segIndexDirFixed + len(d.k.topic)
		if d.run != nil {
			nEntries += len(d.run.entries) / cqEntrySize
		}
	}
	if uint64(nEntries) > 1<<32-1 || uint64(dirLen) > 1<<32-1 {
		return nil, fmt.Errorf("store: segment index %d: too large", base)
	}
	b := make([]byte, SegmentIndexHeaderSize, SegmentIndexHeaderSize+dirLen+nEntries*cqEntrySize)
	copy(b, segIndexMagic)
	be.PutUint64(b[8:], uint64(base))
	be.PutUint64(b[16:], uint64(end-base))
	be.PutUint32(b[24:], uint32(len(dir)))
	be.PutUint32(b[28:], uint32(dirLen))
	be.PutUint32(b[32:], uint32(nEntries))
	idx := 0
	for _, d := range dir {
		b = append(b, byte(len(d.k.topic)))
		b = append(b, d.k.topic...)
		b = be.AppendUint32(b, uint32(d.k.id))
		var ents []byte
		first := d.nxt
		if d.run != nil {
			first, ents = d.run.first, d.run.entries
		}
		b = be.AppendUint64(b, uint64(first))
		b = be.AppendUint32(b, uint32(len(ents)/cqEntrySize))
		b = be.AppendUint32(b, uint32(idx))
		b = be.AppendUint32(b, crc32.ChecksumIEEE(ents))
		idx += len(ents) / cqEntrySize
	}
	h := crc32.NewIEEE()
	h.Write(b[:36])
	h.Write(b[SegmentIndexHeaderSize:])
	be.PutUint32(b[36:], h.Sum32())
	for _, d := range dir {
		if d.run != nil {
			b = append(b, d.run.entries...)
		}
	}
	return b, nil
}

// overlayTags replaces the tags codes of r's entries by those of the
// same entries in the local consumequeue (where it holds them).
func (q *cqueue) overlayTags(r *idxRun) error {
	q.mu.RLock()
	lo := max(r.first, q.localLowLocked())
	hi := min(r.end(), q.max)
	q.mu.RUnlock()
	if lo >= hi {
		return nil
	}
	buf := make([]byte, (hi-lo)*cqEntrySize)
	for at := lo; at < hi; {
		n, hole, next, err := q.readEntriesLocal(buf[(at-lo)*cqEntrySize:], at, int(hi-at))
		if err != nil {
			return err
		}
		if hole {
			at = next
			continue
		}
		if n == 0 {
			break
		}
		for k := range int64(n) {
			i := at + k
			local := getEntry(buf[(i-lo)*cqEntrySize:])
			p := r.entries[(i-r.first)*cqEntrySize:]
			if e := getEntry(p); e.size > 0 && e.phys == local.phys && e.size == local.size {
				binary.BigEndian.PutUint64(p[12:], uint64(local.tags))
			}
		}
		at += int64(n)
	}
	return nil
}

// localLowLocked is the first queue index the local consumequeue holds
// (files below min included): entries below it are cold or gone.
func (q *cqueue) localLowLocked() int64 {
	lo := q.written
	if len(q.files) > 0 {
		lo = min(lo, q.files[0].start)
	}
	return max(lo, q.coldEnd)
}

// nextAt is the queue's next offset at commitlog offset end: the first
// index whose next non-blank entry is at or above end. Entries below the
// local consumequeue (cold) are all below any local segment's end.
func (q *cqueue) nextAt(end int64) (int64, error) {
	q.mu.RLock()
	lo, hi := q.localLowLocked(), q.max
	q.mu.RUnlock()
	return q.searchPhys(lo, hi, end)
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
		if !ok || e.phys >= phys {
			hi = m
		} else {
			lo = j + 1
		}
	}
	return lo, nil
}
