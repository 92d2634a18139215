package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// Restore starts a store on an empty disk from what the tier holds: the
// commitlog's sealed segments (Options.Cold) and their index blobs
// (Options.ColdIndex). Nothing is downloaded at Open beyond the directories
// of the few index blobs past IndexedFrom.
type Restore struct {
	// CommitLogStart is the new log's first offset (its first segment is
	// named by it): past every offset ever handed out. Raised to the local
	// checkpoint's end if one is left over.
	CommitLogStart int64
	// Floor is the retention floor (as SetMinPhysOffset).
	Floor int64
	// IndexedFrom is the commitlog high-water mark of the checkpoint Queues
	// come from: entries of records at or above it are not in Queues. The
	// index blobs of the segments from the one holding IndexedFrom on (at
	// most restoreScanBlobs of them, the newest) raise each queue's Max and
	// add queues the checkpoint did not know.
	IndexedFrom int64
	// Gap (Replica): the master's log resumed past the bucket's end
	// (IndexedFrom) at CommitLogStart; nothing was written in between,
	// and the queues are as of IndexedFrom (none when it is 0).
	Gap bool
	// Queues is each queue's Min (first offset still retained) and Max (next
	// offset) at the checkpoint.
	Queues map[string]map[int32]QueueRange
	// Replica restores a slave that continues the master's log byte for
	// byte (AppendRaw of the master's records from CommitLogStart on)
	// instead of a master that continues it with new offsets:
	// CommitLogStart is exactly U, the end of the last uploaded segment
	// (never raised by a leftover checkpoint); every queue's next offset is
	// what the index blob of the segment ending at U says (its directory
	// lists every queue the master knew, zero-count entries included),
	// never the checkpoint's Max (later than U) nor older blobs; Queues
	// gives only each queue's Min. IndexedFrom is unused. U > 0 needs
	// Options.Cold and Options.ColdIndex, and the blob of the segment
	// ending at U, or Open fails. A replica whose local log ends below U
	// after recovery (it was down while the master uploaded [L, U)) drops
	// its local commitlog and consumequeues at Open and restores at U the
	// same way: every byte it drops is in the tier.
	Replica bool
	// Deleted is each deleted queue's tombstone (Store.Tombstones, kept in
	// the bucket's checkpoint): the offset its next incarnation starts at.
	// A queue the tier still describes below its tombstone is the deleted
	// incarnation's, and is not restored; one that continues past it (the
	// topic was created again) keeps only its offsets from there on.
	Deleted map[string]map[int32]int64
}

// QueueRange is a queue's [Min, Max) in a Restore.
type QueueRange struct {
	Min, Max int64
}

// restoreScanBlobs bounds the index blobs read at a restore.
const restoreScanBlobs = 4

const (
	restoreName    = "restored"
	restoreMagicV1 = "SMQRST01" // without tombstones
	restoreMagic   = "SMQRST02"
	restoreMagicV3 = "SMQRST03" // with jumps; written only when there is one
)

// restoreState is what a restore decided, kept in <Dir>/restored for the
// store's lifetime: the log's start, the floor, per restored queue its
// min and coldEnd (entries below coldEnd are read through the cold index),
// and the tombstones of deleted queues (tombstone.go).
type restoreState struct {
	logStart int64
	floor    int64
	queues   []restoredQueue // sorted by topic, id
	tombs    []tombstone     // sorted by topic, id
	jumps    []queueJump     // sorted by topic, id
}

// queueJump is a queue numbered from at least next once the log reached
// at (Store.ResumeQueues: a promoted copy numbering the queue past what
// the bucket's history may have handed out).
type queueJump struct {
	topic    string
	id       int32
	at, next int64
}

type restoredQueue struct {
	topic   string
	id      int32
	min     int64
	coldEnd int64
}

