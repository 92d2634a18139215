package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"

	"github.com/stratamq/stratamq/infra/vfs"
)

const (
	abortName      = "abort"
	checkpointName = "checkpoint"
	ckMagicV1      = "SMQCKPT1" // read only: no floor
	ckMagic        = "SMQCKPT2"
)

// queueMark is one queue's max offset as recorded in a checkpoint.
type queueMark struct {
	topic string
	id    int32
	max   int64
}

type checkpoint struct {
	seq        uint64
	dispatched int64 // commitlog and consumequeues durable up to here
	floor      int64 // retention floor (SetMinPhysOffset)
	queues     []queueMark
}

// writeCheckpoint replaces the checkpoint file atomically: temp file, fsync,
// rename, fsync of the directory.
//
//	"SMQCKPT2" seq:u64 dispatched:i64 floor:i64 n:u32
//	n × (topicLen:u16 topic id:i32 max:i64) crc32:u32
//
// ("SMQCKPT1" is the same without floor.)
func (s *Store) writeCheckpoint(dispatched int64, marks []queueMark) error {
	s.ckSeq++
	b := make([]byte, 0, 40+len(marks)*32)
	b = append(b, ckMagic...)
	b = binary.BigEndian.AppendUint64(b, s.ckSeq)
	b = binary.BigEndian.AppendUint64(b, uint64(dispatched))
	b = binary.BigEndian.AppendUint64(b, uint64(s.floor.Load()))
	b = binary.BigEndian.AppendUint32(b, uint32(len(marks)))
	for _, m := range marks {
		b = appendQueueKey(b, m.topic, m.id)
		b = binary.BigEndian.AppendUint64(b, uint64(m.max))
	}
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return s.writeStateFile(checkpointName, "checkpoint", b)
}

// readCheckpoint returns nil when there is no valid checkpoint.
func (s *Store) readCheckpoint() (*checkpoint, error) {
	b, err := s.readStateFile(checkpointName, "checkpoint")
	if b == nil || err != nil {
		return nil, err
	}
	ck, err := parseCheckpoint(b)
	if err != nil {
		s.log.Warn("store: ignoring bad checkpoint; recovering from the start of the log", "err", err)
		return nil, nil
	}
	return ck, nil
}

func parseCheckpoint(b []byte) (*checkpoint, error) {
	hdr := 28
	switch {
	case len(b) >= 8 && string(b[:8]) == ckMagic:
		hdr = 36
	case len(b) >= 8 && string(b[:8]) == ckMagicV1:
	default:
		return nil, corruptf("checkpoint header")
	}
	if len(b) < hdr+4 {
		return nil, corruptf("checkpoint header")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, corruptf("checkpoint CRC")
	}
	ck := &checkpoint{
		seq:        binary.BigEndian.Uint64(body[8:]),
		dispatched: int64(binary.BigEndian.Uint64(body[16:])),
	}
	if hdr == 36 {
		ck.floor = int64(binary.BigEndian.Uint64(body[24:]))
		if ck.floor < 0 {
			return nil, corruptf("checkpoint floor %d", ck.floor)
		}
	}
	n := int(binary.BigEndian.Uint32(body[hdr-4:]))
	p := body[hdr:]
	for range n {
		topic, id, f, rest, ok := cutQueueRow(p, 8)
		if !ok {
			return nil, corruptf("checkpoint queue table")
		}
		ck.queues = append(ck.queues, queueMark{topic: topic, id: id, max: int64(binary.BigEndian.Uint64(f))})
		p = rest
	}
	return ck, nil
}

// appendQueueKey appends the start of a row of the queue tables of the
// checkpoint and of the restore state (restore.go), topicLen:u16 topic
// id:i32, to b.
func appendQueueKey(b []byte, topic string, id int32) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(topic)))
	b = append(b, topic...)
	return binary.BigEndian.AppendUint32(b, uint32(id))
}

