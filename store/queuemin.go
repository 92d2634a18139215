package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sort"
)

// Per-queue minima raised by per-topic retention (the broker's logical
// expiry, issue 11 item 7): a queue's min moves past messages its topic no
// longer keeps, independently of the commitlog floor, which only moves
// once every queue with records below it has moved past them.

// QueueMin is a queue's new minimum offset.
type QueueMin struct {
	Topic   string
	QueueID int32
	Min     int64
}

const (
	queueMinsName  = "queuemins"
	queueMinsMagic = "SMQQMN01"
)

// RaiseQueueMins raises each named queue's min offset to Min (never lowers
// it; capped at the queue's max; unknown queues are skipped), so Get below
// it is OffsetTooSmall with NextBeginOffset = the new min. The raised mins
// are durable when it returns: <Dir>/queuemins (temp + fsync + rename),
// re-applied on every Open; DeleteTopic drops the topic's.
//
//	"SMQQMN01" n:u32 n × (topicLen:u16 topic id:i32 min:i64) crc32:u32
func (s *Store) RaiseQueueMins(mins []QueueMin) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if s.isClosed() {
		return ErrClosed
	}
	changed := false
	for _, m := range mins {
		q := s.queue(m.Topic, m.QueueID)
		if q == nil {
			continue
		}
		q.mu.Lock()
		v := min(m.Min, q.max)
		if v > q.min && !q.deleted {
			q.min = v
			changed = true
		}
		q.mu.Unlock()
		if k := (qkey{m.Topic, m.QueueID}); v > s.qmins[k] {
			if s.qmins == nil {
				s.qmins = map[qkey]int64{}
			}
			s.qmins[k] = v
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := s.saveQueueMinsLocked(); err != nil {
		return err
	}
	// Restored queues' mins also live in <Dir>/restored.
	if err := s.saveRestoredLocked(); err != nil {
		return s.restoredFailed(err)
	}
	s.reclaimAfterMinsLocked()
	return nil
}

// saveQueueMinsLocked writes <Dir>/queuemins. Caller holds flushMu.
func (s *Store) saveQueueMinsLocked() error {
	keys := make([]qkey, 0, len(s.qmins))
	for k := range s.qmins {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return compareQKey(keys[i], keys[j]) < 0 })
	b := append([]byte(queueMinsMagic), 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[8:], uint32(len(keys)))
	for _, k := range keys {
		b = appendQueueKey(b, k.topic, k.id)
		b = binary.BigEndian.AppendUint64(b, uint64(s.qmins[k]))
	}
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return s.writeStateFile(queueMinsName, "queue minima", b)
}

// forgetQueueMinsLocked drops topic's raised mins (DeleteTopic: a topic
// created again starts at 0). Caller holds flushMu.
func (s *Store) forgetQueueMinsLocked(topic string) error {
	n := len(s.qmins)
	for k := range s.qmins {
		if k.topic == topic {
			delete(s.qmins, k)
		}
	}
	if len(s.qmins) == n {
		return nil
	}
	return s.saveQueueMinsLocked()
}

// loadQueueMins reads <Dir>/queuemins at Open and raises the mins of the
// queues it names. A damaged file fails Open (the mins are facts consumers
// were told).
func (s *Store) loadQueueMins() error {
	b, err := s.readStateFile(queueMinsName, "queue minima")
	if b == nil || err != nil {
		return err
	}
	if len(b) < 16 || string(b[:8]) != queueMinsMagic {
		return corruptf("queue minima header")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return corruptf("queue minima CRC")
	}
	n := int(binary.BigEndian.Uint32(body[8:]))
	p := body[12:]
	s.qmins = map[qkey]int64{}
	for range n {
		topic, id, f, rest, ok := cutQueueRow(p, 8)
		if !ok {
			return corruptf("queue minima table")
		}
		p = rest
		v := int64(binary.BigEndian.Uint64(f))
		s.qmins[qkey{topic, id}] = v
		if q := s.queue(topic, id); q != nil {
			q.mu.Lock()
			q.min = max(q.min, min(v, q.max))
			q.mu.Unlock()
		}
	}
	return nil
}