// encode: "SMQRST02" logStart:i64 floor:i64 n:u32
// n × (topicLen:u16 topic id:i32 min:i64 coldEnd:i64)
// m:u32 m × (topicLen:u16 topic id:i32 next:i64) crc32:u32
// ("SMQRST01", written before tombstones, ends after the n rows.
// "SMQRST03", written when a queue has a jump, adds before the CRC
// j:u32 j × (topicLen:u16 topic id:i32 at:i64 next:i64).)
func (r *restoreState) encode() []byte {
	be := binary.BigEndian
	magic := restoreMagic
	if len(r.jumps) > 0 {
		magic = restoreMagicV3
	}
	b := append([]byte(nil), magic...)
	b = be.AppendUint64(b, uint64(r.logStart))
	b = be.AppendUint64(b, uint64(r.floor))
	b = be.AppendUint32(b, uint32(len(r.queues)))
	for _, q := range r.queues {
		b = appendQueueKey(b, q.topic, q.id)
		b = be.AppendUint64(b, uint64(q.min))
		b = be.AppendUint64(b, uint64(q.coldEnd))
	}
	b = be.AppendUint32(b, uint32(len(r.tombs)))
	for _, t := range r.tombs {
		b = appendQueueKey(b, t.topic, t.id)
		b = be.AppendUint64(b, uint64(t.next))
	}
	if len(r.jumps) > 0 {
		b = be.AppendUint32(b, uint32(len(r.jumps)))
		for _, j := range r.jumps {
			b = appendQueueKey(b, j.topic, j.id)
			b = be.AppendUint64(b, uint64(j.at))
			b = be.AppendUint64(b, uint64(j.next))
		}
	}
	return be.AppendUint32(b, crc32.ChecksumIEEE(b))
}

func parseRestoreState(b []byte) (*restoreState, error) {
	be := binary.BigEndian
	magic := string(b[:min(len(b), 8)])
	if len(b) < 32 || magic != restoreMagic && magic != restoreMagicV1 && magic != restoreMagicV3 {
		return nil, corruptf("restore state header")
	}
	body := b[:len(b)-4]
	if crc32.ChecksumIEEE(body) != be.Uint32(b[len(b)-4:]) {
		return nil, corruptf("restore state CRC")
	}
	r := &restoreState{logStart: int64(be.Uint64(body[8:])), floor: int64(be.Uint64(body[16:]))}
	n := int(be.Uint32(body[24:]))
	p := body[28:]
	for range n {
		topic, id, f, rest, ok := cutQueueRow(p, 16)
		if !ok {
			return nil, corruptf("restore state queue table")
		}
		r.queues = append(r.queues, restoredQueue{topic: topic, id: id, min: int64(be.Uint64(f)), coldEnd: int64(be.Uint64(f[8:]))})
		p = rest
	}
	if magic != restoreMagicV1 {
		if len(p) < 4 {
			return nil, corruptf("restore state tombstone count")
		}
		m := int(be.Uint32(p))
		p = p[4:]
		for range m {
			topic, id, f, rest, ok := cutQueueRow(p, 8)
			if !ok {
				return nil, corruptf("restore state tombstone table")
			}
			r.tombs = append(r.tombs, tombstone{topic: topic, id: id, next: int64(be.Uint64(f))})
			p = rest
		}
	}
	if magic == restoreMagicV3 {
		if len(p) < 4 {
			return nil, corruptf("restore state jump count")
		}
		m := int(be.Uint32(p))
		p = p[4:]
		for range m {
			topic, id, f, rest, ok := cutQueueRow(p, 16)
			if !ok {
				return nil, corruptf("restore state jump table")
			}
			r.jumps = append(r.jumps, queueJump{topic: topic, id: id, at: int64(be.Uint64(f)), next: int64(be.Uint64(f[8:]))})
			p = rest
		}
	}
	if len(p) != 0 {
		return nil, corruptf("restore state trailing bytes")
	}
	return r, nil
}

// writeRestoreState replaces <Dir>/restored atomically (temp, fsync,
// rename, dir fsync).
func (s *Store) writeRestoreState(r *restoreState) error {
	return s.writeStateFile(restoreName, "restore state", r.encode())
}

