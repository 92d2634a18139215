package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
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
// whose record was stored at or after tsMillis (the queue's max when every
// record is older; blanks and holes count as older). Store times grow
// along a queue, so this is a binary search reading store times (cold
// below the local log).
func (s *Store) QueueOffsetAtTime(ctx context.Context, topic string, queueID int32, tsMillis int64) (int64, error) {
	q := s.queue(topic, queueID)
	if q == nil {
		return 0, nil
	}
	lo, hi := q.bounds()
	for lo < hi {
		m := lo + (hi-lo)/2
		e, ok, err := s.entryAt(ctx, q, m)
		if err != nil {
			return 0, err
		}
		older := !ok || e.size == 0
		if !older {
			t, err := s.storeTimeAt(ctx, e)
			if err != nil {
				return 0, err
			}
			older = t < tsMillis
		}
		if older {
			lo = m + 1
		} else {
			hi = m
		}
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
// with local entries below Max keeps them and continues at Max after a
// hole (jumpQueueLocked); one already at or past Max is left as it is.
// The new ranges are durable when it returns (<Dir>/restored, re-applied on
// every Open, and the hole's marker file).
func (s *Store) ResumeQueues(qs map[string]map[int32]QueueRange) (resumed int, err error) {
	s.flushMu.Lock() // flushMu before mu, as DeleteTopic
	defer s.flushMu.Unlock()
	// The log, then every queue's entries, durable first: a jump is made
	// durable over entries whose records are.
	if err := s.flushAllLocked(); err != nil {
		return 0, err
	}
	if err := s.lockOpen(); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	type jump struct {
		q  *cqueue
		to int64
	}
	var jumps []jump
	cold := 0
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
				cold++
			default:
				jumps = append(jumps, jump{q, rg.Max})
			}
			q.mu.Unlock()
		}
	}
	for _, j := range jumps {
		if err := s.jumpQueueLocked(j.q, j.to); err != nil {
			return resumed, err
		}
		resumed++
	}
	resumed += cold
	if cold == 0 {
		return resumed, nil
	}
	if err := s.saveRestoredLocked(); err != nil {
		return 0, s.restoredFailed(err)
	}
	return resumed, nil
}

// jumpQueueLocked moves the end of q, a queue with local entries below to,
// to to without writing entries: its next entry is to, the offsets between
// are a hole (readers are sent past it, as over a missing file). It writes
// q's pending entries to its files, then creates an empty file named for
// to and syncs the directory: that file marks the jump across a restart
// (loadQueue: an empty last file that starts past the one before it is
// where the queue resumes), and the next entries are written to it. Caller
// holds flushMu and mu (no writer or flush runs meanwhile).
func (s *Store) jumpQueueLocked(q *cqueue, to int64) error {
	hadDir := q.dirMade
	touched, _, _, _, err := q.flushQueue(s.fs, int64(s.opts.CQEntriesPerFile), nil)
	if err != nil {
		return fmt.Errorf("store: jump queue %s/%d to %d: write its pending entries: %w", q.topic, q.id, to, err)
	}
	for _, f := range touched {
		if err := s.fds.sync(f); err != nil {
			return err
		}
	}
	if !hadDir && q.dirMade {
		for _, d := range []string{s.cqDir, filepath.Dir(q.dir)} {
			if err := syncDir(s.fs, d); err != nil {
				return err
			}
		}
	}
	q.mu.RLock()
	deleted, pending := q.deleted, len(q.pending)
	q.mu.RUnlock()
	if deleted {
		return nil
	}
	if pending != 0 {
		return fmt.Errorf("store: jump queue %s/%d to %d: %d bytes of entries still pending after a flush", q.topic, q.id, to, pending)
	}
	if !q.dirMade {
		if err := s.fs.MkdirAll(q.dir, 0o755); err != nil {
			return fmt.Errorf("store: make consumequeue dir: %w", err)
		}
		q.dirMade = true
		for _, d := range []string{s.cqDir, filepath.Dir(q.dir)} {
			if err := syncDir(s.fs, d); err != nil {
				return err
			}
		}
	}
	f := &cqFile{start: to, path: filepath.Join(q.dir, segmentName(to*cqEntrySize)), maxEnd: -1}
	h, err := s.fds.create(f)
	if err != nil {
		return err
	}
	s.fds.release(h)
	if err := syncDir(s.fs, q.dir); err != nil {
		return err
	}
	q.mu.Lock()
	q.files = append(q.files, f)
	q.max, q.written, q.next = to, to, to
	q.mu.Unlock()
	return nil
}