// QueueOffsetAtTime is the first offset of the queue, at or above its min,
// from which every record was stored at or after tsMillis (the queue's max
// when every record is older). Store times grow along a queue, so this is
// a binary search reading store times (cold below the local log); a probe
// in a blank or a hole is judged by the first record after it (none: the
// probe is past every record), so a hole in the middle or at the end of a
// queue (a promoted copy's jump) never hides the records before it.
func (s *Store) QueueOffsetAtTime(ctx context.Context, topic string, queueID int32, tsMillis int64) (int64, error) {
	q := s.queue(topic, queueID)
	if q == nil {
		return 0, nil
	}
	lo, hi := q.bounds()
	mx := hi
	for lo < hi {
		m := lo + (hi-lo)/2
		j, e, ok, err := s.firstEntryFrom(ctx, q, m)
		if err != nil {
			return 0, err
		}
		if !ok || j >= mx {
			hi = m // no record from m on
			continue
		}
		t, err := s.storeTimeAt(ctx, e)
		if err != nil {
			return 0, err
		}
		if t < tsMillis {
			lo = j + 1
		} else {
			hi = m
		}
	}
	if j, _, ok, err := s.firstEntryFrom(ctx, q, lo); err != nil || !ok || j >= mx {
		return mx, err // every record is older
	}
	return lo, nil
}

// QueueOffsetAtPhys is the first offset of the queue, at or above its min,
// whose record lies at or above commitlog offset phys (the queue's max
// when none does).
func (s *Store) QueueOffsetAtPhys(ctx context.Context, topic string, queueID int32, phys int64) (int64, error) {
	q := s.queue(topic, queueID)
	if q == nil {
		return 0, nil
	}
	lo, hi := q.bounds()
	j, ok, err := searchFloor(lo, hi, phys, func(i int64) (int64, cqEntry, bool, error) {
		return s.firstEntryFrom(ctx, q, i)
	})
	if err != nil {
		return 0, err
	}
	if !ok {
		_, j = q.bounds()
	}
	return max(j, lo), nil
}

// ResumeQueues numbers each named queue from at least Max, as a restore
// would have: a promoted copy of the log numbers every queue past where the
// bucket's history may have handed its offsets out, whether or not it holds
// records of the queue itself, so that two copies promoted in turn number a
// queue the same way and no offset handed out before is handed out again.
// A queue that holds no local entry (absent, or all of it cold) starts at
// Max with its entries below it cold and its min Min (capped at Max); one
// with local entries below Max keeps them and jumps: it continues at Max
// after a hole (jumpQueueLocked); one already at or past Max is left as it
// is. The new ranges are durable when it returns (<Dir>/restored,
// re-applied on every Open).
func (s *Store) ResumeQueues(qs map[string]map[int32]QueueRange) (resumed int, err error) {
	s.flushMu.Lock() // flushMu before mu, as DeleteTopic
	defer s.flushMu.Unlock()
	// The log, then every queue's entries, durable first: a jump is
	// recorded over entries whose records are. Writes do not run during a
	// promotion; should one slip in, flush again.
	for try := 0; ; try++ {
		if err := s.flushAllLocked(); err != nil {
			return 0, err
		}
		if err := s.lockOpen(); err != nil {
			return 0, err
		}
		// Nothing dispatched since the round (its checkpoint names the
		// log's end now): every queue's entries are written, none pending.
		// (The log's durable end alone does not say so: with FlushSync the
		// group commit moves it without flushMu.)
		if s.writePos.Load() == s.ckWritten {
			break
		}
		s.mu.Unlock()
		if try == 10 {
			return 0, fmt.Errorf("store: resume queues: writes keep coming while the log is made durable")
		}
	}
	defer s.mu.Unlock()
	// Every queue is checked before any changes: an error leaves them all
	// as they were.
	for topic, byID := range qs {
		for id := range byID {
			if q := s.queue(topic, id); q != nil {
				q.mu.RLock()
				pending := len(q.pending) > 0 || q.written != q.max
				q.mu.RUnlock()
				if pending {
					return 0, fmt.Errorf("store: resume queues: %s/%d has entries not written after a flush", topic, id)
				}
			}
		}
	}
	at := s.writePos.Load()
	for topic, byID := range qs {
		if checkTopic(topic) != nil {
			continue
		}
		for id, rg := range byID {
			if id < 0 || rg.Max <= 0 {
				continue
			}
			q := s.queueOrCreate([]byte(topic), id)
			q.mu.Lock()
			switch {
			case q.deleted || q.max >= rg.Max:
			case len(q.files) == 0 && len(q.pending) == 0 && q.max == q.written:
				q.coldEnd.Store(rg.Max)
				q.min = min(max(rg.Min, 0, q.min), rg.Max)
				q.max, q.written, q.next = rg.Max, rg.Max, rg.Max
				resumed++
			default:
				// Entries below Max, all written and synced by the flush:
				// a hole after them, the next file starting at Max.
				q.jumpAt, q.jumpNext = at, rg.Max
				q.raiseToJumpLocked()
				resumed++
			}
			q.mu.Unlock()
		}
	}
	if resumed == 0 {
		return 0, nil
	}
	if err := s.saveRestoredLocked(); err != nil {
		return 0, s.restoredFailed(err)
	}
	return resumed, nil
}
