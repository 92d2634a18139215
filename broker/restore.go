package broker

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/stratamq/stratamq/offsets"
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
