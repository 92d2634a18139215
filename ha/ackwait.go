package ha

import (
	"fmt"
	"slices"
	"time"
)

// ackWaiter is an AwaitAck call not settled yet: done runs once some slave
// acked off, or with the error that ends the wait.
type ackWaiter struct {
	off      int64
	deadline time.Time
	done     func(error)
	err      error // set when settled
}

// ackWaiters are the pending AwaitAck calls, under Master.mu. list is kept
// in offset order (sends take offsets in order, so an insert is almost
// always an append): an ack settles a prefix of it. One timer, armed for
// the earliest deadline while any waiter is pending, ends the waits no
// slave acks in time.
//
// The list is bounded by MaxLag: a wait is for bytes already written, and
// once the best slave lags more than MaxLag every pending wait fails and
// new ones fail at once, so at most MaxLag bytes of sends (and their
// answers' state) wait at a time.
type ackWaiters struct {
	list    []ackWaiter
	timer   *time.Timer
	timerAt time.Time // the deadline the timer is armed for; zero: not armed
}

// AwaitAck calls done once some slave has acked off (sync_master), with
// nil; or with the error WaitAcked would return: ErrSlaveNotAvailable when
// no slave is connected or the best slave lags more than MaxLag (when
// called, or later while it waits), ErrSlaveTimeout once deadline passes.
// With MinInSync 1, done gets nil instead of those errors whenever no
// slave is in sync (the master acknowledges alone, counted in AckedAlone);
// a deadline that passes takes the slaves that did not ack off out of the
// in-sync set first.
//
// done runs exactly once, on whichever goroutine settles the wait: the
// caller's when it is settled at once, else a slave's report reader, the
// deadline timer, a slave's connect or disconnect, or Close. It must not
// block: on a report reader it delays every later ack. Unlike WaitAcked no
// goroutine waits, so the ack that settles a send can answer it on the
// report reader without waking another thread.
func (m *Master) AwaitAck(off int64, deadline time.Time, done func(error)) {
	m.mu.Lock()
	if err, settled, alone := m.ackStateLocked(off, true); settled {
		if alone {
			m.ackedAlone.Add(1)
		}
		m.mu.Unlock()
		done(err)
		return
	}
	w := &m.waiters
	i := len(w.list)
	for i > 0 && w.list[i-1].off > off {
		i--
	}
	w.list = slices.Insert(w.list, i, ackWaiter{off: off, deadline: deadline, done: done})
	if w.timerAt.IsZero() || deadline.Before(w.timerAt) {
		m.armAckTimerLocked(deadline)
	}
	m.mu.Unlock()
}

// ackStateLocked says whether a wait for off is over and how: nil once
// acked; nil with alone set when mayAlone and the master may acknowledge
// alone (MinInSync 1 and no slave in sync); ErrSlaveNotAvailable when no
// slave is connected, the master stopped, every slave is stalled, or the
// best slave that is not lags past MaxLag. m.mu is held.
func (m *Master) ackStateLocked(off int64, mayAlone bool) (err error, settled, alone bool) {
	if m.stopped {
		return fmt.Errorf("%w: the HA master stopped", ErrSlaveNotAvailable), true, false
	}
	best, any := m.bestLocked()
	if any && best >= off {
		return nil, true, false
	}
	if mayAlone && m.aloneLocked() {
		return nil, true, true
	}
	if !any {
		return fmt.Errorf("%w: no slave connected", ErrSlaveNotAvailable), true, false
	}
	live, anyLive := m.liveBestLocked(time.Now())
	if !anyLive {
		return fmt.Errorf("%w: no slave acknowledged what it was sent within %v (stalled)", ErrSlaveNotAvailable, m.opts.StallTimeout), true, false
	}
	if lag := m.opts.Log.MaxPhysOffset() - live; lag > m.opts.MaxLag {
		return fmt.Errorf("%w: the best slave lags %d bytes (limit %d)", ErrSlaveNotAvailable, lag, m.opts.MaxLag), true, false
	}
	return nil, false, false
}

// settleLocked moves the waiters that are over to dst, each with its
// outcome, and returns dst: those at or below the best ack succeed; the
// rest fail together when ackStateLocked says the wait is over for them
// (no slave, the master stopped, or the best lags past MaxLag). Run them
// with runSettled once m.mu is released. m.mu is held.
func (m *Master) settleLocked(dst []ackWaiter) []ackWaiter {
	w := &m.waiters
	if len(w.list) == 0 {
		return dst
	}
	n := 0
	if best, any := m.bestLocked(); any {
		for n < len(w.list) && w.list[n].off <= best {
			n++
		}
	}
	if n < len(w.list) {
		if err, over, alone := m.ackStateLocked(w.list[len(w.list)-1].off, true); over {
			for i := n; i < len(w.list); i++ {
				w.list[i].err = err
			}
			if alone {
				m.ackedAlone.Add(int64(len(w.list) - n))
			}
			n = len(w.list)
		}
	}
	if n == 0 {
		return dst
	}
	dst = append(dst, w.list[:n]...)
	rest := copy(w.list, w.list[n:])
	clear(w.list[rest:])
	w.list = w.list[:rest]
	return dst
}

// runSettled runs the settled waiters' callbacks and clears s for reuse.
// m.mu is not held.
func runSettled(s []ackWaiter) []ackWaiter {
	for i := range s {
		s[i].done(s[i].err)
	}
	clear(s)
	return s[:0]
}

// armAckTimerLocked arms the deadline timer for at. m.mu is held.
func (m *Master) armAckTimerLocked(at time.Time) {
	w := &m.waiters
	w.timerAt = at
	d := time.Until(at)
	if w.timer == nil {
		w.timer = time.AfterFunc(d, m.expireWaiters)
		return
	}
	w.timer.Reset(d)
}

// expireWaiters is the deadline timer: it fails the waits whose deadline
// passed with ErrSlaveTimeout and re-arms for the earliest one left. The
// slaves that did not ack such a wait's bytes leave the in-sync set; with
// MinInSync 1 and no slave left in it, those waits (and every other
// pending one) succeed instead: the master acknowledges alone.
func (m *Master) expireWaiters() {
	now := time.Now()
	var expired []ackWaiter
	m.mu.Lock()
	w := &m.waiters
	w.timerAt = time.Time{}
	best, _ := m.bestLocked()
	lapsed := false
	var next time.Time
	keep := w.list[:0]
	for _, x := range w.list {
		if x.deadline.After(now) {
			keep = append(keep, x)
			if next.IsZero() || x.deadline.Before(next) {
				next = x.deadline
			}
			continue
		}
		if m.lapseLocked(x.off) {
			lapsed = true
		}
		if m.aloneLocked() {
			x.err = nil
			m.ackedAlone.Add(1)
		} else {
			x.err = fmt.Errorf("%w: no slave acked offset %d (best %d) by the deadline", ErrSlaveTimeout, x.off, best)
		}
		expired = append(expired, x)
	}
	clear(w.list[len(keep):])
	w.list = keep
	if lapsed {
		// The in-sync set shrank: with MinInSync 1 the waits left may be
		// over (the master alone), and WaitAcked callers look again.
		expired = m.settleLocked(expired)
		m.wakeAckedLocked()
	}
	if !next.IsZero() {
		m.armAckTimerLocked(next)
	}
	m.mu.Unlock()
	runSettled(expired)
	if lapsed {
		m.acksChanged() // the read bound may follow the in-sync set
	}
}
