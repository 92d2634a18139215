package broker

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
)

// storeIsFresh reports whether the data dir holds no commitlog: a new
// machine, or a wiped disk.
func (b *Broker) storeIsFresh() bool {
	names, err := b.fs.ReadDir(filepath.Join(b.cfg.DataDir, "store", "commitlog"))
	return err != nil || len(names) == 0
}

// restoreMetadata writes topics, subscription groups and consumer offsets
// from the bucket's checkpoint into the config directory when the data dir
// is fresh, so the managers load them as if they had always been local.
func (b *Broker) restoreMetadata(configDir string) error {
	cp := b.dur.loaded
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
	if b.dur == nil || b.dur.loaded == nil {
		return commitLogState{}, false
	}
	raw, ok := b.dur.loaded.Sections[sectionCommitLog]
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
func (b *Broker) restorePoint() *store.Restore {
	cl, haveCP := b.restoredCommitLog()
	var objectsEnd int64
	if m := b.tier.uploader.Manifest(); m != nil {
		for _, o := range m.CommitLog() {
			objectsEnd = max(objectsEnd, o.End())
		}
	} else if objs := b.tier.cold.Objects(); len(objs) > 0 {
		objectsEnd = objs[len(objs)-1].End()
	}
	if !haveCP && objectsEnd == 0 {
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
		Queues:         map[string]map[int32]store.QueueRange{},
	}
	for topic, qs := range cl.Queues {
		for q, rg := range qs {
			id, err := strconv.Atoi(q)
			if err != nil {
				continue
			}
			if r.Queues[topic] == nil {
				r.Queues[topic] = map[int32]store.QueueRange{}
			}
			mx := rg.Max
			if !cl.Clean {
				// Unclean loss: resume past every queue offset that may have
				// been handed out, so none is reused.
				mx = max(mx, rg.Reserved)
			}
			r.Queues[topic][int32(id)] = store.QueueRange{Min: rg.Min, Max: mx}
		}
	}
	b.log.Info("fresh data dir: the commitlog resumes from the bucket", "logStart", r.CommitLogStart,
		"checkpointHWM", cl.HWM, "reserved", cl.Reserved, "uploadedEnd", objectsEnd, "queues", len(cl.Queues))
	return r
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

// setAsideStaleData moves a data dir that is older than the bucket (its
// log ends before the checkpoint's high-water mark: another broker wrote
// the prefix since) out of the way, so the broker restores from the bucket
// instead of mixing two histories.
func (b *Broker) setAsideStaleData() error {
	cl, ok := b.restoredCommitLog()
	if !ok || b.storeIsFresh() {
		return nil
	}
	end, err := localLogEnd(b.fs, filepath.Join(b.cfg.DataDir, "store", "commitlog"))
	if err != nil || end >= cl.HWM {
		return err
	}
	suffix := fmt.Sprintf(".stale-%d", time.Now().Unix())
	for _, d := range []string{"store", "config"} {
		from := filepath.Join(b.cfg.DataDir, d)
		if _, err := b.fs.Stat(from); err != nil {
			continue
		}
		if err := b.fs.Rename(from, from+suffix); err != nil {
			return fmt.Errorf("broker: set aside stale %s: %w", from, err)
		}
	}
	b.log.Warn("the local data dir is older than the bucket; it was set aside and the broker restores from the bucket",
		"localLogEnd", end, "checkpointHWM", cl.HWM, "setAside", suffix)
	return nil
}

// localLogEnd is the end of the local commitlog from its file names and
// sizes (an upper bound: a torn tail is counted).
func localLogEnd(fs vfs.FS, dir string) (int64, error) {
	names, err := fs.ReadDir(dir)
	if err != nil || len(names) == 0 {
		return 0, nil
	}
	sort.Strings(names)
	for i := len(names) - 1; i >= 0; i-- {
		base, err := strconv.ParseInt(names[i], 10, 64)
		if err != nil {
			continue
		}
		fi, err := fs.Stat(filepath.Join(dir, names[i]))
		if err != nil {
			return 0, err
		}
		return base + fi.Size(), nil
	}
	return 0, nil
}