// cutQueueRow splits the row at the start of p, topicLen:u16 topic id:i32
// followed by size bytes of fields, off p: it returns the row's topic, id
// and fields and the rest of p; ok is false when p is too short for it.
func cutQueueRow(p []byte, size int) (topic string, id int32, fields, rest []byte, ok bool) {
	if len(p) < 2 {
		return "", 0, nil, nil, false
	}
	tl := int(binary.BigEndian.Uint16(p))
	if len(p) < 2+tl+4+size {
		return "", 0, nil, nil, false
	}
	end := 6 + tl + size
	return string(p[2 : 2+tl]), int32(binary.BigEndian.Uint32(p[2+tl:])), p[6+tl : end], p[end:], true
}

// writeStateFile replaces <Dir>/name with b atomically: temp file, fsync,
// rename, fsync of the directory. what names the file in errors.
func (s *Store) writeStateFile(name, what string, b []byte) error {
	if err := vfs.WriteFileAtomic(s.fs, filepath.Join(s.opts.Dir, name), b); err != nil {
		return fmt.Errorf("store: write %s: %w", what, err)
	}
	return nil
}

// readStateFile returns the bytes of <Dir>/name, nil when there is no such
// file. what names the file in errors.
func (s *Store) readStateFile(name, what string) ([]byte, error) {
	b, err := vfs.ReadFile(s.fs, filepath.Join(s.opts.Dir, name))
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", what, err)
	}
	return b, nil
}

