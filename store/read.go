package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

var entryBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024*cqEntrySize); return &b }}

// MaxGetMsgs caps GetRequest.MaxMsgs: one Get returns at most this many
// records, whatever a pull asks for (clients send at most 1024, their
// largest pull batch).
const MaxGetMsgs = 1024

// getScanMin is the fewest consumequeue entries one Get scans when its
// filter matches nothing: RocketMQ's 16,000 bytes of consumequeue per
// pull. A Get scans max(getScanMin, MaxMsgs) entries at most, so a pull
// with a filter that matches nothing costs a bounded read and still moves
// NextBeginOffset past everything it scanned.
const getScanMin = 16000 / cqEntrySize

// Get reads records of one queue from req.Offset on, with the statuses and
// nextBeginOffset rules of docs/rocketmq-protocol.md §4.3. Records are byte
// slices of the log, one whole V1 record each. It returns at most
// MaxGetMsgs records and scans at most max(800, MaxMsgs) entries.
func (s *Store) Get(ctx context.Context, req GetRequest) (GetResult, error) {
	if err := ctx.Err(); err != nil {
		return GetResult{}, err
	}
	if req.Match != nil {
		return s.getMatching(ctx, req) // getmatch.go
	}
	q := s.queue(req.Topic, req.QueueID)
	if q == nil {
		return GetResult{Status: NoMessageInQueue}, nil
	}
	maxMsgs, maxBytes := req.MaxMsgs, req.MaxBytes
	if maxMsgs <= 0 {
		maxMsgs = DefaultGetMaxMsgs
	}
	maxMsgs = min(maxMsgs, MaxGetMsgs)
	if maxBytes <= 0 {
		maxBytes = DefaultGetMaxBytes
	}
	// Entries scanned per pull: max(16000 bytes of entries, maxMsgs).
	scan := max(getScanMin, maxMsgs)

	bp := entryBufPool.Get().(*[]byte)
	defer entryBufPool.Put(bp)
	var res GetResult
	var ents []byte
	var got int
	var arr [4]fileRead
	// The queue lock is held only to plan the read: the consumequeue preads
	// run without it, so a slow read never holds up the writer's dispatch.
	for try := 0; ; try++ {
		q.mu.RLock()
		mn, mx := q.min, q.max
		res = GetResult{MinOffset: mn, MaxOffset: mx}
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
			if req.MaxPhys > 0 {
				end, err := s.visibleEnd(ctx, q, mn, mx, req.MaxPhys)
				if err != nil {
					return GetResult{}, err
				}
				res.NextBeginOffset, res.MaxOffset = end, end
			}
			return res, nil
		}
		if off < q.coldEnd.Load() {
			q.mu.RUnlock()
			return s.getCold(ctx, q, req, res, scan, maxMsgs, maxBytes)
		}
		n := int(min(int64(scan), mx-off))
		if cap(*bp) < n*cqEntrySize {
			*bp = make([]byte, n*cqEntrySize)
		}
		ents = (*bp)[:n*cqEntrySize]
		reads, c, hole, next, gen := q.planLocked(arr[:0], ents, off, n)
		q.mu.RUnlock()
		retry, err := q.runPlan(reads, ents, gen)
		if err != nil {
			return GetResult{}, err
		}
		if !retry {
			if hole {
				res.Status, res.NextBeginOffset = OffsetFoundNull, next
				return res, nil
			}
			got = c
			break
		}
		if try >= maxReadTries {
			return GetResult{}, fmt.Errorf("store: consumequeue %s/%d kept changing under a read", q.topic, q.id)
		}
	}

	minPhys := s.MinPhysOffset()
	var spansArr [64]span
	spans := spansArr[:0]
	scanned, removing, total := 0, 0, 0
	heldBack := int64(0)
	for ; scanned < got; scanned++ {
		e := getEntry(ents[scanned*cqEntrySize:])
		if e.size == 0 {
			continue // blank entry
		}
		if req.MaxPhys > 0 && e.phys+int64(e.size) > req.MaxPhys {
			heldBack = e.phys + int64(e.size)
			break
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
	return s.finishGet(ctx, q, req, res, scanned, removing, spans, total, heldBack)
}

type span struct {
	phys int64
	size int32
}

// finishGet completes a Get (local or cold) that scanned entries from
// req.Offset on, removing of them below the retention floor, and picked
// spans (total bytes), and stopped before a record req.MaxPhys hides that
// ends at heldBack (0: none): NextBeginOffset is past the scanned entries,
// and res gets the records the spans name or, with no span, says why there
// is none.
func (s *Store) finishGet(ctx context.Context, q *cqueue, req GetRequest, res GetResult, scanned, removing int, spans []span, total int, heldBack int64) (GetResult, error) {
	res.NextBeginOffset = req.Offset + int64(scanned)
	if req.MaxPhys > 0 {
		switch {
		case heldBack > 0:
			res.MaxOffset, res.HeldBack = res.NextBeginOffset, heldBack
		case res.NextBeginOffset < res.MaxOffset: // the scan ended before the queue: where do hidden records start?
			end, err := s.visibleEnd(ctx, q, res.NextBeginOffset, res.MaxOffset, req.MaxPhys)
			if err != nil {
				return GetResult{}, err
			}
			res.MaxOffset = end
		}
	}
	if len(spans) == 0 && heldBack > 0 {
		res.Status = OffsetOverflowOne // the end of the queue this reader sees
		return res, nil
	}
	if len(spans) == 0 {
		res.Status = NoMatchedMessage
		if removing > 0 && removing == scanned {
			res.Status = MessageWasRemoving
		}
		return res, nil
	}
	recs, chunks, err := s.readRecords(ctx, req, spans, total) // records.go
	if err != nil {
		return GetResult{}, err
	}
	res.Records, res.Chunks = recs, chunks
	res.Status, res.Bytes = Found, total
	return res, nil
}

// getCold is Get for an offset below the local consumequeue of a queue
// (restored, or reclaimed): entries come from the cold index a block at a
// time, then from the local consumequeue, with the same limits as a local
// Get, so the result is the one the original store gave. Each read goes
// cold or local by the queue's coldEnd as it is then (a reclaim may raise
// it meanwhile).
func (s *Store) getCold(ctx context.Context, q *cqueue, req GetRequest, res GetResult, scan, maxMsgs, maxBytes int) (GetResult, error) {
	off := req.Offset
	n := int(min(int64(scan), res.MaxOffset-off))
	bp := entryBufPool.Get().(*[]byte)
	defer entryBufPool.Put(bp)
	if cap(*bp) < n*cqEntrySize {
		*bp = make([]byte, n*cqEntrySize)
	}
	ents := (*bp)[:n*cqEntrySize]
	minPhys := s.MinPhysOffset()
	var spansArr [64]span
	spans := spansArr[:0]
	scanned, removing, total := 0, 0, 0
	heldBack := int64(0)
	done := false
	feed := func(got int) {
		for i := 0; i < got; i++ {
			e := getEntry(ents[i*cqEntrySize:])
			if e.size == 0 {
				scanned++
				continue
			}
			if req.MaxPhys > 0 && e.phys+int64(e.size) > req.MaxPhys {
				heldBack, done = e.phys+int64(e.size), true
				return
			}
			if e.phys < minPhys {
				removing++
				scanned++
				continue
			}
			if req.Filter != nil && !req.Filter(e.tags) {
				scanned++
				continue
			}
			if len(spans) > 0 && total+int(e.size) > maxBytes {
				done = true
				return
			}
			spans = append(spans, span{e.phys, e.size})
			total += int(e.size)
			scanned++
			if len(spans) == maxMsgs {
				done = true
				return
			}
		}
	}
	src := entrySource{cold: s, ctx: ctx}
	for !done && scanned < n {
		// Cold below coldEnd, then on into the local consumequeue.
		got, hole, next, err := q.readEntries(src, ents, off+int64(scanned), n-scanned)
		if err != nil {
			return GetResult{}, err
		}
		if hole && scanned == 0 {
			res.Status, res.NextBeginOffset = OffsetFoundNull, next
			return res, nil
		}
		if hole || got == 0 {
			break
		}
		feed(got)
	}
	return s.finishGet(ctx, q, req, res, scanned, removing, spans, total, heldBack)
}

// VisibleMaxQueueOffset is the end of a queue (MaxQueueOffset) as a Get
// bounded by GetRequest.MaxPhys sees it: the queue offset of the first
// record that ends past maxPhys (no bound when maxPhys ≤ 0).
func (s *Store) VisibleMaxQueueOffset(ctx context.Context, topic string, queueID int32, maxPhys int64) (int64, error) {
	q := s.queue(topic, queueID)
	if q == nil {
		return 0, nil
	}
	mn, mx := q.bounds()
	if maxPhys <= 0 {
		return mx, nil
	}
	return s.visibleEnd(ctx, q, mn, mx, maxPhys)
}

// visibleEnd is the first queue offset in [lo, hi) whose record ends past
// maxPhys (hi when none), where the entry before lo is known to be visible
// (or lo is the queue's start). A queue's records are in log order, so the
// hidden ones are a suffix, and a short one (what no slave holds yet): it
// gallops back from hi−1, then bisects. A blank entry or a hole is judged
// by the first record after it (hidden when that one is), so the hidden
// ones stay a suffix; a hole at the end counts as visible only when every
// record before it is.
func (s *Store) visibleEnd(ctx context.Context, q *cqueue, lo, hi, maxPhys int64) (int64, error) {
	// A hole at the end (a promoted copy's jump, no record after it yet)
	// is visible only once every record before it is: the search runs over
	// the records, and gives hi back when all of them are visible.
	if end, err := s.recordsEnd(ctx, q, lo, hi); err != nil || end < hi {
		if err != nil || end <= lo {
			return hi, err
		}
		v, err := s.visibleRecordsEnd(ctx, q, lo, end, maxPhys)
		if err == nil && v == end {
			v = hi
		}
		return v, err
	}
	return s.visibleRecordsEnd(ctx, q, lo, hi, maxPhys)
}

// recordsEnd is the first index in [lo, hi] with no record at or after it
// below hi: hi when the entry at hi−1 is a record, else one past the last
// record (lo when there is none). It gallops back from hi−1 (the records
// of a queue with a long cold history lie far below, the hole at its end
// is local), then bisects.
func (s *Store) recordsEnd(ctx context.Context, q *cqueue, lo, hi int64) (int64, error) {
	if lo >= hi {
		return hi, nil
	}
	if e, ok, err := s.entryAt(ctx, q, hi-1); err != nil || ok && e.size > 0 {
		return hi, err
	}
	top := hi - 1 // no record from here on
	for step := int64(1); top-step >= lo; step *= 2 {
		j, _, ok, err := s.firstEntryFrom(ctx, q, top-step)
		if err != nil {
			return 0, err
		}
		if ok && j < hi {
			lo = j + 1
			break
		}
		top -= step
	}
	hi = top
	for lo < hi {
		m := lo + (hi-lo)/2
		j, _, ok, err := s.firstEntryFrom(ctx, q, m)
		if err != nil {
			return 0, err
		}
		if ok && j < hi {
			lo = j + 1
		} else {
			hi = m
		}
	}
	return lo, nil
}

// visibleRecordsEnd is visibleEnd over [lo, hi), where the entry at hi−1
// is a record (or the range is empty).
func (s *Store) visibleRecordsEnd(ctx context.Context, q *cqueue, lo, hi, maxPhys int64) (int64, error) {
	hidden := func(i int64) (bool, error) {
		e, ok, err := s.entryAt(ctx, q, i)
		if err == nil && (!ok || e.size == 0) {
			// A blank or a hole is judged by the record after it (a hole in
			// the middle of a queue: a promoted copy's jump); none after it:
			// nothing hidden.
			var j int64
			j, e, ok, err = s.firstEntryFrom(ctx, q, i)
			if err != nil || !ok || j >= hi {
				return false, err
			}
		}
		return e.phys+int64(e.size) > maxPhys, err
	}
	if lo >= hi {
		return hi, nil
	}
	top := hi - 1 // hidden from here on, once checked
	if h, err := hidden(top); err != nil || !h {
		return hi, err
	}
	bottom := lo - 1 // visible (or before the range)
	for step := int64(1); top-step > bottom; step *= 2 {
		h, err := hidden(top - step)
		if err != nil {
			return 0, err
		}
		if !h {
			bottom = top - step
			break
		}
		top -= step
	}
	for top-bottom > 1 {
		mid := bottom + (top-bottom)/2
		h, err := hidden(mid)
		if err != nil {
			return 0, err
		}
		if h {
			top = mid
		} else {
			bottom = mid
		}
	}
	return top, nil
}

// ReadRecord is ReadRecordContext without a deadline.
func (s *Store) ReadRecord(physOffset int64) ([]byte, error) {
	return s.ReadRecordContext(context.Background(), physOffset)
}

// ReadRecordContext returns the whole record at a commitlog offset (a
// message id), from the local log or, below it, from Options.Cold. An
// offset below MinPhysOffset or at/after the end gives ErrNotFound; an
// offset that is not the start of a valid record gives ErrCorrupt; a cold
// tier failure gives ErrColdRead.
func (s *Store) ReadRecordContext(ctx context.Context, physOffset int64) ([]byte, error) {
	end := s.writePos.Load()
	if physOffset < s.MinPhysOffset() || physOffset+RecordOverhead > end {
		return nil, fmt.Errorf("store: no record at offset %d: %w", physOffset, ErrNotFound)
	}
	// A record never spans segments: bound it by its segment (by the first
	// local segment for a cold offset).
	limit := end
	t := *s.segs.Load()
	switch {
	case len(t) > 0 && physOffset < t[0].base:
		limit = t[0].base
	case len(t) > 0:
		sg := t.find(physOffset)
		if sg == nil {
			return nil, fmt.Errorf("store: no record at offset %d: %w", physOffset, ErrNotFound)
		}
		limit = sg.end()
	}
	avail := limit - physOffset
	if avail < RecordOverhead {
		return nil, corruptf("no record starts at offset %d", physOffset)
	}
	buf := make([]byte, min(avail, 4096))
	if err := s.readLog(ctx, buf, physOffset); err != nil {
		// The tier may end, or have a gap, before the record's end plus
		// 4 KiB (a store restored on an empty disk starts its log past
		// the tier): read the size first.
		cold := len(t) == 0 || physOffset < t[0].base
		if !cold || len(buf) <= 8 || ctx.Err() != nil || !(errors.Is(err, ErrColdRead) || errors.Is(err, ErrNotFound)) {
			return nil, err
		}
		buf = buf[:8]
		if err := s.readLog(ctx, buf, physOffset); err != nil {
			return nil, err
		}
	}
	size := int64(int32(binary.BigEndian.Uint32(buf)))
	if binary.BigEndian.Uint32(buf[4:]) != MagicV1 || size < RecordOverhead || size > avail {
		return nil, corruptf("no record starts at offset %d", physOffset)
	}
	if size > int64(len(buf)) {
		nb := make([]byte, size)
		copy(nb, buf)
		if err := s.readLog(ctx, nb[len(buf):], physOffset+int64(len(buf))); err != nil {
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
func (s *Store) storeTimeAt(ctx context.Context, e cqEntry) (int64, error) {
	var b [storeTSEnd]byte
	if e.size < RecordOverhead {
		return 0, corruptf("consumequeue entry of %d bytes at commitlog offset %d", e.size, e.phys)
	}
	n := min(int(e.size), len(b))
	if err := s.readLog(ctx, b[:n], e.phys); err != nil {
		return 0, err
	}
	if binary.BigEndian.Uint32(b[offMagic:]) != MagicV1 || int64(binary.BigEndian.Uint64(b[offPhysOffset:])) != e.phys {
		return 0, corruptf("no record at commitlog offset %d", e.phys)
	}
	return storeTimestampOf(b[:n]), nil
}

// EarliestStoreTime is EarliestStoreTimeContext without a deadline.
func (s *Store) EarliestStoreTime(topic string, queueID int32) (int64, error) {
	return s.EarliestStoreTimeContext(context.Background(), topic, queueID)
}

// EarliestStoreTimeContext is the store time of the first message still in
// the queue (at MinQueueOffset; read cold when it is below the local log);
// ErrNotFound for an empty or unknown queue.
func (s *Store) EarliestStoreTimeContext(ctx context.Context, topic string, queueID int32) (int64, error) {
	q := s.queue(topic, queueID)
	if q == nil {
		return -1, fmt.Errorf("store: %s/%d: %w", topic, queueID, ErrNotFound)
	}
	mn, _ := q.bounds()
	_, e, ok, err := s.firstEntryFrom(ctx, q, mn)
	if err != nil {
		return -1, err
	}
	if !ok {
		return -1, fmt.Errorf("store: %s/%d is empty: %w", topic, queueID, ErrNotFound)
	}
	ts, err := s.storeTimeAt(ctx, e)
	if err != nil {
		return -1, err
	}
	return ts, nil
}

// OffsetByTime is OffsetByTimeContext without a deadline; on an error it
// returns the queue's min offset.
func (s *Store) OffsetByTime(topic string, queueID int32, tsMillis int64) int64 {
	off, err := s.OffsetByTimeContext(context.Background(), topic, queueID, tsMillis)
	if err != nil {
		s.log.Warn("store: offset by time", "topic", topic, "queue", queueID, "err", err)
		return s.MinQueueOffset(topic, queueID)
	}
	return off
}

// OffsetByTimeContext finds the queue offset of the message stored at
// tsMillis (docs/rocketmq-protocol.md §4.6): the first message with exactly
// that store time if there is one, else the nearer of its neighbours (a tie
// goes to the earlier one). An empty queue gives 0. It searches
// [MinQueueOffset, MaxQueueOffset), reading store times cold below the local
// log; a read error (ErrColdRead, ErrCorrupt) is returned.
func (s *Store) OffsetByTimeContext(ctx context.Context, topic string, queueID int32, tsMillis int64) (int64, error) {
	q := s.queue(topic, queueID)
	if q == nil {
		return 0, nil
	}
	mn, mx := q.bounds()
	if mn >= mx {
		return 0, nil
	}
	// recordFrom is the first record at an index >= i (below mx), skipping
	// blanks and holes, with its store time.
	recordFrom := func(i int64) (idx, t int64, ok bool, err error) {
		j, e, ok, err := s.firstEntryFrom(ctx, q, i)
		if err != nil || !ok || j >= mx {
			return 0, 0, false, err
		}
		t, err = s.storeTimeAt(ctx, e)
		return j, t, err == nil, err
	}
	// Lower bound: first index from which the first record is stored at or
	// after tsMillis (or there is none). Probes in blanks and holes are
	// judged by the record after them, so a hole in the middle of a queue
	// (a promoted copy's jump) never hides the records before it. left is
	// the record just below the bound, when there is one.
	lo, hi := mn, mx
	left, leftT, lok := int64(0), int64(0), false
	for lo < hi {
		m := lo + (hi-lo)/2
		j, t, ok, err := recordFrom(m)
		if err != nil {
			return mn, err
		}
		if !ok || t >= tsMillis {
			hi = m
			continue
		}
		left, leftT, lok = j, t, true
		lo = j + 1
	}
	right, rightT, rok, err := recordFrom(lo)
	if err != nil {
		return mn, err
	}
	switch {
	case rok && rightT == tsMillis:
		return right, nil
	case lok && rok:
		if tsMillis-leftT <= rightT-tsMillis {
			return left, nil
		}
		return right, nil
	case lok:
		return left, nil
	case rok:
		return right, nil
	}
	return mn, nil
}
