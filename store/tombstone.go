package store

import (
	"slices"
)

// Tombstones of deleted queues.
//
// A queue's offsets are never handed out twice, across deletions too:
// DeleteTopic leaves, per queue that had messages, a tombstone with the
// offset the queue had reached, and a queue created again under the same
// topic and id starts there (newQueue) instead of at 0. The bucket's queue
// index objects of the deleted incarnation stay until retention removes
// their segments, and the cold index finds a queue's entries by offset
// across every uploaded segment: with offsets restarting at 0, a search
// for an offset of the new incarnation could land on the old
// incarnation's entry and serve the deleted message. With continued
// offsets, (topic, queue, offset) names one message for the life of the
// bucket, the old entries all lie below the new queue's min, and each
// queue's offsets still rise segment after segment, as the search needs.
//
// Tombstones are durable in <Dir>/restored (restore.go) before the deleted
// queue's files are removed, and the broker keeps them in the bucket's
// checkpoint (Restore.Deleted), so a restore on an empty disk neither
// brings back the deleted incarnation nor numbers the next one from 0.
// A tombstone is consumed when its queue is created again (the queue's
// own range then carries the offsets on); one applied at Open to a queue
// that exists on disk raises its min and cold end to the tombstone, which
// drops what is left of the deleted incarnation's files (a crash between
// the tombstone's write and their removal). They cost a few dozen bytes
// per deleted queue and are kept for the store's life.

// tombstone: the next incarnation of topic/id starts at next.
type tombstone struct {
	topic string
	id    int32
	next  int64
}

// Tombstones returns the tombstones of queues deleted and not created
// again: topic → queue id → the offset the queue's next incarnation
// starts at.
func (s *Store) Tombstones() map[string]map[int32]int64 {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	out := map[string]map[int32]int64{}
	for k, next := range s.tombs {
		if out[k.topic] == nil {
			out[k.topic] = map[int32]int64{}
		}
		out[k.topic][k.id] = next
	}
	return out
}

// tombList is s's tombstones sorted by topic and id.
func (s *Store) tombList() []tombstone {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	out := make([]tombstone, 0, len(s.tombs))
	for k, next := range s.tombs {
		out = append(out, tombstone{topic: k.topic, id: k.id, next: next})
	}
	sortTombs(out)
	return out
}

func sortTombs(ts []tombstone) {
	slices.SortFunc(ts, func(a, b tombstone) int {
		return compareQKey(qkey{a.topic, a.id}, qkey{b.topic, b.id})
	})
}

// tombsOf is a Restore's Deleted as a sorted list (bad names and empty
// tombstones skipped).
func tombsOf(m map[string]map[int32]int64) []tombstone {
	var out []tombstone
	for topic, ids := range m {
		if checkTopic(topic) != nil || len(topic) > MaxTopicLen {
			continue
		}
		for id, next := range ids {
			if id >= 0 && next > 0 {
				out = append(out, tombstone{topic: topic, id: id, next: next})
			}
		}
	}
	sortTombs(out)
	return out
}

// dropTombstoned applies tombstones to a restore's queues: a queue the
// tier describes no further than its tombstone is the deleted incarnation
// and is dropped; one that continues past it keeps its offsets from the
// tombstone on.
func dropTombstoned(qs map[qkey]*restoredQueue, tombs []tombstone) {
	for _, t := range tombs {
		k := qkey{t.topic, t.id}
		rq := qs[k]
		if rq == nil {
			continue
		}
		if rq.coldEnd <= t.next {
			delete(qs, k)
			continue
		}
		rq.min = max(rq.min, t.next)
	}
}

// installTombs applies the tombstones read at Open: a queue loaded from
// disk has its min and cold end raised to its tombstone (dropping files
// wholly below it, as installRestored does), and the rest wait in s.tombs
// for their queue's next incarnation.
func (s *Store) installTombs(ts []tombstone) {
	for _, t := range ts {
		if checkTopic(t.topic) != nil {
			continue
		}
		q := s.queue(t.topic, t.id)
		if q == nil {
			s.qmu.Lock()
			s.setTombLocked(t.topic, t.id, t.next)
			s.qmu.Unlock()
			continue
		}
		s.installCold(q, t.next, t.next) // nothing below the tombstone is served
	}
}

// setTombLocked records that topic/id's next incarnation starts at next
// (never lowering a tombstone already there). Caller holds qmu.
func (s *Store) setTombLocked(topic string, id int32, next int64) {
	if next <= 0 {
		return
	}
	k := qkey{topic, id}
	if next > s.tombs[k] {
		if s.tombs == nil {
			s.tombs = map[qkey]int64{}
		}
		s.tombs[k] = next
	}
}

// startAtTomb starts q, just made, at its tombstone, which it consumes:
// its entries below come from nowhere (min = max = the tombstone) and its
// first consumequeue file starts there. Caller holds qmu.
func (s *Store) startAtTomb(q *cqueue) {
	k := qkey{q.topic, q.id}
	next, ok := s.tombs[k]
	if !ok {
		return
	}
	delete(s.tombs, k)
	q.next, q.min, q.max, q.written = next, next, next, next
	q.coldEnd.Store(next)
}
