package restore

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

// CommitLogOf decodes cp's commitlog section (durability.SectionCommitLog);
// false when cp is nil or has none, or (with a warning) when it is
// unreadable.
func (j *Judge) CommitLogOf(cp *offsets.Checkpoint) (durability.CommitLog, bool) {
	if cp == nil {
		return durability.CommitLog{}, false
	}
	raw, ok := cp.Sections[durability.SectionCommitLog]
	if !ok {
		return durability.CommitLog{}, false
	}
	var st durability.CommitLog
	if err := json.Unmarshal(raw, &st); err != nil {
		j.log.Warn("checkpoint commitlog section unreadable", "err", err)
		return durability.CommitLog{}, false
	}
	return st, true
}

// Metadata writes the sections of the bucket's checkpoint cp named in
// files (section name -> file name: topics, subscription groups, consumer
// offsets) into configDir when the data dir is fresh, so the broker loads
// them as if they had always been local. Nothing when cp is nil or the
// data dir holds a log.
func (j *Judge) Metadata(configDir string, cp *offsets.Checkpoint, files map[string]string) error {
	if cp == nil || !j.Fresh() {
		return nil
	}
	for section, name := range files {
		raw, ok := cp.Sections[section]
		if !ok || len(raw) == 0 || string(raw) == "null" {
			continue
		}
		if !json.Valid(raw) {
			return fmt.Errorf("broker: checkpoint section %s is not JSON", section)
		}
		if err := offsets.WriteFileAtomic(j.fs, filepath.Join(configDir, name), raw); err != nil {
			return fmt.Errorf("broker: restore %s from the bucket: %w", name, err)
		}
	}
	j.log.Info("fresh data dir: topics, subscription groups and consumer offsets restored from the bucket checkpoint",
		"version", cp.Version, "writtenBy", cp.Writer.Instance, "host", cp.Writer.Host, "at", cp.Time)
	return nil
}

// Bucket is what a master's store on a fresh data dir restores from (Point).
type Bucket struct {
	// CommitLog is the checkpoint's commitlog section; HaveCP whether
	// there was one; Writer the checkpoint's writer.
	CommitLog durability.CommitLog
	HaveCP    bool
	Writer    offsets.Identity
	// ObjectsEnd is the end of the last commitlog object the bucket holds
	// (0: none).
	ObjectsEnd int64
	// QueueCounts is every checkpointed topic's queue count (called only
	// after an unclean stop that reserved offsets for new queues).
	QueueCounts func() map[string]int32
}

// Point is where a store on a fresh disk starts: its log begins past
// every offset the bucket's history may have handed out — the checkpoint's
// reservation, its high-water mark, and the end of every uploaded object —
// and its queues resume from the checkpoint (the store also reads the
// queue indexes uploaded after the checkpoint). Nil when the bucket holds
// nothing. A checkpoint that names offsets its writer never uploaded
// (DrainFailed) is refused unless STRATAMQ_ACCEPT_LOSS is set.
func (j *Judge) Point(in Bucket) (*store.Restore, error) {
	cl := in.CommitLog
	if dr := cl.DrainFailed; dr != nil && dr.To > dr.From {
		why := fmt.Sprintf("the broker that last wrote this prefix (%s) stopped without uploading everything", in.Writer)
		if !j.cfg.AcceptLoss {
			return nil, fmt.Errorf("broker: refusing to start on an empty data dir: %s: commitlog offsets [%d, %d) (%d bytes) "+
				"are only on its disk. Start that broker's data dir again so it uploads them, or set STRATAMQ_ACCEPT_LOSS=true "+
				"to start without them", why, dr.From, dr.To, dr.To-dr.From)
		}
		j.log.Error("STRATAMQ_ACCEPT_LOSS: starting without messages the last broker never uploaded",
			"reason", why, "from", dr.From, "to", dr.To, "bytes", dr.To-dr.From)
	}
	r := FreshPoint(in)
	if r == nil {
		return nil, nil
	}
	j.log.Info("fresh data dir: the commitlog resumes from the bucket", "logStart", r.CommitLogStart,
		"checkpointHWM", cl.HWM, "reserved", cl.Reserved, "uploadedEnd", in.ObjectsEnd, "queues", len(cl.Queues))
	return r, nil
}