// readRestoreState returns nil when the store was never restored. A
// damaged file is an error: without it old offsets would be lost silently
// (unlike a damaged checkpoint, which readCheckpoint ignores: recovery
// rebuilds what it held from the log).
func (s *Store) readRestoreState() (*restoreState, error) {
	b, err := s.readStateFile(restoreName, "restore state")
	if b == nil || err != nil {
		return nil, err
	}
	r, err := parseRestoreState(b)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", filepath.Join(s.opts.Dir, restoreName), err)
	}
	return r, nil
}

// restoreFromTier runs on an empty commitlog with Options.Restore set: it
// decides each queue's range, records it in <Dir>/restored, removes stale
// consumequeues and checkpoint, and creates the first segment at the
// log's start (its durable name marks the restore as done; a crash before
// it repeats the restore).
func (s *Store) restoreFromTier(ck *checkpoint) (*restoreState, error) {
	r := s.opts.Restore
	start := max(r.CommitLogStart, 0)
	if r.Replica {
		if ck != nil && ck.dispatched != start {
			s.log.Info("store: replica restore: ignoring a leftover checkpoint; the master's log continues at the restore point",
				"commit_log_start", start, "checkpoint", ck.dispatched)
		}
	} else if ck != nil && ck.dispatched > start {
		s.log.Warn("store: restore: a local checkpoint says the log reached further; starting there",
			"commit_log_start", start, "checkpoint", ck.dispatched)
		start = ck.dispatched
	}
	qs := map[qkey]*restoredQueue{}
	for topic, m := range r.Queues {
		if topic == "" || len(topic) > MaxTopicLen {
			return nil, fmt.Errorf("store: restore: bad topic %q", topic)
		}
		for id, qr := range m {
			if id < 0 || qr.Max <= 0 {
				continue
			}
			qs[qkey{topic, id}] = &restoredQueue{topic: topic, id: id, min: min(max(qr.Min, 0), qr.Max), coldEnd: qr.Max}
		}
	}
	blobs := 0
	if r.Replica {
		// IndexedFrom below start: the master's log resumed past the
		// bucket's end, leaving offsets nothing was written at; the queues
		// are as of the bucket's end (IndexedFrom), and the master's
		// records carry the queue offsets it resumed at.
		at := start
		if r.Gap && r.IndexedFrom < start {
			at = max(r.IndexedFrom, 0) // 0: nothing was uploaded below the gap
		}

		var err error
		if qs, blobs, err = s.replicaQueues(at); err != nil {
			return nil, err
		}
	} else if s.opts.ColdIndex != nil {
		s.cidx.setLimit(start)
		ctx := context.Background()
		bases, err := s.cidx.segments(ctx, 0)
		if err != nil {
			return nil, fmt.Errorf("store: restore: %w", err)
		}
		// From the segment holding IndexedFrom (the last base <= it) on.
		i, found := slices.BinarySearch(bases, r.IndexedFrom)
		if !found && i > 0 {
			i--
		}
		all := i >= len(bases)-restoreScanBlobs // every blob past the checkpoint is read
		i = max(i, len(bases)-restoreScanBlobs)
		for _, base := range bases[i:] {
			x, err := s.cidx.dir(ctx, base, nil)
			if err != nil {
				return nil, fmt.Errorf("store: restore: %w", err)
			}
			blobs++
			for _, dq := range x.Queues {
				k := qkey{dq.Topic, dq.QueueID}
				rq := qs[k]
				if rq == nil {
					// Unknown to the checkpoint: created after it, so it
					// starts where its first record past the checkpoint is
					// when that was read, else at 0.
					rq = &restoredQueue{topic: dq.Topic, id: dq.QueueID}
					if all && dq.Count > 0 {
						rq.min = dq.FirstOffset
					}
					qs[k] = rq
				}
				rq.coldEnd = max(rq.coldEnd, dq.End())
			}
		}
	}
	st := &restoreState{logStart: start, floor: min(max(r.Floor, 0), start), tombs: tombsOf(r.Deleted)}
	dropTombstoned(qs, st.tombs)
	for _, q := range qs {
		if q.coldEnd > 0 {
			st.queues = append(st.queues, *q)
		}
	}
	slices.SortFunc(st.queues, func(a, b restoredQueue) int {
		return compareQKey(qkey{a.topic, a.id}, qkey{b.topic, b.id})
	})

	// Leftovers describe a log that is gone: the tier is the record now.
	if names, err := s.fs.ReadDir(s.cqDir); err != nil {
		return nil, fmt.Errorf("store: restore: list consumequeues: %w", err)
	} else if len(names) > 0 {
		s.log.Warn("store: restore: removing consumequeues left without a commitlog", "topics", len(names))
		for _, n := range names {
			if err := s.fs.RemoveAll(filepath.Join(s.cqDir, n)); err != nil {
				return nil, fmt.Errorf("store: restore: %w", err)
			}
		}
		if err := syncDir(s.fs, s.cqDir); err != nil {
			return nil, err
		}
	}
	if ck != nil {
		if err := s.fs.Remove(filepath.Join(s.opts.Dir, checkpointName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("store: restore: remove stale checkpoint: %w", err)
		}
	}
	if err := s.writeRestoreState(st); err != nil {
		return nil, err
	}
	f, err := s.fs.OpenFile(filepath.Join(s.clDir, segmentName(start)), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: restore: create segment: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("store: restore: create segment: %w", err)
	}
	if err := syncDir(s.fs, s.clDir); err != nil {
		return nil, err
	}
	s.log.Info("store: restored from the tier", "commit_log_start", start, "floor", st.floor,
		"queues", len(st.queues), "index_blobs_read", blobs)
	return st, nil
}

// replicaQueues decides the queues of a replica restored at u (see
// Restore.Replica): each queue's next offset is its End in the directory of
// the index blob of the segment ending at u, its min the checkpoint's Min
// (capped there), else 0. It returns the blobs read.
func (s *Store) replicaQueues(u int64) (map[qkey]*restoredQueue, int, error) {
	qs := map[qkey]*restoredQueue{}
	if u == 0 {
		return qs, 0, nil // nothing uploaded: the master's log starts here
	}
	if s.opts.Cold == nil || s.cidx == nil {
		return nil, 0, fmt.Errorf("store: replica restore at %d: the cold tier (Options.Cold and Options.ColdIndex) must serve [0, %d)", u, u)
	}
	ctx := context.Background()
	s.cidx.setLimit(u)
	bases, err := s.cidx.segments(ctx, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("store: replica restore: %w", err)
	}
	if len(bases) == 0 {
		return nil, 0, fmt.Errorf("store: replica restore at %d: the tier holds no segment index below it", u)
	}
	x, err := s.cidx.dir(ctx, bases[len(bases)-1], nil)
	if err != nil {
		return nil, 1, fmt.Errorf("store: replica restore: %w", err)
	}
	if x.Base+x.Length != u {
		return nil, 1, fmt.Errorf("store: replica restore at %d: the newest segment index below it is of [%d, %d), which does not end there (index blob missing, or a wrong restore point)",
			u, x.Base, x.Base+x.Length)
	}
	for _, dq := range x.Queues {
		if dq.Topic == "" || len(dq.Topic) > MaxTopicLen || dq.QueueID < 0 {
			continue
		}
		end := dq.End()
		rq := &restoredQueue{topic: dq.Topic, id: dq.QueueID, coldEnd: end}
		if qr, ok := s.opts.Restore.Queues[dq.Topic][dq.QueueID]; ok {
			rq.min = min(max(qr.Min, 0), end)
		}
		qs[qkey{dq.Topic, dq.QueueID}] = rq
	}
	return qs, 1, nil
}

// replicaLagging reports whether s, just recovered, is a replica
// (Restore.Replica) whose local log ends below the restore point: the
// master uploaded what it missed.
func (s *Store) replicaLagging() bool {
	r := s.opts.Restore
	return r != nil && r.Replica && s.writePos.Load() < r.CommitLogStart
}

// discardLocalLog removes every commitlog segment file (s's files are
// closed), so that the next Open restores. The consumequeues, checkpoint
// and restore state left over are replaced by that restore; a crash
// meanwhile leaves a log that still lags, or none: either way the next
// Open discards or restores again.
func (s *Store) discardLocalLog() error {
	names, err := s.fs.ReadDir(s.clDir)
	if err != nil {
		return fmt.Errorf("store: replica: list commitlog: %w", err)
	}
	for _, n := range names {
		if err := s.fs.Remove(filepath.Join(s.clDir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("store: replica: remove lagging segment: %w", err)
		}
	}
	return syncDir(s.fs, s.clDir)
}

// installRestored applies the cold state read at Open (<Dir>/restored:
// a restore's decision, and the coldEnd every reclaim raised since): each
// queue it names gets its coldEnd (entries below come from the cold
// index) and its min. Local files wholly below coldEnd (a crash between
// the state's write and their removal) leave the queue's file list and are
// removed by the flush that ends recovery (reclaim.go).
func (s *Store) installRestored(rs *restoreState) {
	s.restored = rs
	if s.cidx != nil {
		s.cidx.setLimit(rs.logStart)
	}
	for _, r := range rs.queues {
		if checkTopic(r.topic) != nil {
			continue // never dispatched (names.go): nothing to serve
		}
		s.installCold(s.queueOrCreate([]byte(r.topic), r.id), r.min, r.coldEnd)
	}
	s.installTombs(rs.tombs)
	for _, j := range rs.jumps {
		if checkTopic(j.topic) != nil || j.id < 0 || j.next <= 0 {
			continue
		}
		q := s.queueOrCreate([]byte(j.topic), j.id)
		q.mu.Lock()
		q.jumpAt, q.jumpNext = j.at, j.next
		q.raiseToJumpLocked()
		q.mu.Unlock()
	}
}

// installCold gives q, at Open, a cold range below coldEnd (raised, never
// lowered) and the min mn. Local files wholly below coldEnd leave q's file
// list, for the flush that ends recovery to remove. A queue with no file
// left whose entries end by coldEnd becomes [mn, coldEnd), all of it cold;
// otherwise its min is mn when mn is in the cold range, else at least mn.
func (s *Store) installCold(q *cqueue, mn, coldEnd int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.files) > 0 && q.files[0].start+q.files[0].n <= coldEnd {
		s.reclaimed = append(s.reclaimed, reclaimFile{q: q, f: q.files[0]})
		q.files = q.files[1:]
	}
	if q.coldEnd.Load() < coldEnd {
		q.coldEnd.Store(coldEnd)
	}
	switch {
	case len(q.files) == 0 && q.max <= coldEnd:
		q.pending = nil
		q.min, q.max, q.written = mn, coldEnd, coldEnd
	case mn < coldEnd:
		q.min = mn
	default:
		q.min = max(q.min, mn)
	}
	q.next = q.max
}

// saveRestoredLocked rewrites <Dir>/restored when the cold state changed:
// every queue with a cold range (coldEnd > 0: restored, or reclaimed) with
// its current min and coldEnd (deleted topics dropped), the floor, and
// the restore's log start (0 for a store never restored). A store that was
// never restored and has no cold range writes nothing. Caller holds
// flushMu.
func (s *Store) saveRestoredLocked() error {
	rs := s.restored
	nr := &restoreState{floor: s.floor.Load()}
	old := map[qkey]int64{}
	if rs != nil {
		nr.logStart, nr.floor = rs.logStart, max(rs.floor, nr.floor)
		for _, r := range rs.queues {
			old[qkey{r.topic, r.id}] = r.min
		}
	}
	for _, q := range s.allQueues() {
		q.mu.RLock()
		deleted, mn, ce := q.deleted, q.min, q.coldEnd.Load()
		jump := queueJump{topic: q.topic, id: q.id, at: q.jumpAt, next: q.jumpNext}
		q.mu.RUnlock()
		if !deleted && jump.next > 0 {
			nr.jumps = append(nr.jumps, jump)
		}
		if deleted || ce <= 0 {
			continue
		}
		if m, ok := old[qkey{q.topic, q.id}]; ok {
			mn = max(mn, m) // mins never move back
		}
		nr.queues = append(nr.queues, restoredQueue{topic: q.topic, id: q.id, min: mn, coldEnd: ce})
	}
	nr.tombs = s.tombList()
	if rs == nil && len(nr.queues) == 0 && len(nr.tombs) == 0 && len(nr.jumps) == 0 {
		return nil
	}
	slices.SortFunc(nr.queues, func(a, b restoredQueue) int {
		return compareQKey(qkey{a.topic, a.id}, qkey{b.topic, b.id})
	})
	slices.SortFunc(nr.jumps, func(a, b queueJump) int {
		return compareQKey(qkey{a.topic, a.id}, qkey{b.topic, b.id})
	})
	if rs != nil && rs.logStart == nr.logStart && rs.floor == nr.floor && slices.Equal(rs.queues, nr.queues) &&
		slices.Equal(rs.tombs, nr.tombs) && slices.Equal(rs.jumps, nr.jumps) {
		return nil
	}
	if err := s.writeRestoreState(nr); err != nil {
		return err
	}
	s.restored = nr
	return nil
}

// coldEntries reads up to n entries of q from idx (< ce, q's coldEnd when
// the read was planned) through the cold index, from one block of one
// segment (callers loop). hole: no indexed segment holds idx (next is
// then ce), or idx lies in a gap of the cold index's list (a segment not
// listed: next is the queue's first offset after it, at most ce).
func (s *Store) coldEntries(ctx context.Context, q *cqueue, ce int64, dst []byte, idx int64, n int) (got int, hole bool, next int64, err error) {
	n = int(min(int64(n), ce-idx))
	if n <= 0 {
		return 0, false, 0, nil
	}
	if s.cidx == nil {
		return 0, true, ce, nil
	}
	got, hole, next, err = s.cidx.entries(ctx, s.floor.Load(), q.topic, q.id, dst, idx, n)
	if hole && (next < 0 || next > ce) {
		next = ce // past the indexed segments, or the rest is local
	}
	return got, hole, next, err
}

// entryAt returns q's entry at idx, cold below q.coldEnd; ok is false in a
// hole.
func (s *Store) entryAt(ctx context.Context, q *cqueue, idx int64) (cqEntry, bool, error) {
	return q.entryFrom(entrySource{cold: s, ctx: ctx}, idx)
}

// firstEntryFrom returns the first non-blank entry of q at an index >= i
// (cold, then local), skipping blanks and holes; ok is false when there is
// none before q.max.
func (s *Store) firstEntryFrom(ctx context.Context, q *cqueue, i int64) (idx int64, e cqEntry, ok bool, err error) {
	return q.firstEntryIn(entrySource{cold: s, ctx: ctx}, i, math.MaxInt64)
}

// advanceMin moves the min of a queue (a restored one whose min is below
// its coldEnd too) past the entries below floor, searching cold and local
// entries without holding the queue's lock (entries below the floor never
// change).
func (s *Store) advanceMin(ctx context.Context, q *cqueue, floor int64) error {
	lo, hi := q.bounds()
	j, ok, err := searchFloor(lo, hi, floor, func(i int64) (int64, cqEntry, bool, error) {
		return s.firstEntryFrom(ctx, q, i)
	})
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !ok {
		j = q.max
	}
	if j > q.min {
		q.min = j
	}
	return nil
}
