package broker

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stratamq/stratamq/broker/configtable"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// Topic permission bits (RocketMQ PermName).
const (
	PermPriority = 0x8
	PermRead     = 0x4
	PermWrite    = 0x2
	PermInherit  = 0x1
)

// DefaultTopic is the template topic producers auto-create through.
const DefaultTopic = "TBW102"

// System topic prefixes.
const (
	RetryGroupTopicPrefix = "%RETRY%"
	DLQGroupTopicPrefix   = "%DLQ%"
)

// TopicConfigManager is RocketMQ's TopicConfigManager: the topic table,
// persisted as config/topics.json. Safe for concurrent use.
type TopicConfigManager struct {
	configtable.Table[remoting.TopicConfig] // Get, Delete, Names

	maxTopics int // Create and CreateOnSend refuse a topic past it (0: no limit); guarded by mu
}

// SetMaxTopics sets the most topics Create and CreateOnSend let the table
// hold (STRATAMQ_MAX_TOPICS; 0: no limit). Topics already there stay.
func (m *TopicConfigManager) SetMaxTopics(n int) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.maxTopics = n
}

// roomLocked refuses a new topic past the limit.
func (m *TopicConfigManager) roomLocked(topic string) error {
	if n := len(m.Mu.Table) + len(m.Mu.Pending); m.maxTopics > 0 && n >= m.maxTopics {
		return fmt.Errorf("the broker holds %d topics, its limit (STRATAMQ_MAX_TOPICS=%d): topic[%s] not created", n, m.maxTopics, topic)
	}
	return nil
}

// Create is Put for UPDATE_AND_CREATE_TOPIC: a new topic past the limit
// (SetMaxTopics) is refused; an existing one is updated.
func (m *TopicConfigManager) Create(tc remoting.TopicConfig) (bool, error) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	old, ok := m.Mu.Table[tc.TopicName]
	if ok && sameTopic(*old, tc) {
		return false, nil
	}
	if !ok {
		if err := m.roomLocked(tc.TopicName); err != nil {
			return false, err
		}
	}
	c := tc
	m.putLocked(&c)
	return true, nil
}

const topicsFile = "topics.json"

type topicsJSON struct {
	TopicConfigTable map[string]remoting.TopicConfig `json:"topicConfigTable"`
	DataVersion      remoting.DataVersion            `json:"dataVersion"`
}

// readTopicsFile reads dir/topics.json as it is on disk (missing: empty).
func readTopicsFile(fs vfs.FS, dir string) (topicsJSON, error) {
	var f topicsJSON
	path := filepath.Join(dir, topicsFile)
	b, err := offsets.ReadFile(fs, path)
	if err != nil || len(b) == 0 {
		return f, err
	}
	if err := json.Unmarshal(offsets.QuoteIntKeys(b), &f); err != nil {
		return f, fmt.Errorf("broker: %s: %w", path, err)
	}
	return f, nil
}

// OpenTopicConfigManager loads dir/topics.json (missing = empty) and makes
// sure TBW102 exists when autoCreate is on.
func OpenTopicConfigManager(fs vfs.FS, dir string, autoCreate bool) (*TopicConfigManager, error) {
	m := &TopicConfigManager{}
	if err := m.Init(fs, filepath.Join(dir, topicsFile)); err != nil {
		return nil, err
	}
	f, err := readTopicsFile(fs, dir)
	if err != nil {
		return nil, err
	}
	for name, tc := range f.TopicConfigTable {
		tc.TopicName = name
		m.Mu.Table[name] = &tc
	}
	m.Mu.Version = f.DataVersion
	m.Mu.Saved = f.DataVersion.Counter
	if m.Mu.Version.Timestamp == 0 {
		m.Mu.Version.Timestamp = time.Now().UnixMilli()
	}
	if autoCreate {
		if _, ok := m.Mu.Table[DefaultTopic]; !ok {
			m.putLocked(&remoting.TopicConfig{TopicName: DefaultTopic, ReadQueueNums: 8, WriteQueueNums: 8,
				Perm: PermInherit | PermRead | PermWrite, TopicFilterType: "SINGLE_TAG"})
		}
	} else if _, ok := m.Mu.Table[DefaultTopic]; ok {
		delete(m.Mu.Table, DefaultTopic)
		m.BumpLocked()
	}
	return m, nil
}

func (m *TopicConfigManager) putLocked(tc *remoting.TopicConfig) {
	m.Mu.Table[tc.TopicName] = withTopicDefaults(tc)
	m.BumpLocked()
}

// withTopicDefaults fills tc's unset filter type and attributes.
func withTopicDefaults(tc *remoting.TopicConfig) *remoting.TopicConfig {
	if tc.TopicFilterType == "" {
		tc.TopicFilterType = "SINGLE_TAG"
	}
	if tc.Attributes == nil {
		tc.Attributes = map[string]string{}
	}
	return tc
}

// Put creates or replaces a topic; it reports whether anything changed.
func (m *TopicConfigManager) Put(tc remoting.TopicConfig) bool {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	if old, ok := m.Mu.Table[tc.TopicName]; ok && sameTopic(*old, tc) {
		return false
	}
	c := tc
	m.putLocked(&c)
	return true
}

