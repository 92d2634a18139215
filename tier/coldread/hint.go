package coldread

import (
	"context"
	"time"

	"github.com/stratamq/stratamq/tier/segfile"
)

// Read-ahead across objects: hints (see the package doc).
//
// In an object with a layout a queue's read-ahead stops at the end of its
// group, and the object does not say which group of the next object is
// the queue's. The caller knows: the store's cold index, serving a
// queue's last entries in a segment, can look up the queue's first entry
// in the next one. Prefetch takes that as a hint and, in the background,
// reads the footer and layout of the object holding it, fetches the frames
// from the hinted record on (its group only, up to hintDepth) and leaves a
// stream there (layout.go) whose reads carry on from those frames, so the
// queue's first read of the object finds them fetched or in flight.

// maxHints bounds the hints followed at once (each one goroutine, with at
// most one GET of its own in flight, through the cold GET pool); a hint
// that finds them all busy is dropped. The queues of a topic replaying
// together cross into the next object at about the same time, each with
// its hint: eight queues' hints are followed together.
const maxHints = 8

// hintTimeout bounds the work of one hint, its waits for a pool slot
// included.
const hintTimeout = 10 * time.Second

// Prefetch is a hint that a sequential reader will soon read the log from
// the offset next returns (its next record, typically the first of its
// queue in an object it has not read yet). It never blocks: next runs on
// a background goroutine with a context that Close cancels (and that ends
// after hintTimeout), at most maxHints at once; Prefetch returns false
// when the hint was dropped (all busy, the Reader closed, read-ahead
// disabled). When next returns ok, the frames from that offset on are
// fetched in the background: the object's footer and layout section, then
// the frames of the record's group (layout objects; the frames after it
// otherwise) up to hintDepth, in runs of at most RunBytes, each taking a
// read-ahead slot of the cold GET pool when one frees up. An offset
// outside the object table fetches nothing. A failed hint fails no read:
// a reader that meets its failed fetch fetches again.
func (r *Reader) Prefetch(next func(ctx context.Context) (off int64, ok bool, err error)) bool {
	if r.cfg.ReadAhead < 0 {
		return false
	}
	r.mu.Lock()
	if r.mu.closed || r.mu.hints >= maxHints {
		r.mu.Unlock()
		r.stats.hintsDropped.Add(1)
		return false
	}
	r.mu.hints++
	r.wg.Add(1)
	r.mu.Unlock()
	r.stats.hints.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			r.mu.hints--
			r.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(r.ctx, hintTimeout)
		defer cancel()
		off, ok, err := next(ctx)
		if err != nil || !ok {
			return
		}
		r.prefetchAt(ctx, off)
	}()
	return true
}

// hintDepth is how far past the start of a hinted record's frame a hint
// fetches: an even share of ReadAheadBytes among the object's streams
// (this one counted), at most RunBytes (one GET) and a quarter of
// ReadAheadBytes, at least that frame. The maxHints hints followed at once
// so fetch at most 2 × ReadAheadBytes (half the cache) past their frames:
// with the read-ahead within objects, no more than the scan window holds,
// so a hinted frame is not evicted before its queue gets there.
func (r *Reader) hintDepth(f *segfile.Footer, fi, streams int) int64 {
	return max(min(r.cfg.ReadAheadBytes/int64(streams+1), r.cfg.RunBytes, r.cfg.ReadAheadBytes/4), f.Frames[fi].Len)
}

// prefetchAt follows a hint: the frames from log offset off on (see
// Prefetch). It returns the first frame it did not start a fetch for, -1
// when it fetched none (off outside the table, an error).
func (r *Reader) prefetchAt(ctx context.Context, off int64) int {
	t := *r.table.Load()
	oi, err := find(t, off)
	if err != nil {
		return -1 // past the table's objects or in a gap: nothing of ours to fetch
	}
	obj := t[oi]
	f, err := r.footerOf(ctx, obj, true)
	if err != nil {
		return -1
	}
	rel := off - obj.Base
	if rel >= f.LogicalSize {
		return -1
	}
	var sec []byte
	if f.Layout != nil {
		if sec, err = r.frameOf(ctx, obj.Key, f, len(f.Frames), true); err != nil {
			return -1
		}
	}
	spos, _ := f.Locate(sec, rel)
	fi := f.Find(spos)
	if fi < 0 {
		return -1
	}
	var st *stream
	r.mu.Lock()
	streams := len(r.mu.streams[obj.Key])
	if f.Layout != nil {
		// A stream at fi: the reader's first read there joins it and reads
		// on from what the hint fetched.
		if len(r.mu.streams) > 4096 {
			clear(r.mu.streams)
		}
		r.mu.tick++
		ss := r.mu.streams[obj.Key]
		for _, s := range ss {
			if s.last == fi { // not last+1: that may be another queue's, whose group ends before fi
				st = s
				break
			}
		}
		if st == nil {
			st = &stream{last: fi, next: fi, streak: 1}
			ss = r.addStreamLocked(obj.Key, ss, st)
		}
		st.used = r.mu.tick
	}
	r.mu.Unlock()
	limit := f.Frames[fi].Off + r.hintDepth(f, fi, streams)
	// Frames that start before limit, from fi, not into the next group.
	stop := func(i int) bool {
		return i >= len(f.Frames) || f.Frames[i].Off >= limit || i > fi && f.Layout != nil && f.Frames[i].GroupStart
	}
	from := fi
	for !stop(from) {
		b, run := from+1, f.Frames[from].Len
		for !stop(b) && run+f.Frames[b].Len <= r.cfg.RunBytes {
			run += f.Frames[b].Len
			b++
		}
		for !r.prefetchRun(obj.Key, f, from, b) {
			if !r.waitSlot(ctx) {
				return from
			}
		}
		from = b
		if st != nil {
			r.mu.Lock()
			st.next = max(st.next, from)
			r.mu.Unlock()
		}
	}
	return from
}

// waitSlot waits until a slot of the cold GET pool is released (or a
// moment has passed: a release may have come just before the wait
// began), false when ctx ended or the Reader closed.
func (r *Reader) waitSlot(ctx context.Context) bool {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return false
	}
	if r.mu.freed == nil {
		r.mu.freed = make(chan struct{})
	}
	ch := r.mu.freed
	r.mu.Unlock()
	tm := time.NewTimer(20 * time.Millisecond)
	defer tm.Stop()
	select {
	case <-ch:
	case <-tm.C:
	case <-ctx.Done():
		return false
	}
	return ctx.Err() == nil
}
