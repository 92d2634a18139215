package broker

import (
	"math"
	"sort"
)

// Durable progress. The internal services (the schedule service, the
// transaction check, POP's dead-lettering) move messages by writing them
// again: a delivery, a commit, a put-back, a DLQ copy. Their progress
// (everything below it is done) may be saved only once those writes are as
// durable as the save: a progress file on the local disk must not count a
// write a power loss takes back, and the bucket checkpoint must not count
// one a restore on an empty disk (or a failover) does not find. Otherwise
// recovery skips messages that were acknowledged.
//
// So each service records, with every step of its progress, the commitlog
// end the writes of that step reached (stepLog), and a save takes the last
// step whose writes end at or below the durable end for its fault
// (durableEnds). What recovery then finds below the saved progress is done;
// what it finds past it is done again (at least once).

// durableEnds is how far the commitlog is durable for each fault a saved
// progress must survive:
//
//   - local: fdatasynced (flush=sync, or the flush service synced it):
//     what a power loss keeps. The local progress files save this.
//   - bucket: listed in the bucket's manifest (what a restore on an empty
//     disk, or a promoted slave, reads), or on a sync_master held by a
//     slave (what a failover keeps). The bucket checkpoint saves this.
//     math.MaxInt64 without a bucket (no checkpoint).
//
// Both only grow within a run.
func (b *Broker) durableEnds() (local, bucket int64) {
	if b.store == nil {
		return 0, 0
	}
	local = b.store.FlushedPhysOffset()
	if b.dur == nil {
		return local, math.MaxInt64
	}
	bucket = uploadedEnd(nil, b.tier)
	if b.cfg.Role == RoleSyncMaster {
		bucket = max(bucket, b.slaveHeld())
	}
	return local, bucket
}

// durableAll is the commitlog end durable for every fault: progress over
// writes below it may be forgotten (stepLog.trim).
func (b *Broker) durableAll() int64 {
	l, bk := b.durableEnds()
	return min(l, bk)
}

// slaveHeld is the highest commitlog end a slave of this sync_master
// acknowledged in this run (never less than the log the run took over),
// kept in b.hw so that it never goes back when a slave leaves.
func (b *Broker) slaveHeld() int64 {
	hw := b.hw.Load()
	m := b.haMaster.Load()
	if m == nil {
		return hw
	}
	acked, _ := m.Acked()
	for acked > hw && !b.hw.CompareAndSwap(hw, acked) {
		hw = b.hw.Load()
	}
	return max(hw, acked)
}

// stepLog is one progress value's steps in this run, each with the
// commitlog end the writes it depends on reached (the highest so far: a
// step depends on the writes of every step before it). The zero value
// holds the zero progress.
type stepLog[T any] struct {
	base  T // its writes are durable for every fault (or it was loaded)
	steps []progressStep[T]
}

type progressStep[T any] struct {
	v   T
	end int64
}

// maxProgressSteps bounds a stepLog: past it every other step is dropped,
// which only makes at answer an older value for some ends (progress saved
// a little behind, never ahead).
const maxProgressSteps = 4096

// add records that the progress is now v, after writes that end at end (0:
// none).
func (l *stepLog[T]) add(v T, end int64) {
	n := len(l.steps)
	if n == 0 && end <= 0 {
		l.base = v // no write pending: as durable as the base
		return
	}
	if n > 0 {
		end = max(end, l.steps[n-1].end)
		if l.steps[n-1].end == end {
			l.steps[n-1].v = v
			return
		}
	}
	if n >= maxProgressSteps {
		kept := l.steps[:0]
		for i := 1; i < n; i += 2 {
			kept = append(kept, l.steps[i])
		}
		l.steps = kept
	}
	l.steps = append(l.steps, progressStep[T]{v: v, end: end})
}

// at is the progress whose writes all end at or below d.
func (l *stepLog[T]) at(d int64) T {
	i := sort.Search(len(l.steps), func(i int) bool { return l.steps[i].end > d })
	if i == 0 {
		return l.base
	}
	return l.steps[i-1].v
}

// latest is the progress now.
func (l *stepLog[T]) latest() T {
	if n := len(l.steps); n > 0 {
		return l.steps[n-1].v
	}
	return l.base
}

// trim forgets the steps whose writes end at or below d, durable for every
// fault.
func (l *stepLog[T]) trim(d int64) {
	i := sort.Search(len(l.steps), func(i int) bool { return l.steps[i].end > d })
	if i == 0 {
		return
	}
	l.base = l.steps[i-1].v
	l.steps = append(l.steps[:0], l.steps[i:]...)
}
