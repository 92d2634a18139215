package broker

import (
	"encoding/json"
	"errors"
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

	maxGroups int // Create refuses a group past it (0: no limit); guarded by mu
}

// SetMaxGroups sets the most groups a client may make the table hold
// (STRATAMQ_MAX_GROUPS; 0: no limit). Groups already there stay; an
// admin's UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (Put) is not bounded.
func (m *SubscriptionGroupManager) SetMaxGroups(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxGroups = n
}

// ErrGroupLimit: a new group past STRATAMQ_MAX_GROUPS.
var ErrGroupLimit = errors.New("broker: too many consumer groups")

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
// the same and the config flush retries the save. Past the limit
// (SetMaxGroups) it returns the defaults without creating the group: the
// requests a client's group starts with (heartbeat, gRPC settings and
// receives) call Create, which refuses it.
func (m *SubscriptionGroupManager) GetOrCreate(name string) remoting.SubscriptionGroupConfig {
	g, err := m.Create(name)
	if errors.Is(err, ErrGroupLimit) {
		return DefaultSubscriptionGroup(name)
	}
	return g
}

// Create is GetOrCreate, but a new group past the limit is refused
// (ErrGroupLimit, naming STRATAMQ_MAX_GROUPS). A failed save is not an
// error here (as GetOrCreate).
func (m *SubscriptionGroupManager) Create(name string) (remoting.SubscriptionGroupConfig, error) {
	m.mu.Lock()
	if g, ok := m.mu.table[name]; ok { // the usual case: one lock, no closure
		v := *g
		m.mu.Unlock()
		return v, nil
	}
	m.mu.Unlock()
	g, _, err := m.addSaved(name, func() (*remoting.SubscriptionGroupConfig, error) {
		if n := len(m.mu.table) + len(m.mu.pending); m.maxGroups > 0 && n >= m.maxGroups {
			return nil, fmt.Errorf("%w: the broker holds %d consumer groups, its limit (STRATAMQ_MAX_GROUPS=%d): group %s not created",
				ErrGroupLimit, n, m.maxGroups, remoting.QuoteName(name))
		}
		g := DefaultSubscriptionGroup(name)
		return &g, nil
	}, m.Save, true)
	if errors.Is(err, ErrGroupLimit) {
		return g, err
	}
	return g, nil
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