// FreshPoint is Point's restore, without its refusal and its log: never
// below the bucket's end (the objects', the checkpoint's high-water mark
// and, after an unclean stop, its reservations). Nil when the bucket
// holds nothing.
func FreshPoint(in Bucket) *store.Restore {
	cl, objectsEnd := in.CommitLog, in.ObjectsEnd
	if !in.HaveCP && objectsEnd == 0 {
		return nil
	}
	start := max(cl.Reserved, cl.HWM, objectsEnd)
	if cl.Clean {
		start = max(cl.HWM, objectsEnd) // nothing was written after it
	}
	r := &store.Restore{
		CommitLogStart: start,
		Floor:          cl.Floor,
		IndexedFrom:    cl.HWM,
		Queues: queueRanges(cl.Queues, func(rg durability.QueueRange) store.QueueRange {
			mx := rg.Max
			if !cl.Clean {
				// Unclean loss: resume past every queue offset that may have
				// been handed out, so none is reused.
				mx = max(mx, rg.Reserved)
			}
			return store.QueueRange{Min: rg.Min, Max: mx}
		}),
		Deleted: tombstones(cl.Deleted),
	}
	if !cl.Clean && cl.NewQueueReserved > 0 {
		// Queues of checkpointed topics without messages at the checkpoint
		// may have been written up to NewQueueReserved since: they resume
		// there, and are read from 0 (what of them the bucket's segments
		// hold, uploaded after the checkpoint, is served; the rest is a
		// hole a consumer is sent past).
		for topic, n := range in.QueueCounts() {
			for q := int32(0); q < n; q++ {
				if _, ok := r.Queues[topic][q]; ok {
					continue
				}
				if r.Queues[topic] == nil {
					r.Queues[topic] = map[int32]store.QueueRange{}
				}
				r.Queues[topic][q] = store.QueueRange{Min: 0, Max: cl.NewQueueReserved}
			}
		}
	}
	return r
}

// ReplicaStart is U, where a slave's log starts: the End of the last
// commitlog object of the contiguous prefix (from the lowest base) of
// objects listed in m together with their queue index (a section of the
// object, or an object of its own before sections); a range per-topic
// retention deleted from the middle (Manifest.Expired) does not break the
// run.
func ReplicaStart(m *upload.Manifest) int64 {
	indexed := m.Indexes(upload.KindQueueIndex)
	run := m.Contiguous(func(o upload.Object) bool { _, ok := indexed[o.Base]; return !ok })
	if len(run) == 0 {
		return 0
	}
	return run[len(run)-1].End()
}

// ReplicaPoint is a slave's store restore (store.Restore.Replica): its
// log starts at U (ReplicaStart of the manifest m read at start), the end
// of the last uploaded segment, or at restartAt when the master's log
// starts past it; older offsets are served from the bucket; the floor and
// each queue's minimum come from the master's checkpoint's commitlog
// section cl. Nil when the bucket holds no segment yet (the slave streams
// from 0). The store keeps a local log that reaches U, and drops one that
// ends below it. An unreadable manifest (m nil) is an error.
func (j *Judge) ReplicaPoint(m *upload.Manifest, restartAt int64, cl durability.CommitLog) (*store.Restore, error) {
	if m == nil {
		return nil, fmt.Errorf("broker: STRATAMQ_ROLE=slave: the bucket manifest is not readable, so the slave cannot tell where its log starts (the end of the last uploaded segment); it must be readable at start")
	}
	u := ReplicaStart(m)
	indexed := u
	if restartAt > u {
		u = restartAt // the master's log starts there (StatusBeforeLogStart): [indexed, u) holds nothing
	}
	if u == 0 {
		return nil, nil
	}
	r := &store.Restore{Replica: true, CommitLogStart: u, Floor: min(cl.Floor, u), IndexedFrom: indexed, Gap: indexed < u,
		Queues:  queueRanges(cl.Queues, func(rg durability.QueueRange) store.QueueRange { return store.QueueRange{Min: rg.Min} }),
		Deleted: tombstones(cl.Deleted)}
	j.log.Info("slave: the log starts at the end of the master's last uploaded segment; older offsets are read from the bucket",
		"logStart", u, "floor", r.Floor, "queues", len(cl.Queues))
	return r, nil
}

