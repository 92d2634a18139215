package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrReserved: the write would hand out a commitlog offset or a queue
// offset past the reservation of the last durable checkpoint (see
// SetReservation). Not sticky: writes resume when a new reservation is set.
var ErrReserved = errors.New("store: offsets past the reservation of the last durable checkpoint")

// Reservation bounds the offsets the writer may hand out. The broker
// records in every bucket checkpoint how far the log and each queue may
// get before the next checkpoint; a broker restored on an empty disk after
// an unclean loss starts past those marks, so no offset or msgId handed
// out by the lost broker is ever reused. The store enforces the marks of
// the last checkpoint that was durably written, so they hold even while
// checkpoints fail.
type Reservation struct {
	// Log: no record may end past this commitlog offset.
	Log int64
	// Queues: per topic and queue id, queue offsets below the mark may be
	// handed out.
	Queues map[string]map[int32]int64
	// Default is the mark of a queue not in Queues (one the checkpoint did
	// not list yet).
	Default int64
	// OnNear, if set, is called once (under the writer lock: it must not
	// block) when a write comes within LogNear bytes of Log or within
	// QueueNear offsets of a queue's mark, so the next reservation can be
	// made before this one runs out.
	OnNear             func()
	LogNear, QueueNear int64
	// Wait is how long a write the marks refuse waits for the next
	// reservation (SetReservation, normally a checkpoint it triggered
	// through OnNear) and tries again, before failing with ErrReserved;
	// Fail ends the wait early. 0: it fails at once.
	Wait time.Duration

	near atomic.Bool
	// done is closed once r is replaced (SetReservation) or fails (Fail);
	// made by SetReservation.
	done     chan struct{}
	doneOnce sync.Once
	failed   atomic.Pointer[error]
	// wanted records what refused writes needed (see Wanted); guarded by
	// wantMu, touched only on refusals.
	wantMu    sync.Mutex
	wantLog   int64
	wantQueue map[string]map[int32]int64
}

// Near reports whether OnNear has fired for r: a write came near or hit
// its marks.
func (r *Reservation) Near() bool { return r.near.Load() }

func (r *Reservation) nearing() {
	if r.OnNear != nil && r.near.CompareAndSwap(false, true) {
		r.OnNear()
	}
}

// Fail ends the waits of the writes r refused, and makes the ones it
// refuses later fail at once, with err as the reason: no new reservation
// is coming soon (the checkpoint that would make it failed). A later
// SetReservation replaces r as usual.
func (r *Reservation) Fail(err error) {
	r.failed.CompareAndSwap(nil, &err)
	r.end()
}

func (r *Reservation) end() {
	if r.done != nil {
		r.doneOnce.Do(func() { close(r.done) })
	}
}

// Wanted is what the writes r refused needed: the commitlog end and, per
// queue, the offset one past the last of their records. The next
// reservation should cover it, so that a request larger than the usual
// headroom fits once a checkpoint lands.
func (r *Reservation) Wanted() (log int64, queues map[string]map[int32]int64) {
	r.wantMu.Lock()
	defer r.wantMu.Unlock()
	queues = make(map[string]map[int32]int64, len(r.wantQueue))
	for topic, ids := range r.wantQueue {
		queues[topic] = make(map[int32]int64, len(ids))
		for id, v := range ids {
			queues[topic][id] = v
		}
	}
	return r.wantLog, queues
}

func (r *Reservation) wantedLog(end int64) {
	r.wantMu.Lock()
	r.wantLog = max(r.wantLog, end)
	r.wantMu.Unlock()
}

func (r *Reservation) wantedQueue(topic string, id int32, next int64) {
	r.wantMu.Lock()
	if r.wantQueue == nil {
		r.wantQueue = map[string]map[int32]int64{}
	}
	if r.wantQueue[topic] == nil {
		r.wantQueue[topic] = map[int32]int64{}
	}
	r.wantQueue[topic][id] = max(r.wantQueue[topic][id], next)
	r.wantMu.Unlock()
}

