package broker

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// SubscriptionGroupManager is RocketMQ's SubscriptionGroupManager: consumer
// group settings, persisted as config/subscriptionGroup.json. Groups are
// auto-created on first heartbeat or pull.
type SubscriptionGroupManager struct {
	fs   vfs.FS
	path string

	// mu guards the fields below; never held across I/O.
	mu struct {
		sync.Mutex
		table   map[string]*remoting.SubscriptionGroupConfig
		version remoting.DataVersion
		saved   int64
	}
}

const subscriptionGroupFile = "subscriptionGroup.json"

type subscriptionGroupJSON struct {
	SubscriptionGroupTable map[string]*remoting.SubscriptionGroupConfig `json:"subscriptionGroupTable"`
	DataVersion            remoting.DataVersion                         `json:"dataVersion"`
}

// OpenSubscriptionGroupManager loads dir/subscriptionGroup.json.
func OpenSubscriptionGroupManager(fs vfs.FS, dir string) (*SubscriptionGroupManager, error) {
	m := &SubscriptionGroupManager{fs: fs, path: filepath.Join(dir, subscriptionGroupFile)}
	m.mu.table = map[string]*remoting.SubscriptionGroupConfig{}
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

// GetOrCreate returns the group's config, creating it with defaults.
func (m *SubscriptionGroupManager) GetOrCreate(name string) remoting.SubscriptionGroupConfig {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g, ok := m.mu.table[name]; ok {
		return *g
	}
	g := DefaultSubscriptionGroup(name)
	m.mu.table[name] = &g
	m.bumpLocked()
	return g
}

// Get returns the group's config.
func (m *SubscriptionGroupManager) Get(name string) (remoting.SubscriptionGroupConfig, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.mu.table[name]
	if !ok {
		return remoting.SubscriptionGroupConfig{}, false
	}
	return *g, true
}

// Put creates or replaces a group.
func (m *SubscriptionGroupManager) Put(g remoting.SubscriptionGroupConfig) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := g
	m.mu.table[g.GroupName] = &c
	m.bumpLocked()
}

// Delete removes a group.
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

// Names returns the group names, sorted.
func (m *SubscriptionGroupManager) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.mu.table))
	for n := range m.mu.table {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (m *SubscriptionGroupManager) bumpLocked() {
	m.mu.version.Counter++
	m.mu.version.Timestamp = time.Now().UnixMilli()
}

// Encode returns subscriptionGroup.json bytes (also the body of
// GET_ALL_SUBSCRIPTIONGROUP_CONFIG) and the version they hold.
func (m *SubscriptionGroupManager) Encode() ([]byte, int64, error) {
	m.mu.Lock()
	f := subscriptionGroupJSON{SubscriptionGroupTable: make(map[string]*remoting.SubscriptionGroupConfig, len(m.mu.table)), DataVersion: m.mu.version}
	for n, g := range m.mu.table {
		c := *g
		f.SubscriptionGroupTable[n] = &c
	}
	m.mu.Unlock()
	b, err := json.MarshalIndent(f, "", "\t")
	return b, f.DataVersion.Counter, err
}

// Save writes the file when something changed since the last Save.
func (m *SubscriptionGroupManager) Save() error {
	b, v, err := m.Encode()
	if err != nil {
		return err
	}
	m.mu.Lock()
	dirty := v != m.mu.saved
	m.mu.Unlock()
	if !dirty {
		return nil
	}
	if err := offsets.WriteFileAtomic(m.fs, m.path, b); err != nil {
		return err
	}
	m.mu.Lock()
	m.mu.saved = v
	m.mu.Unlock()
	return nil
}