// ReplicaCovered returns the sealed local segments that lie wholly inside
// the commitlog range of m's contiguous prefix (from the lowest base) of
// commitlog objects listed with their queue index: from the first such
// object's base to ReplicaStart's U. The slave's segments need not match
// the master's objects one for one (a master seals by age, a slave does
// not): only coverage counts.
func ReplicaCovered(segs []store.SegmentInfo, m *upload.Manifest) []store.SegmentInfo {
	cl := m.CommitLog()
	if len(cl) == 0 {
		return nil
	}
	lo, hi := cl[0].Base, ReplicaStart(m)
	var out []store.SegmentInfo
	for _, s := range segs {
		if s.Base >= lo && s.Base+s.Length <= hi {
			out = append(out, s)
		}
	}
	return out
}

// OffsetClamper is the consumer offset table as ClampOffsets moves it
// (offsets.ConsumerOffsets).
type OffsetClamper interface {
	Clamp(maxOf func(topic string, queueID int32) int64) int
}

// ClampOffsets moves consumer offsets that point past a queue's restored
// maximum (maxOf: messages of the lost unsealed tail) back to it, as
// RocketMQ treats a moved offset, so new messages are not skipped.
func (j *Judge) ClampOffsets(o OffsetClamper, maxOf func(topic string, queueID int32) int64) {
	if n := o.Clamp(maxOf); n > 0 {
		j.log.Warn("consumer offsets beyond the restored queue ends moved back", "count", n)
	}
}

// queueRanges is a checkpoint's queue ranges (queue ids as JSON keys) as
// the store's, each made by conv.
func queueRanges(qs map[string]map[string]durability.QueueRange, conv func(durability.QueueRange) store.QueueRange) map[string]map[int32]store.QueueRange {
	return byQueueID(qs, conv)
}

// tombstones is a checkpoint's Deleted as the store's.
func tombstones(d map[string]map[string]int64) map[string]map[int32]int64 {
	return byQueueID(d, func(next int64) int64 { return next })
}

// byQueueID rekeys a checkpoint's per-queue values (queue ids as JSON
// keys) by queue id, each made by conv; a key that is no queue id is
// skipped.
func byQueueID[V, W any](m map[string]map[string]V, conv func(V) W) map[string]map[int32]W {
	out := map[string]map[int32]W{}
	for topic, vs := range m {
		for q, v := range vs {
			id, err := strconv.Atoi(q)
			if err != nil {
				continue
			}
			if out[topic] == nil {
				out[topic] = map[int32]W{}
			}
			out[topic][int32(id)] = conv(v)
		}
	}
	return out
}

// MinsOnly is each checkpointed queue's Min, its Max left to the store
// (a restore that continues a log byte for byte: Restore.Replica).
func MinsOnly(qs map[string]map[string]durability.QueueRange) map[string]map[int32]store.QueueRange {
	return queueRanges(qs, func(rg durability.QueueRange) store.QueueRange { return store.QueueRange{Min: rg.Min} })
}

// Tombstones is the checkpoint's deleted queues by queue id (Restore.Deleted).
func Tombstones(d map[string]map[string]int64) map[string]map[int32]int64 { return tombstones(d) }