func sameTopic(a, b remoting.TopicConfig) bool {
	return a.ReadQueueNums == b.ReadQueueNums && a.WriteQueueNums == b.WriteQueueNums &&
		a.Perm == b.Perm && a.TopicSysFlag == b.TopicSysFlag && a.Order == b.Order &&
		(b.TopicFilterType == "" || a.TopicFilterType == b.TopicFilterType) &&
		maps.Equal(a.Attributes, b.Attributes)
}

// CreateOnSend is RocketMQ's createTopicInSendMessageMethod: when topic is
// unknown and the default topic exists with INHERIT, create topic with
// min(queueNums, default's write queues) queues and the default's perm minus
// INHERIT. created reports whether a new topic was made. A new topic is
// saved to topics.json before it is returned (and before any other caller
// sees it), so the send that created it is answered only once a process
// crash cannot forget it; if that save fails, the topic is not created and
// the error wraps ErrConfigNotSaved.
func (m *TopicConfigManager) CreateOnSend(topic, defaultTopic string, queueNums int) (tc remoting.TopicConfig, created bool, err error) {
	tc, created, err = m.AddSaved(topic, func() (*remoting.TopicConfig, error) {
		def, ok := m.Mu.Table[defaultTopic]
		if !ok {
			return nil, fmt.Errorf("topic[%s] not exist, apply first please!", topic)
		}
		if defaultTopic == DefaultTopic && def.Perm&PermInherit == 0 {
			return nil, fmt.Errorf("create topic %s forbidden: default topic %s has no INHERIT permission", topic, defaultTopic)
		}
		if err := m.roomLocked(topic); err != nil {
			return nil, err
		}
		n := queueNums
		if n <= 0 || n > int(def.WriteQueueNums) {
			n = int(def.WriteQueueNums)
		}
		if n <= 0 {
			n = 1
		}
		return withTopicDefaults(&remoting.TopicConfig{TopicName: topic, ReadQueueNums: int32(n), WriteQueueNums: int32(n),
			Perm: def.Perm &^ PermInherit, TopicSysFlag: def.TopicSysFlag}), nil
	}, m.Save, false)
	return tc, created, err
}

// CreateSystemTopic makes sure a retry/DLQ topic exists with queueNums
// queues. A new topic is saved to topics.json before it is returned, as
// CreateOnSend's; if that save fails it is created all the same (its
// requests are not refused for it) and the config flush retries the save.
func (m *TopicConfigManager) CreateSystemTopic(topic string, queueNums int32, perm int32) (remoting.TopicConfig, bool) {
	tc, created, _ := m.AddSaved(topic, func() (*remoting.TopicConfig, error) {
		return withTopicDefaults(&remoting.TopicConfig{TopicName: topic, ReadQueueNums: queueNums, WriteQueueNums: queueNums, Perm: perm}), nil
	}, m.Save, true)
	return tc, created
}

// AddStored adds every topic of stored (topic → queues holding records,
// store.QueueCounts) the table lacks, readable and writable (a DLQ topic
// writable only, as created) with that many queues, and returns their
// names: recovery's backstop, so no stored message belongs to a topic the
// table forgot. The caller saves.
func (m *TopicConfigManager) AddStored(stored map[string]int32) []string {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	var added []string
	for name, n := range stored {
		if _, ok := m.Mu.Table[name]; ok || name == DefaultTopic {
			continue
		}
		perm := int32(PermRead | PermWrite)
		if strings.HasPrefix(name, DLQGroupTopicPrefix) {
			perm = PermWrite
		}
		m.putLocked(&remoting.TopicConfig{TopicName: name, ReadQueueNums: n, WriteQueueNums: n, Perm: perm})
		added = append(added, name)
	}
	slices.Sort(added)
	return added
}

// queueCount is how many queues of tc may hold messages: the more of its
// read and write queue numbers.
func queueCount(tc remoting.TopicConfig) int32 { return max(tc.ReadQueueNums, tc.WriteQueueNums) }

// QueueCounts returns every topic's queueCount, from one snapshot.
func (m *TopicConfigManager) QueueCounts() map[string]int32 {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	out := make(map[string]int32, len(m.Mu.Table))
	for name, tc := range m.Mu.Table {
		out[name] = queueCount(*tc)
	}
	return out
}

// Wrapper returns the table as sent in REGISTER_BROKER and GET_ALL_TOPIC_CONFIG.
func (m *TopicConfigManager) Wrapper() remoting.TopicConfigSerializeWrapper {
	t, v := m.Snapshot()
	return remoting.TopicConfigSerializeWrapper{TopicConfigTable: t, DataVersion: v}
}

// Save writes topics.json when something changed since the last Save.
func (m *TopicConfigManager) Save() error {
	return m.SaveWith(func(t map[string]remoting.TopicConfig, v remoting.DataVersion) ([]byte, error) {
		return json.MarshalIndent(topicsJSON{TopicConfigTable: t, DataVersion: v}, "", "\t")
	})
}

// ErrConfigNotSaved: the save of a new topic's or group's config file
// failed (configtable.ErrNotSaved).
var ErrConfigNotSaved = configtable.ErrNotSaved
