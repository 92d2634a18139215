package broker

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// SubscriptionGroupManager is RocketMQ's SubscriptionGroupManager: consumer
// group settings, persisted as config/subscriptionGroup.json. Groups are
// auto-created on first heartbeat or pull.
type SubscriptionGroupManager struct {
	configTable[remoting.SubscriptionGroupConfig] // Get, Delete, Names
}

const subscriptionGroupFile = "subscriptionGroup.json"

type subscriptionGroupJSON struct {
	SubscriptionGroupTable map[string]*remoting.SubscriptionGroupConfig `json:"subscriptionGroupTable"`
	DataVersion            remoting.DataVersion                         `json:"dataVersion"`
}

// OpenSubscriptionGroupManager loads dir/subscriptionGroup.json.
func OpenSubscriptionGroupManager(fs vfs.FS, dir string) (*SubscriptionGroupManager, error) {
	m := &SubscriptionGroupManager{}
	if err := m.init(fs, filepath.Join(dir, subscriptionGroupFile)); err != nil {
		return nil, err
	}
	b, err := offsets.ReadFile(fs, m.path)
	if err != nil {
		return nil, err
	}
	if len(b) > 0 {
		var f subscriptionGroupJSON
		if err := json.Unmarshal(offsets.QuoteIntKeys(b), &f); err != nil {
			return nil, fmt.Errorf("broker: %s: %w", m.path, err)
		}
		for n, g := range f.SubscriptionGroupTable {
			if g != nil {
				g.GroupName = n
				m.mu.table[n] = g
			}
		}
		m.mu.version = f.DataVersion
		m.mu.saved = f.DataVersion.Counter
	}
	return m, nil
}

// DefaultSubscriptionGroup returns RocketMQ's defaults for a new group.
func DefaultSubscriptionGroup(name string) remoting.SubscriptionGroupConfig {
	return remoting.SubscriptionGroupConfig{
		GroupName: name, ConsumeEnable: true, ConsumeFromMinEnable: true, ConsumeBroadcastEnable: true,
		RetryQueueNums: 1, RetryMaxTimes: 16, BrokerID: 0, WhichBrokerWhenConsumeSlowly: 1,
		NotifyConsumerIdsChangedEnable: true,
	}
}

// GetOrCreate returns the group's config, creating it with defaults. A new
// group is saved to subscriptionGroup.json before it is returned (and
// before any other caller sees it); if that save fails it is created all
// the same and the config flush retries the save.
func (m *SubscriptionGroupManager) GetOrCreate(name string) remoting.SubscriptionGroupConfig {
	m.mu.Lock()
	if g, ok := m.mu.table[name]; ok { // the usual case: one lock, no closure
		v := *g
		m.mu.Unlock()
		return v
	}
	m.mu.Unlock()
	g, _, _ := m.addSaved(name, func() (*remoting.SubscriptionGroupConfig, error) {
		g := DefaultSubscriptionGroup(name)
		return &g, nil
	}, m.Save, true)
	return g
}

// Put creates or replaces a group.
func (m *SubscriptionGroupManager) Put(g remoting.SubscriptionGroupConfig) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := g
	m.mu.table[g.GroupName] = &c
	m.bumpLocked()
}

// Delete removes a group's config; false when there was none.
func (m *SubscriptionGroupManager) Delete(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.mu.table[name]; !ok {
		return false
	}
	delete(m.mu.table, name)
	m.bumpLocked()
	return true
}

// Encode returns subscriptionGroup.json bytes (also the body of
// GET_ALL_SUBSCRIPTIONGROUP_CONFIG) and the version they hold.
func (m *SubscriptionGroupManager) Encode() ([]byte, int64, error) {
	t, v := m.snapshot()
	b, err := encodeSubscriptionGroups(t, v)
	return b, v.Counter, err
}

func encodeSubscriptionGroups(t map[string]remoting.SubscriptionGroupConfig, v remoting.DataVersion) ([]byte, error) {
	f := subscriptionGroupJSON{SubscriptionGroupTable: make(map[string]*remoting.SubscriptionGroupConfig, len(t)), DataVersion: v}
	for n, g := range t {
		f.SubscriptionGroupTable[n] = &g
	}
	return json.MarshalIndent(f, "", "\t")
}

// Save writes the file when something changed since the last Save.
func (m *SubscriptionGroupManager) Save() error { return m.save(encodeSubscriptionGroups) }