// recover brings the store to a consistent state: the commitlog ends after
// its last valid record, and every consumequeue holds exactly the entries of
// the records in it.
func (s *Store) recover() error {
	fs := s.fs
	for _, d := range []string{s.clDir, s.cqDir} {
		if err := vfs.MkdirAllDurable(fs, d); err != nil {
			return fmt.Errorf("store: make dir %s: %w", d, err)
		}
	}
	_, err := fs.Stat(filepath.Join(s.opts.Dir, abortName))
	dirty := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: stat abort marker: %w", err)
	}

	segs, err := s.loadSegments()
	if err != nil {
		return err
	}
	ck, err := s.readCheckpoint()
	if err != nil {
		segs.close()
		return err
	}
	rs, err := s.readRestoreState()
	if err != nil {
		segs.close()
		return err
	}
	switch {
	case s.opts.Restore != nil && len(segs) == 0:
		if rs, err = s.restoreFromTier(ck); err != nil {
			return err
		}
		ck = nil // removed: it described a log that is gone
		if segs, err = s.loadSegments(); err != nil {
			return err
		}
	case s.opts.Restore != nil:
		s.log.Info("store: Options.Restore ignored: the store already has a commitlog", "dir", s.opts.Dir)
	}
	s.segs.Store(&segs)
	if err := s.loadQueues(); err != nil {
		return err
	}
	if rs != nil {
		s.installRestored(rs)
	}

	minPhys, end := int64(0), int64(0)
	if len(segs) > 0 {
		minPhys, end = segs[0].base, segs[len(segs)-1].end()
	} else if ck != nil && ck.dispatched > 0 || rs != nil && rs.logStart > 0 {
		// No local segment at all, yet the checkpoint says the log reached
		// ck.dispatched (everything dropped to the tier, or the files were
		// lost): continue there; offsets are never reused. The checkpoint
		// may be gone while the restore state says where the log started.
		minPhys = 0
		if ck != nil {
			minPhys = ck.dispatched
		}
		if rs != nil {
			minPhys = max(minPhys, rs.logStart)
		}
		s.log.Warn("store: no local commitlog segment; the log continues at the checkpoint or the restore point",
			"offset", minPhys, "checkpoint", ck != nil)
		end = minPhys
	}
	if minPhys > 0 {
		s.log.Info("store: local commitlog starts above 0; older bytes are read from the cold tier", "local_min", minPhys,
			"cold_tier", s.opts.Cold != nil)
	}
	from := minPhys
	if rs != nil {
		s.floor.Store(min(rs.floor, end))
	}
	if ck != nil {
		s.floor.Store(max(s.floor.Load(), min(ck.floor, end)))
		from = max(ck.dispatched, minPhys)
		if from > end {
			// The log lost checkpointed bytes: find record boundaries again
			// from the start of its last segment.
			s.log.Warn("store: commitlog shorter than the checkpoint", "checkpoint", ck.dispatched, "end", end)
			from = end
			if len(segs) > 0 {
				from = segs[len(segs)-1].base
			}
		}
		for _, m := range ck.queues {
			q := s.topics[m.topic][m.id]
			if q == nil || q.max < m.max {
				// Entries of records below the first local segment cannot be
				// rebuilt locally; entries the queue still has are kept.
				s.log.Warn("store: consumequeue shorter than checkpointed; rebuilding from the start of the local log",
					"topic", m.topic, "queue", m.id, "want", m.max, "from", minPhys)
				from = minPhys
				break
			}
		}
	}
	if dirty {
		s.log.Warn("store: unclean shutdown; recovering", "from", from, "end", end)
	}
	var lastTS int64
	var cur *segment
	valid, err := s.scanSegments(segs, from, func(m *recordMeta) error {
		lastTS = max(lastTS, m.storeTS)
		if cur == nil || m.physOffset < cur.base || m.physOffset >= cur.end() {
			cur = segs.find(m.physOffset)
		}
		if cur != nil {
			cur.noteTS(m.storeTS)
		}
		return s.dispatchMeta(m, s.tagsCode(m))
	})
	if len(segs) == 0 {
		valid = max(valid, end)
	}
	if err != nil {
		return err
	}
	if valid < end {
		if s.zeroTail(segs, valid, end) {
			// The zero-filled tail of the active segment (Options.ZeroAhead)
			// at a crash: the clean end of the log.
			s.log.Info("store: cutting the zero-filled tail of the commitlog", "at", valid, "bytes", end-valid)
		} else {
			s.log.Warn("store: truncating commitlog after the last valid record", "at", valid, "dropped_bytes", end-valid)
		}
		if err := s.truncateLog(valid); err != nil {
			return err
		}
	}
	if err := s.trimQueues(valid); err != nil {
		return err
	}
	if err := s.applyFloor(s.floor.Load(), nil); err != nil {
		return err
	}
	if err := s.loadQueueMins(); err != nil {
		return err
	}
	s.writePos.Store(valid)
	s.flushed.Store(from)
	s.mu.lastTS = lastTS
	if t := *s.segs.Load(); len(t) > 0 && t[len(t)-1].size.Load() == 0 {
		last := t[len(t)-1]
		last.sealed.Store(false)
		s.mu.active = last
	}

	f, err := fs.OpenFile(filepath.Join(s.opts.Dir, abortName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("store: create abort marker: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("store: create abort marker: %w", err)
	}
	if err := syncDir(fs, s.opts.Dir); err != nil {
		return err
	}
	if ck != nil {
		s.ckSeq = ck.seq
	}
	s.ckWritten = -1 // force a checkpoint of the recovered state
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if err := s.flushAllLocked(); err != nil && !errors.Is(err, ErrDiskFull) {
		return err
	}
	// Files a drop left before a crash stopped their reclaim.
	if s.cidx != nil {
		s.cidx.raiseLimit(s.LocalMinPhysOffset())
	}
	if err := s.reclaimLocked(); err != nil {
		s.reclaimDue = true
		s.log.Warn("store: reclaim consumequeue files at open; retrying", "err", err)
	}
	// Out of space, the store opens disk full: the flusher writes the
	// checkpoint once there is room, and Puts are refused until then.
	return nil
}

// loadQueues loads every consumequeue under consumequeue/<topic>/<queueId>/
// (listing and stat'ing its files; they open on first use).
func (s *Store) loadQueues() error {
	topics, err := s.fs.ReadDir(s.cqDir)
	if err != nil {
		return fmt.Errorf("store: list consumequeues: %w", err)
	}
	for _, topic := range topics {
		if s.skipQueueDir(topic) {
			continue
		}
		tdir := filepath.Join(s.cqDir, topic)
		ids, err := s.fs.ReadDir(tdir)
		if err != nil {
			return fmt.Errorf("store: list consumequeues: %w", err)
		}
		for _, name := range ids {
			id, err := strconv.ParseInt(name, 10, 32)
			if err != nil || id < 0 {
				continue
			}
			q, err := loadQueue(s.fs, s.fds, topic, int32(id), filepath.Join(tdir, name))
			if err != nil {
				return err
			}
			if s.topics[topic] == nil {
				s.topics[topic] = map[int32]*cqueue{}
			}
			s.topics[topic][int32(id)] = q
		}
	}
	return nil
}

// zeroTail reports whether the log bytes [from, end) are all zeros and in
// one segment (only the last segment can have a zero tail).
func (s *Store) zeroTail(t segTable, from, end int64) bool {
	sg := t.find(from)
	if sg == nil || sg.end() != end {
		return false
	}
	buf := make([]byte, min(end-from, 1<<20))
	for off := from; off < end; {
		b := buf[:min(int64(len(buf)), end-off)]
		if readFull(sg.f, b, off-sg.base) != nil {
			return false
		}
		for _, c := range b {
			if c != 0 {
				return false
			}
		}
		off += int64(len(b))
	}
	return true
}

// truncateLog cuts the commitlog at end: the segment holding it is
// truncated, later segments are removed.
func (s *Store) truncateLog(end int64) error {
	t := *s.segs.Load()
	keep := t[:0:0]
	removed := false
	for _, sg := range t {
		switch {
		case sg.base >= end && !(sg.base == end && len(keep) == 0):
			if err := sg.f.Close(); err != nil {
				return fmt.Errorf("store: close segment: %w", err)
			}
			if err := s.fs.Remove(sg.path); err != nil {
				return fmt.Errorf("store: remove segment: %w", err)
			}
			removed = true
		case sg.end() > end:
			if err := sg.f.Truncate(end - sg.base); err != nil {
				return fmt.Errorf("store: truncate segment: %w", err)
			}
			if err := sg.f.Sync(); err != nil {
				return fmt.Errorf("store: sync segment: %w", err)
			}
			sg.size.Store(end - sg.base)
			keep = append(keep, sg)
		default:
			keep = append(keep, sg)
		}
	}
	s.segs.Store(&keep)
	if removed {
		return syncDir(s.fs, s.clDir)
	}
	return nil
}

// trimQueues drops consumequeue entries that point at or past end (and
// trailing blanks and holes). A queue's jump (jumpNext: a promoted copy's
// numbering past the bucket's reservations) holds while only entries at or
// after it go: the queue still ends at least there. Dropping an entry below
// it (the log cut below the jump: this copy now follows a master that never
// had those records) drops the jump too, and the queue takes the new
// master's numbering from its records.
func (s *Store) trimQueues(end int64) error {
	for _, qs := range s.topics {
		for _, q := range qs {
			q.mu.RLock()
			mn, n, jumpNext := q.min, q.max, q.jumpNext
			q.mu.RUnlock()
			lo := max(mn, q.coldEnd.Load())
			below := false // an entry below the jump was dropped
			for n > lo {
				q.mu.RLock()
				hs, hole := q.holeStartLocked(n - 1)
				q.mu.RUnlock()
				if hole {
					n = max(hs, lo) // a gap between files holds no entry
					continue
				}
				e, ok, err := q.entryFrom(entrySource{}, n-1)
				if err != nil {
					return err
				}
				if ok && e.size > 0 && e.phys+int64(e.size) <= end {
					break
				}
				if ok && e.size > 0 && n-1 < jumpNext {
					below = true
				}
				n--
			}
			q.mu.Lock()
			if jumpNext > 0 {
				if below {
					q.jumpAt, q.jumpNext = 0, 0
					s.jumpsChanged.Store(true)
				} else {
					n = max(n, jumpNext)
					q.jumpAt = min(q.jumpAt, end) // segments ending past the log's new end come after the jump
				}
			}
			q.truncateLocked(n) // the files are cut by the flush that ends recovery
			q.next = q.max
			q.mu.Unlock()
		}
	}
	return nil
}
