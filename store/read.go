package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
)

var entryBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024*cqEntrySize); return &b }}

// Get reads records of one queue from req.Offset on, with the statuses and
// nextBeginOffset rules of docs/rocketmq-protocol.md §4.3. Records are byte
// slices of the log, one whole V1 record each.
func (s *Store) Get(ctx context.Context, req GetRequest) (GetResult, error) {
	if err := ctx.Err(); err != nil {
		return GetResult{}, err
	}
	q := s.queue(req.Topic, req.QueueID)
	if q == nil {
		return GetResult{Status: NoMessageInQueue}, nil
	}
	maxMsgs, maxBytes := req.MaxMsgs, req.MaxBytes
	if maxMsgs <= 0 {
		maxMsgs = DefaultGetMaxMsgs
	}
	if maxBytes <= 0 {
		maxBytes = DefaultGetMaxBytes
	}
	// Entries scanned per pull: max(16000 bytes of entries, maxMsgs).
	scan := max(16000/cqEntrySize, maxMsgs)

	bp := entryBufPool.Get().(*[]byte)
	defer entryBufPool.Put(bp)
	q.mu.RLock()
	mn, mx := q.min, q.max
	res := GetResult{MinOffset: mn, MaxOffset: mx}
	off := req.Offset
	switch {
	case mx == 0:
		q.mu.RUnlock()
		res.Status, res.NextBeginOffset = NoMessageInQueue, 0
		return res, nil
	case off < mn:
		q.mu.RUnlock()
		res.Status, res.NextBeginOffset = OffsetTooSmall, mn
		return res, nil
	case off == mx:
		q.mu.RUnlock()
		res.Status, res.NextBeginOffset = OffsetOverflowOne, off
		return res, nil
	case off > mx:
		q.mu.RUnlock()
		res.Status, res.NextBeginOffset = OffsetOverflowBadly, mx
		return res, nil
	}
	n := int(min(int64(scan), mx-off))
	if cap(*bp) < n*cqEntrySize {
		*bp = make([]byte, n*cqEntrySize)
	}
	ents := (*bp)[:n*cqEntrySize]
	got, hole, next, err := q.readEntriesLocked(ents, off, n)
	q.mu.RUnlock()
	if err != nil {
		return GetResult{}, err
	}
	if hole {
		res.Status, res.NextBeginOffset = OffsetFoundNull, next
		return res, nil
	}

	minPhys := s.MinPhysOffset()
	type span struct {
		phys int64
		size int32
	}
	var spansArr [64]span
	spans := spansArr[:0]
	scanned, removing, total := 0, 0, 0
	for ; scanned < got; scanned++ {
		e := getEntry(ents[scanned*cqEntrySize:])
		if e.size == 0 {
			continue // blank entry
		}
		if e.phys < minPhys {
			removing++
			continue
		}
		if req.Filter != nil && !req.Filter(e.tags) {
			continue
		}
		if len(spans) > 0 && total+int(e.size) > maxBytes {
			break
		}
		spans = append(spans, span{e.phys, e.size})
		total += int(e.size)
		if len(spans) == maxMsgs {
			scanned++
			break
		}
	}
	res.NextBeginOffset = off + int64(scanned)
	if len(spans) == 0 {
		res.Status = NoMatchedMessage
		if removing > 0 && removing == scanned {
			res.Status = MessageWasRemoving
		}
		return res, nil
	}
	// One buffer for all records; adjacent records are read with one pread.
	data := make([]byte, total)
	res.Records = make([][]byte, len(spans))
	p := 0
	for i := 0; i < len(spans); {
		j, runEnd := i, spans[i].phys
		for j < len(spans) && spans[j].phys == runEnd {
			runEnd += int64(spans[j].size)
			j++
		}
		runLen := int(runEnd - spans[i].phys)
		if err := s.readSpan(data[p:p+runLen], spans[i].phys); err != nil {
			return GetResult{}, err
		}
		for k := i; k < j; k++ {
			sz := int(spans[k].size)
			res.Records[k] = data[p : p+sz : p+sz]
			p += sz
		}
		i = j
	}
	res.Status, res.Bytes = Found, total
	return res, nil
}

// readSpan reads log bytes that may cross a segment boundary (adjacent
// records in two segments).
func (s *Store) readSpan(p []byte, off int64) error {
	for len(p) > 0 {
		t := *s.segs.Load()
		sg := t.find(off)
		if sg == nil {
			return fmt.Errorf("store: read at %d: %w", off, ErrNotFound)
		}
		n := min(int64(len(p)), sg.end()-off)
		if err := s.readAt(p[:n], off); err != nil {
			return err
		}
		p, off = p[n:], off+n
	}
	return nil
}

