package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

// storeIsFresh reports whether the data dir holds no commitlog: a new
// machine, or a wiped disk.
func (b *Broker) storeIsFresh() bool {
	names, err := b.fs.ReadDir(filepath.Join(b.cfg.DataDir, "store", "commitlog"))
	return err != nil || len(names) == 0
}

// restoreMetadata writes topics, subscription groups and consumer offsets
// from the bucket's checkpoint cp into the config directory when the data
// dir is fresh, so the managers load them as if they had always been local.
func (b *Broker) restoreMetadata(configDir string, cp *offsets.Checkpoint) error {
	if cp == nil || !b.storeIsFresh() {
		return nil
	}
	files := map[string]string{
		sectionTopics:             topicsFile,
		sectionSubscriptionGroups: subscriptionGroupFile,
		sectionConsumerOffsets:    offsets.ConsumerOffsetsFile,
	}
	for section, name := range files {
		raw, ok := cp.Sections[section]
		if !ok || len(raw) == 0 || string(raw) == "null" {
			continue
		}
		if !json.Valid(raw) {
			return fmt.Errorf("broker: checkpoint section %s is not JSON", section)
		}
		if err := offsets.WriteFileAtomic(b.fs, filepath.Join(configDir, name), raw); err != nil {
			return fmt.Errorf("broker: restore %s from the bucket: %w", name, err)
		}
	}
	b.log.Info("fresh data dir: topics, subscription groups and consumer offsets restored from the bucket checkpoint",
		"version", cp.Version, "writtenBy", cp.Writer.Instance, "host", cp.Writer.Host, "at", cp.Time)
	return nil
}

// restoredCommitLog decodes the checkpoint's commitlog section.
func (b *Broker) restoredCommitLog() (commitLogState, bool) {
	if b.dur == nil {
		return commitLogState{}, false
	}
	return b.commitLogOf(b.dur.loaded)
}

// commitLogOf decodes cp's commitlog section.
func (b *Broker) commitLogOf(cp *offsets.Checkpoint) (commitLogState, bool) {
	if cp == nil {
		return commitLogState{}, false
	}
	raw, ok := cp.Sections[sectionCommitLog]
	if !ok {
		return commitLogState{}, false
	}
	var st commitLogState
	if err := json.Unmarshal(raw, &st); err != nil {
		b.log.Warn("checkpoint commitlog section unreadable", "err", err)
		return commitLogState{}, false
	}
	return st, true
}

