package store

import (
	"fmt"
	"sync"
)

// flushWaiters are the PutNotify callbacks waiting for an fdatasync
// (FlushSync). They are fired by whoever advances s.flushed, sets the
// sticky error, or closes the store, possibly with a store lock held: a
// callback must not call into the store.
type flushWaiters struct {
	mu   sync.Mutex
	list []flushWaiter
	done bool // closed: later registrations fail at once
}

type flushWaiter struct {
	end int64
	fn  func(error)
}

// PutNotify stores msgs like Put and calls done with the results once they
// are acknowledged by the flush mode: at once in FlushAsync; in FlushSync
// after the fdatasync that covers them, from the goroutine that ran it (so
// done must be quick and must not call into the store). Errors found
// before the append (validation, disk full, closed) are reported through
// done before PutNotify returns. No goroutine waits per call: this is how
// a caller serving many requests acknowledges group commits without
// parking a worker on each.
//
// Unlike Put there is no SyncFlushTimeout: a callback waits for the next
// fdatasync, however slow, or for the failure that ends all of them.
func (s *Store) PutNotify(msgs []Message, done func([]PutResult, error)) {
	if len(msgs) == 0 {
		done(nil, nil)
		return
	}
	res, end, err := s.appendBatch(msgs)
	if err != nil {
		done(nil, err)
		return
	}
	if s.opts.Flush != FlushSync || s.flushed.Load() >= end {
		done(res, nil)
		return
	}
	fn := func(err error) { done(res, err) }
	s.waiters.mu.Lock()
	switch {
	case s.waiters.done:
		s.waiters.mu.Unlock()
		fn(ErrClosed)
		return
	case s.flushed.Load() >= end:
		// A sync finished between the check above and the lock.
		s.waiters.mu.Unlock()
		fn(nil)
		return
	}
	s.waiters.list = append(s.waiters.list, flushWaiter{end: end, fn: fn})
	s.waiters.mu.Unlock()
	s.syncWants.Add(1)
	select {
	case s.syncReq <- struct{}{}:
	default:
	}
}

// fireWaiters calls the callbacks now covered by s.flushed; after a sticky
// error, or once closing, every callback left gets the error.
func (s *Store) fireWaiters(closing bool) {
	flushed := s.flushed.Load()
	sticky := s.stickyErr()
	s.waiters.mu.Lock()
	if closing {
		s.waiters.done = true
	}
	var ready []flushWaiter
	var errd []flushWaiter
	kept := s.waiters.list[:0]
	for _, w := range s.waiters.list {
		switch {
		case w.end <= flushed:
			ready = append(ready, w)
		case sticky != nil || closing:
			errd = append(errd, w)
		default:
			kept = append(kept, w)
		}
	}
	clear(s.waiters.list[len(kept):])
	s.waiters.list = kept
	s.waiters.mu.Unlock()
	s.syncFired.Add(int64(len(ready)))
	for _, w := range ready {
		w.fn(nil)
	}
	err := ErrClosed
	if sticky != nil {
		err = fmt.Errorf("store: flush failed: %w", sticky)
	}
	for _, w := range errd {
		w.fn(err)
	}
}
