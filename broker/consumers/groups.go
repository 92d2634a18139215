package consumers

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/stratamq/stratamq/broker/configtable"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// Groups is RocketMQ's SubscriptionGroupManager: consumer group settings,
// persisted as config/subscriptionGroup.json. Groups are auto-created on
// first heartbeat or pull. Safe for concurrent use.
type Groups struct {
	configtable.Table[remoting.SubscriptionGroupConfig] // Get, Names, Snapshot, Mirror

	maxGroups int // Create refuses a group past it (0: no limit); guarded by mu
}

// SetMaxGroups sets the most groups a client may make the table hold
// (STRATAMQ_MAX_GROUPS; 0: no limit). Groups already there stay; an
// admin's UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (Put) is not bounded.
func (m *Groups) SetMaxGroups(n int) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.maxGroups = n
}

// ErrGroupLimit: a new group past STRATAMQ_MAX_GROUPS.
var ErrGroupLimit = errors.New("broker: too many consumer groups")

// GroupsFile is the file Groups is saved to, in the config directory.
const GroupsFile = "subscriptionGroup.json"

type subscriptionGroupJSON struct {
	SubscriptionGroupTable map[string]*remoting.SubscriptionGroupConfig `json:"subscriptionGroupTable"`
	DataVersion            remoting.DataVersion                         `json:"dataVersion"`
}

// OpenGroups loads dir/subscriptionGroup.json.
func OpenGroups(fs vfs.FS, dir string) (*Groups, error) {
	m := &Groups{}
	if err := m.Init(fs, filepath.Join(dir, GroupsFile)); err != nil {
		return nil, err
	}
	b, err := offsets.ReadFile(fs, m.Path())
	if err != nil {
		return nil, err
	}
	if len(b) > 0 {
		var f subscriptionGroupJSON
		if err := json.Unmarshal(offsets.QuoteIntKeys(b), &f); err != nil {
			return nil, fmt.Errorf("broker: %s: %w", m.Path(), err)
		}
		for n, g := range f.SubscriptionGroupTable {
			if g != nil {
				g.GroupName = n
				m.Mu.Table[n] = g
			}
		}
		m.Mu.Version = f.DataVersion
		m.Mu.Saved = f.DataVersion.Counter
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
func (m *Groups) GetOrCreate(name string) remoting.SubscriptionGroupConfig {
	g, err := m.Create(name)
	if errors.Is(err, ErrGroupLimit) {
		return DefaultSubscriptionGroup(name)
	}
	return g
}

// Create is GetOrCreate, but a new group past the limit is refused
// (ErrGroupLimit, naming STRATAMQ_MAX_GROUPS). A failed save is not an
// error here (as GetOrCreate).
func (m *Groups) Create(name string) (remoting.SubscriptionGroupConfig, error) {
	m.Mu.Lock()
	if g, ok := m.Mu.Table[name]; ok { // the usual case: one lock, no closure
		v := *g
		m.Mu.Unlock()
		return v, nil
	}
	m.Mu.Unlock()
	g, _, err := m.AddSaved(name, func() (*remoting.SubscriptionGroupConfig, error) {
		if n := len(m.Mu.Table) + len(m.Mu.Pending); m.maxGroups > 0 && n >= m.maxGroups {
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
func (m *Groups) Put(g remoting.SubscriptionGroupConfig) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	c := g
	m.Mu.Table[g.GroupName] = &c
	m.BumpLocked()
}

// Delete removes a group's config; false when there was none.
func (m *Groups) Delete(name string) bool {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	if _, ok := m.Mu.Table[name]; !ok {
		return false
	}
	delete(m.Mu.Table, name)
	m.BumpLocked()
	return true
}

// Encode returns subscriptionGroup.json bytes (also the body of
// GET_ALL_SUBSCRIPTIONGROUP_CONFIG) and the version they hold.
func (m *Groups) Encode() ([]byte, int64, error) {
	t, v := m.Snapshot()
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

// DecodeGroups reads a subscriptionGroup.json body (the file, a
// checkpoint's section, GET_ALL_SUBSCRIPTIONGROUP_CONFIG's answer): each
// config named by its key, null entries left out.
func DecodeGroups(body []byte) (map[string]remoting.SubscriptionGroupConfig, error) {
	var f subscriptionGroupJSON
	if err := json.Unmarshal(remoting.QuoteIntegerKeys(body), &f); err != nil {
		return nil, err
	}
	out := make(map[string]remoting.SubscriptionGroupConfig, len(f.SubscriptionGroupTable))
	for n, g := range f.SubscriptionGroupTable {
		if g != nil {
			g.GroupName = n
			out[n] = *g
		}
	}
	return out, nil
}

// Save writes the file when something changed since the last Save.
func (m *Groups) Save() error { return m.SaveWith(encodeSubscriptionGroups) }