// restorePoint is where a store on a fresh disk starts: its log begins past
// every offset the bucket's history may have handed out — the checkpoint's
// reservation, its high-water mark, and the end of every uploaded object —
// and its queues resume from the checkpoint (the store also reads the queue
// indexes uploaded after the checkpoint). Nil when the bucket holds nothing.
func (b *Broker) restorePoint() (*store.Restore, error) {
	cl, haveCP := b.restoredCommitLog()
	if dr := cl.DrainFailed; dr != nil && dr.To > dr.From {
		why := fmt.Sprintf("the broker that last wrote this prefix (%s) stopped without uploading everything", b.dur.loaded.Writer)
		if !b.cfg.AcceptLoss {
			return nil, fmt.Errorf("broker: refusing to start on an empty data dir: %s: commitlog offsets [%d, %d) (%d bytes) "+
				"are only on its disk. Start that broker's data dir again so it uploads them, or set STRATAMQ_ACCEPT_LOSS=true "+
				"to start without them", why, dr.From, dr.To, dr.To-dr.From)
		}
		b.log.Error("STRATAMQ_ACCEPT_LOSS: starting without messages the last broker never uploaded",
			"reason", why, "from", dr.From, "to", dr.To, "bytes", dr.To-dr.From)
	}
	var objectsEnd int64
	if m := b.tier.Uploader().Manifest(); m != nil {
		for _, o := range m.CommitLog() {
			objectsEnd = max(objectsEnd, o.End())
		}
	} else if objs := b.tier.Cold().Objects(); len(objs) > 0 {
		objectsEnd = objs[len(objs)-1].End()
	}
	if !haveCP && objectsEnd == 0 {
		return nil, nil
	}
	start := max(cl.Reserved, cl.HWM, objectsEnd)
	if cl.Clean {
		start = max(cl.HWM, objectsEnd) // nothing was written after it
	}
	r := &store.Restore{
		CommitLogStart: start,
		Floor:          cl.Floor,
		IndexedFrom:    cl.HWM,
		Queues: queueRanges(cl.Queues, func(rg queueRangeJSON) store.QueueRange {
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
		// may have been written up to NewQueueReserved since.
		for topic, n := range b.topics.QueueCounts() {
			for q := int32(0); q < n; q++ {
				if _, ok := r.Queues[topic][q]; ok {
					continue
				}
				if r.Queues[topic] == nil {
					r.Queues[topic] = map[int32]store.QueueRange{}
				}
				r.Queues[topic][q] = store.QueueRange{Min: cl.NewQueueReserved, Max: cl.NewQueueReserved}
			}
		}
	}
	b.log.Info("fresh data dir: the commitlog resumes from the bucket", "logStart", r.CommitLogStart,
		"checkpointHWM", cl.HWM, "reserved", cl.Reserved, "uploadedEnd", objectsEnd, "queues", len(cl.Queues))
	return r, nil
}

// readReplicaCheckpoint is a slave's read-only look at the master's bucket
// checkpoint (no lease, no Load that would adopt it for writing): nil, with
// a warning, when it is missing or unreadable.
func (b *Broker) readReplicaCheckpoint() *offsets.Checkpoint {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp, err := offsets.ReadCheckpoint(ctx, newCheckpointStore(b.scoped))
	if err != nil {
		b.log.Warn("slave: the master's bucket checkpoint is not readable; starting without its floor and queue minima", "err", err)
		return nil
	}
	return cp
}

// replicaStart is U, where a slave's log starts: the End of the last
// commitlog object of the contiguous prefix (from the lowest base) of
// objects listed in m together with their queue index (a section of the
// object, or an object of its own before sections); a range per-topic
// retention deleted from the middle (Manifest.Expired) does not break the
// run.
func replicaStart(m *upload.Manifest) int64 {
	indexed := m.Indexes(upload.KindQueueIndex)
	run := m.Contiguous(func(o upload.Object) bool { _, ok := indexed[o.Base]; return !ok })
	if len(run) == 0 {
		return 0
	}
	return run[len(run)-1].End()
}

// replicaRestorePoint is a slave's store restore (store.Restore.Replica):
// its log starts at U, the end of the last uploaded segment, and older
// offsets are served from the bucket; the floor and each queue's minimum
// come from the checkpoint cp if any. Nil when the bucket holds no segment
// yet (the slave streams from 0). The store keeps a local log that reaches
// U, and drops one that ends below it.
func (b *Broker) replicaRestorePoint(cp *offsets.Checkpoint) (*store.Restore, error) {
	m := b.tier.AtStart()
	if m == nil {
		return nil, fmt.Errorf("broker: STRATAMQ_ROLE=slave: the bucket manifest is not readable, so the slave cannot tell where its log starts (the end of the last uploaded segment); it must be readable at start")
	}
	u := replicaStart(m)
	indexed := u
	if b.restartAt > u {
		u = b.restartAt // the master's log starts there (StatusBeforeLogStart): [indexed, u) holds nothing
	}
	if u == 0 {
		return nil, nil
	}
	cl, _ := b.commitLogOf(cp)
	r := &store.Restore{Replica: true, CommitLogStart: u, Floor: min(cl.Floor, u), IndexedFrom: indexed, Gap: indexed < u,
		Queues:  queueRanges(cl.Queues, func(rg queueRangeJSON) store.QueueRange { return store.QueueRange{Min: rg.Min} }),
		Deleted: tombstones(cl.Deleted)}
	b.log.Info("slave: the log starts at the end of the master's last uploaded segment; older offsets are read from the bucket",
		"logStart", u, "floor", r.Floor, "queues", len(cl.Queues))
	return r, nil
}

// queueRanges is a checkpoint's queue ranges (queue ids as JSON keys) as
// the store's, each made by conv.
func queueRanges(qs map[string]map[string]queueRangeJSON, conv func(queueRangeJSON) store.QueueRange) map[string]map[int32]store.QueueRange {
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

// afterRestore moves consumer offsets that point past a queue's restored
// maximum (messages of the lost unsealed tail) back to it, as RocketMQ
// treats a moved offset, so new messages are not skipped.
func (b *Broker) afterRestore(r *store.Restore) {
	n := b.offsets.Clamp(func(topic string, q int32) int64 { return b.store.MaxQueueOffset(topic, q) })
	if n > 0 {
		b.log.Warn("consumer offsets beyond the restored queue ends moved back", "count", n)
	}
}

// checkLocalData decides, before the store opens, whether a non-empty data
// dir's log may be served. It is ours to serve when this data dir wrote the
// prefix last: the epoch it recorded (writer.json) is at least the epoch
// stamped into the bucket's checkpoint. Otherwise another broker has
// written the prefix since (it restored from the bucket and carried on),
// and the two histories must not mix: the local data is set aside (renamed
// store.stale-*, never deleted) and the broker restores from the bucket,
// but only when the bucket holds every local segment. If local segments
// hold messages the bucket lacks, the broker refuses to start, naming the
// range, unless STRATAMQ_ACCEPT_LOSS is set. Lengths are never compared
// to guess who wrote last: after a power loss an async log is legitimately
// shorter than its page-cache end. It returns the bucket manifest it
// read (nil when the data dir is fresh) for newTiering.
func (b *Broker) checkLocalData() (*upload.Manifest, error) {
	if b.storeIsFresh() {
		return nil, nil
	}
	d := b.dur
	cl, haveCP := b.restoredCommitLog()
	var cpEpoch int64
	var writer offsets.Identity
	if d.loaded != nil {
		cpEpoch, writer = d.loaded.Writer.Epoch, d.loaded.Writer
	}
	// The manifest carries the epoch of its writer too: a broker that
	// took over may have uploaded before its first checkpoint landed.
	m, err := b.loadManifest()
	if err != nil {
		return nil, fmt.Errorf("broker: read the bucket manifest to check the local data dir against it: %w", err)
	}
	if m.Epoch > cpEpoch && m.Epoch != d.id.Epoch { // our own epoch: our claim (readManifest)
		cpEpoch = m.Epoch
		writer = offsets.Identity{Broker: b.cfg.BrokerName, Instance: "(unknown: manifest writer)", Epoch: m.Epoch}
	}
	clDir := filepath.Join(b.cfg.DataDir, "store", "commitlog")
	segs, err := localSegmentFiles(b.fs, clDir, int(b.cfg.MaxMessageSize))
	if err != nil {
		return nil, err
	}
	var localEnd int64
	if n := len(segs); n > 0 {
		localEnd = segs[n-1].base + segs[n-1].size
	}
	prev := d.prev
	switch {
	case prev != nil && prev.Replica && prev.Epoch >= cpEpoch:
		// A slave's copy of the log of the epoch the bucket was last
		// written under, now promoted (failover.go). It is ours to serve
		// when it reaches the end of what the bucket holds; a copy that
		// lags it is set aside and the broker restores from the bucket
		// (the bucket's bytes are newer, and maybe acknowledged).
		var end int64
		for _, o := range m.CommitLog() {
			end = max(end, o.End())
		}
		if localEnd < end {
			why := fmt.Sprintf("this slave's copy of the log ends at offset %d, before the end %d of what the master uploaded", localEnd, end)
			// A copy is set aside only if the bucket holds all of it that
			// retention kept: a segment the master never got listed (its
			// upload failed, or a later one's delta landed first) may be
			// on this disk alone, acknowledged (DESIGN §8).
			floor := int64(0)
			if haveCP {
				floor = cl.Floor
			}
			if gap := bucketGap(m, segs, floor); gap != nil {
				return m, b.refuseOrSetAside(why+", and it holds offsets no bucket object holds", *gap, true)
			}
			return m, b.setAside(why)
		}
		b.promotedReplica = true
		return m, nil
	case prev != nil && prev.Instance == d.id.Instance && prev.Epoch >= cpEpoch:
		// We wrote the prefix last. The durable end we checkpointed must
		// still be here (it was fdatasynced): a shorter log means the disk
		// lost acknowledged data, and writing on would reuse offsets.
		if haveCP && localEnd < cl.HWM {
			return m, b.refuseOrSetAside(fmt.Sprintf("the local commitlog ends at offset %d, before the durable end %d this broker "+
				"checkpointed (epoch %d): the disk lost data it had synced, and writing on would reuse offsets", localEnd, cl.HWM, prev.Epoch),
				offsetRange{From: localEnd, To: cl.HWM}, false)
		}
		return m, nil
	case prev == nil && (!haveCP || localEnd >= cl.HWM):
		// A data dir from before writer.json (or a prefix without a
		// checkpoint): as before, a log that reaches the checkpoint's end
		// is taken to be the one that wrote it.
		return m, nil
	}
	// Another broker wrote the prefix after this data dir did.
	lacking := lackingRange(m, segs)
	if lacking == nil {
		return m, b.setAside(fmt.Sprintf("another broker (%s) wrote this prefix after this data dir did, and every local segment is in the bucket", writer))
	}
	return m, b.refuseOrSetAside(fmt.Sprintf("another broker (%s) wrote this prefix after this data dir did (local epoch %d, bucket epoch %d), "+
		"and the local commitlog holds offsets the bucket lacks", writer, epochOf(prev), cpEpoch), *lacking, true)
}

func epochOf(w *offsets.WriterState) int64 {
	if w == nil {
		return 0
	}
	return w.Epoch
}

// refuseOrSetAside refuses to start with a message naming the range and
// how to proceed, or, with STRATAMQ_ACCEPT_LOSS, sets the local data
// aside and restores from the bucket.
func (b *Broker) refuseOrSetAside(why string, r offsetRange, localHolds bool) error {
	what := "they are lost"
	if localHolds {
		what = "they are only on this disk"
	}
	if !b.cfg.AcceptLoss {
		return fmt.Errorf("broker: refusing to start: %s: commitlog offsets [%d, %d) (%d bytes): %s. "+
			"To keep them, stop every other broker on this prefix and copy or export the data dir %s first; "+
			"to start anyway, set STRATAMQ_ACCEPT_LOSS=true: the local data is then set aside (renamed, not deleted) "+
			"and the broker restores from the bucket", why, r.From, r.To, r.To-r.From, what, b.cfg.DataDir)
	}
	b.log.Error("STRATAMQ_ACCEPT_LOSS: setting local data aside although the bucket lacks part of it",
		"reason", why, "from", r.From, "to", r.To, "bytes", r.To-r.From)
	return b.setAside(why)
}

// setAside renames store/ and config/ out of the way (store.stale-<unix>),
// so the broker restores from the bucket.
func (b *Broker) setAside(why string) error {
	suffix := fmt.Sprintf(".stale-%d", time.Now().Unix())
	for _, dir := range []string{"store", "config"} {
		from := filepath.Join(b.cfg.DataDir, dir)
		if _, err := b.fs.Stat(from); err != nil {
			continue
		}
		if err := b.fs.Rename(from, from+suffix); err != nil {
			return fmt.Errorf("broker: set aside %s: %w", from, err)
		}
	}
	b.log.Warn("the local data dir was set aside; the broker restores from the bucket", "reason", why, "setAside", suffix)
	return nil
}

// lackingRange is the part of the local log no bucket object holds: from
// the first local segment that is not uploaded whole to the local end; nil
// when every local segment is in the manifest.
func lackingRange(m *upload.Manifest, segs []localSegment) *offsetRange {
	uploaded := map[int64]int64{}
	for _, o := range m.CommitLog() {
		uploaded[o.Base] = o.Length
	}
	for _, sg := range segs {
		if sg.size == 0 {
			continue
		}
		if n, ok := uploaded[sg.base]; !ok || n < sg.size {
			end := segs[len(segs)-1].base + segs[len(segs)-1].size
			return &offsetRange{From: sg.base, To: end}
		}
	}
	return nil
}

// bucketGap is the first range of the local log, at or above floor (the
// retention floor), that neither a listed commitlog object nor an expired
// range of the manifest covers; nil when the bucket covers all of it.
func bucketGap(m *upload.Manifest, segs []localSegment, floor int64) *offsetRange {
	var covered []offsetRange
	for _, o := range m.CommitLog() {
		covered = append(covered, offsetRange{From: o.Base, To: o.End()})
	}
	for _, s := range m.Expired {
		covered = append(covered, offsetRange{From: s.From, To: s.To})
	}
	slices.SortFunc(covered, func(a, b offsetRange) int { return cmp.Compare(a.From, b.From) })
	for _, sg := range segs {
		from, to := max(sg.base, floor), sg.base+sg.size
		for _, c := range covered {
			if from >= to || c.From > from {
				break
			}
			from = max(from, c.To)
		}
		if from < to {
			end := to
			for _, c := range covered {
				if c.From > from && c.From < end {
					end = c.From
					break
				}
			}
			return &offsetRange{From: from, To: end}
		}
	}
	return nil
}

// loadManifest reads the bucket's manifest (bounded in time).
func (b *Broker) loadManifest() (*upload.Manifest, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.readManifest(ctx, b.scoped) // wire_tiering.go: the lease holder claims it first
}

type localSegment struct{ base, size int64 }

// localSegmentFiles lists the commitlog segments of the data dir's closed
// store by base, with the bytes each holds up to the end of the log's last
// valid record (store.LogEnd): the zeros written ahead of the active
// segment's records and a torn tail are not data, so they never make a
// copy look longer than it is. Segments past the end (empty after the cut
// recovery will make) are left out.
func localSegmentFiles(fs vfs.FS, dir string, maxMessageSize int) ([]localSegment, error) {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, nil
	}
	_, end, err := store.LogEnd(fs, filepath.Dir(dir), maxMessageSize)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []localSegment
	for _, n := range names {
		base, err := strconv.ParseInt(n, 10, 64)
		if err != nil || len(n) != 20 {
			continue
		}
		if base >= end && len(out) > 0 {
			break
		}
		fi, err := fs.Stat(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		out = append(out, localSegment{base: base, size: max(0, min(fi.Size(), end-base))})
	}
	return out, nil
}