// reservedError is a refusal by rv: the writer waits on rv (awaitReservation).
type reservedError struct {
	rv  *Reservation
	msg string
}

func (e *reservedError) Error() string { return ErrReserved.Error() + ": " + e.msg }
func (e *reservedError) Unwrap() error { return ErrReserved }

// awaitReservation waits, after a write was refused with err, until the
// reservation that refused it is replaced (true: write again) or fails,
// or until deadline (false, and the error to return). deadline zero: the
// first refusal; it becomes the refusal's time plus Wait.
func (s *Store) awaitReservation(err error, deadline *time.Time) (bool, error) {
	var re *reservedError
	if !errors.As(err, &re) {
		return false, err
	}
	rv := re.rv
	if deadline.IsZero() {
		*deadline = time.Now().Add(rv.Wait)
	}
	wait := time.Until(*deadline)
	if p := rv.failed.Load(); p == nil && wait > 0 && rv.done != nil {
		t := time.NewTimer(wait)
		select {
		case <-rv.done:
		case <-t.C:
		}
		t.Stop()
	}
	if s.resv.Load() != rv {
		return true, nil // a new reservation: try again
	}
	if p := rv.failed.Load(); p != nil {
		return false, fmt.Errorf("%w (no new reservation: %v)", err, *p)
	}
	if rv.Wait > 0 {
		return false, fmt.Errorf("%w (no new reservation within %v)", err, rv.Wait)
	}
	return false, err
}

func (r *Reservation) queueMark(topic string, id int32) int64 {
	if m, ok := r.Queues[topic][id]; ok {
		return m
	}
	return r.Default
}

// SetReservation replaces the reservation; nil removes the bound. The
// store keeps r: the caller must not change it afterwards. Writes waiting
// on the reservation it replaces (Reservation.Wait) try again.
func (s *Store) SetReservation(r *Reservation) {
	if r != nil && r.done == nil {
		r.done = make(chan struct{})
	}
	if old := s.resv.Swap(r); old != nil && old != r {
		old.end()
	}
}

// FlushedPhysOffset is the end of the commitlog known to be on disk
// (fdatasynced): what survives a power loss. It never exceeds
// MaxPhysOffset.
func (s *Store) FlushedPhysOffset() int64 { return s.flushed.Load() }

type queueCount struct {
	topic string
	id    int32
	n     int64
}

// reservedLocked refuses r when its records would end past the log mark
// (pos is where they would start) or hand out a queue offset at or past
// a queue's mark. Caller holds s.mu.
func (s *Store) reservedLocked(r *putReq, pos int64) error {
	rv := s.resv.Load()
	if rv == nil {
		return nil
	}
	end := pos + int64(r.total)
	if end > rv.Log {
		rv.wantedLog(end)
		rv.nearing()
		return &reservedError{rv: rv, msg: fmt.Sprintf("the commitlog would reach offset %d; the checkpoint reserved up to %d", end, rv.Log)}
	}
	if end > rv.Log-rv.LogNear {
		rv.nearing()
	}
	var small [4]queueCount
	counts := small[:0]
	for i := range r.msgs {
		m := &r.msgs[i]
		if notDispatched(m.SysFlag) {
			continue
		}
		k := -1
		for j := range counts {
			if counts[j].id == m.QueueID && counts[j].topic == m.Topic {
				k = j
				break
			}
		}
		if k < 0 {
			counts = append(counts, queueCount{topic: m.Topic, id: m.QueueID})
			k = len(counts) - 1
		}
		counts[k].n++
	}
	for _, c := range counts {
		var next int64
		if q := s.queue(c.topic, c.id); q != nil {
			next = q.next
		}
		mark := rv.queueMark(c.topic, c.id)
		if next+c.n > mark {
			rv.wantedQueue(c.topic, c.id, next+c.n)
			rv.nearing()
			return &reservedError{rv: rv, msg: fmt.Sprintf("queue %s/%d would reach offset %d; the checkpoint reserved up to %d", c.topic, c.id, next+c.n, mark)}
		}
		if next+c.n > mark-rv.QueueNear {
			rv.nearing()
		}
	}
	return nil
}