// ReadRecord returns the whole record at a commitlog offset (a message id).
// An offset outside the local log gives ErrNotFound; an offset that is not
// the start of a valid record gives ErrCorrupt.
func (s *Store) ReadRecord(physOffset int64) ([]byte, error) {
	if physOffset < s.MinPhysOffset() || physOffset+RecordOverhead > s.writePos.Load() {
		return nil, fmt.Errorf("store: no record at offset %d: %w", physOffset, ErrNotFound)
	}
	t := *s.segs.Load()
	sg := t.find(physOffset)
	if sg == nil {
		return nil, fmt.Errorf("store: no record at offset %d: %w", physOffset, ErrNotFound)
	}
	avail := sg.end() - physOffset
	buf := make([]byte, min(avail, 4096))
	if err := s.readAt(buf, physOffset); err != nil {
		return nil, err
	}
	size := int64(int32(binary.BigEndian.Uint32(buf)))
	if binary.BigEndian.Uint32(buf[4:]) != MagicV1 || size < RecordOverhead || size > avail {
		return nil, corruptf("no record starts at offset %d", physOffset)
	}
	if size > int64(len(buf)) {
		nb := make([]byte, size)
		copy(nb, buf)
		if err := s.readAt(nb[len(buf):], physOffset+int64(len(buf))); err != nil {
			return nil, err
		}
		buf = nb
	}
	buf = buf[:size:size]
	m, err := parseMeta(buf, false)
	if err != nil {
		return nil, err
	}
	if m.physOffset != physOffset {
		return nil, corruptf("record at offset %d says PHYSICALOFFSET %d", physOffset, m.physOffset)
	}
	return buf, nil
}

// storeTimeAt is the STORETIMESTAMP of the record an entry points at.
func (s *Store) storeTimeAt(e cqEntry) (int64, error) {
	var b [storeTSEnd]byte
	n := min(int(e.size), len(b))
	if err := s.readAt(b[:n], e.phys); err != nil {
		return 0, err
	}
	return storeTimestampOf(b[:n]), nil
}

// EarliestStoreTime is the store time of the first message still in the
// queue; ErrNotFound for an empty or unknown queue.
func (s *Store) EarliestStoreTime(topic string, queueID int32) (int64, error) {
	q := s.queue(topic, queueID)
	if q == nil {
		return -1, fmt.Errorf("store: %s/%d: %w", topic, queueID, ErrNotFound)
	}
	q.mu.RLock()
	var e cqEntry
	ok := false
	var err error
	for i := q.min; i < q.max && !ok; i++ {
		e, ok, err = q.entryLocked(i)
		if err != nil || (ok && e.size > 0) {
			break
		}
		ok = false
	}
	q.mu.RUnlock()
	if err != nil {
		return -1, err
	}
	if !ok {
		return -1, fmt.Errorf("store: %s/%d is empty: %w", topic, queueID, ErrNotFound)
	}
	return s.storeTimeAt(e)
}

// OffsetByTime finds the queue offset of the message stored at tsMillis
// (docs/rocketmq-protocol.md §4.6): the first message with exactly that store
// time if there is one, else the nearer of its neighbours (a tie goes to the
// earlier one). An empty queue gives 0.
func (s *Store) OffsetByTime(topic string, queueID int32, tsMillis int64) int64 {
	q := s.queue(topic, queueID)
	if q == nil {
		return 0
	}
	mn, mx := q.bounds()
	if mn >= mx {
		return 0
	}
	timeAt := func(i int64) (int64, bool) {
		q.mu.RLock()
		e, ok, err := q.entryLocked(i)
		q.mu.RUnlock()
		if err != nil || !ok || e.size == 0 {
			return 0, false
		}
		t, err := s.storeTimeAt(e)
		return t, err == nil
	}
	// Lower bound: first index whose store time is >= tsMillis.
	lo, hi := mn, mx
	for lo < hi {
		m := lo + (hi-lo)/2
		t, ok := timeAt(m)
		if !ok {
			lo = m + 1 // blank or unreadable: treat as older
			continue
		}
		if t < tsMillis {
			lo = m + 1
		} else {
			hi = m
		}
	}
	right, rok := int64(0), false
	if lo < mx {
		var t int64
		if t, rok = timeAt(lo); rok {
			if t == tsMillis {
				return lo
			}
			right = t
		}
	}
	left, lok := int64(0), false
	if lo > mn {
		left, lok = timeAt(lo - 1)
	}
	switch {
	case lok && rok:
		if tsMillis-left <= right-tsMillis {
			return lo - 1
		}
		return lo
	case lok:
		return lo - 1
	case rok:
		return lo
	}
	return mn
}
