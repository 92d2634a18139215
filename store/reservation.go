package store

import (
	"errors"
	"fmt"
	"sync/atomic"
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
	near               atomic.Bool
}

// Near reports whether OnNear has fired for r: a write came near or hit
// its marks.
func (r *Reservation) Near() bool { return r.near.Load() }

func (r *Reservation) nearing() {
	if r.OnNear != nil && r.near.CompareAndSwap(false, true) {
		r.OnNear()
	}
}

func (r *Reservation) queueMark(topic string, id int32) int64 {
	if m, ok := r.Queues[topic][id]; ok {
		return m
	}
	return r.Default
}

// SetReservation replaces the reservation; nil removes the bound. The
// store keeps r: the caller must not change it afterwards.
func (s *Store) SetReservation(r *Reservation) { s.resv.Store(r) }

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
		rv.nearing()
		return fmt.Errorf("%w: the commitlog would reach offset %d; the checkpoint reserved up to %d", ErrReserved, end, rv.Log)
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
			rv.nearing()
			return fmt.Errorf("%w: queue %s/%d would reach offset %d; the checkpoint reserved up to %d", ErrReserved, c.topic, c.id, next+c.n, mark)
		}
		if next+c.n > mark-rv.QueueNear {
			rv.nearing()
		}
	}
	return nil
}
