package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

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

// oldBuildSegmentIndex (the oracle: BuildSegmentIndex before it was built
// in two passes, in bounded memory) returns the segment index blob of the sealed local
// segment starting at base: every consumequeue entry of its records, and
// every other known queue's next offset at its end (layout in doc.go). The
// blob is deterministic for a segment, given the same consumequeues (the
// tags code of an entry comes from the local consumequeue when it holds
// that entry, else from Options.TagsCode; a topic deleted in between drops
// out). ErrNotFound: no such local segment; a segment that is not sealed
// is refused.
func (s *Store) oldBuildSegmentIndex(base int64) ([]byte, error) {
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
			err = q.oldOverlayTags(r)
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

// oldOverlayTags replaces the tags codes of r's entries by those of the
// same entries in the local consumequeue (where it holds them).
func (q *cqueue) oldOverlayTags(r *idxRun) error {
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
