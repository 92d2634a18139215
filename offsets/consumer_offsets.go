package offsets

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// ConsumerOffsets is RocketMQ's ConsumerOffsetManager: the next offset to
// consume per (topic, group, queue). Safe for concurrent use.
type ConsumerOffsets struct {
	fs   vfs.FS
	path string

	// saveMu serializes Save, held across encode and write, so an older
	// table is never written after a newer one.
	saveMu sync.Mutex

	// changed gets a token when the version moves (never blocking: one
	// token stands for any number of changes); SaveLoop waits on it.
	changed chan struct{}

	// mu guards the fields below; it is never held across I/O.
	mu struct {
		sync.Mutex
		table   map[string]map[int32]int64 // "topic@group" → queue → offset
		version int64                      // bumped on every change (bumpLocked)
		saved   int64                      // version last written
	}
}

// bumpLocked records a change: a new version, and a token for SaveLoop.
func (c *ConsumerOffsets) bumpLocked() {
	c.mu.version++
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// ConsumerOffsetsFile is the file name under the config directory.
const ConsumerOffsetsFile = "consumerOffset.json"

// OpenConsumerOffsets loads dir/consumerOffset.json (missing = empty).
func OpenConsumerOffsets(fs vfs.FS, dir string) (*ConsumerOffsets, error) {
	c := &ConsumerOffsets{fs: fs, path: filepath.Join(dir, ConsumerOffsetsFile), changed: make(chan struct{}, 1)}
	c.mu.table = map[string]map[int32]int64{}
	if _, err := vfs.RemoveTemps(fs, c.path); err != nil {
		return nil, fmt.Errorf("offsets: remove stale temp files of %s: %w", c.path, err)
	}
	b, err := ReadFile(fs, c.path)
	if err != nil {
		return nil, err
	}
	if len(b) > 0 {
		if err := c.decode(b); err != nil {
			return nil, fmt.Errorf("offsets: %s: %w", c.path, err)
		}
	}
	return c, nil
}

type offsetFile struct {
	OffsetTable map[string]map[string]int64 `json:"offsetTable"`
}

func (c *ConsumerOffsets) decode(b []byte) error {
	var f offsetFile
	if err := json.Unmarshal(QuoteIntKeys(b), &f); err != nil {
		return err
	}
	for key, queues := range f.OffsetTable {
		m := make(map[int32]int64, len(queues))
		for q, off := range queues {
			qid, err := strconv.ParseInt(q, 10, 32)
			if err != nil {
				return fmt.Errorf("queue id %q of %q: %w", q, key, err)
			}
			m[int32(qid)] = off
		}
		c.mu.table[key] = m
	}
	return nil
}

func tableKey(topic, group string) string { return topic + "@" + group }

// Commit records offset as the next offset group consumes from topic/queue.
func (c *ConsumerOffsets) Commit(group, topic string, queueID int32, offset int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := tableKey(topic, group)
	m := c.mu.table[k]
	if m == nil {
		m = map[int32]int64{}
		c.mu.table[k] = m
	}
	if old, ok := m[queueID]; ok && old == offset {
		return
	}
	m[queueID] = offset
	c.bumpLocked()
}

// Query returns the committed offset, ok=false when none is stored.
func (c *ConsumerOffsets) Query(group, topic string, queueID int32) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	off, ok := c.mu.table[tableKey(topic, group)][queueID]
	return off, ok
}

// DeleteTopic forgets every group's offsets for topic.
func (c *ConsumerOffsets) DeleteTopic(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.mu.table {
		if t, _, ok := strings.Cut(k, "@"); ok && t == topic {
			delete(c.mu.table, k)
			c.bumpLocked()
		}
	}
}

// DeleteGroup forgets every offset of group.
func (c *ConsumerOffsets) DeleteGroup(group string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.mu.table {
		if i := strings.LastIndexByte(k, '@'); i >= 0 && k[i+1:] == group {
			delete(c.mu.table, k)
			c.bumpLocked()
		}
	}
}

// QueueOffset is one committed offset.
type QueueOffset struct {
	Group, Topic string
	QueueID      int32
	Offset       int64
}

// All returns every committed offset (a copy: the caller may take its
// time over it).
func (c *ConsumerOffsets) All() []QueueOffset {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []QueueOffset
	for k, qs := range c.mu.table {
		i := strings.LastIndexByte(k, '@')
		if i < 0 {
			continue
		}
		for q, off := range qs {
			out = append(out, QueueOffset{Group: k[i+1:], Topic: k[:i], QueueID: q, Offset: off})
		}
	}
	return out
}

// Groups returns the groups with offsets on topic, sorted.
func (c *ConsumerOffsets) Groups(topic string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k := range c.mu.table {
		if t, g, ok := strings.Cut(k, "@"); ok && t == topic {
			out = append(out, g)
		}
	}
	sort.Strings(out)
	return out
}

// Encode returns the table as consumerOffset.json bytes and its version:
// keys in byte order, each key's queues in numeric order. It is written
// directly rather than through encoding/json's maps (about 10x faster:
// every save and checkpoint encodes the whole table), and copies the table
// under mu in one pass, so Commit waits only for that copy.
func (c *ConsumerOffsets) Encode() ([]byte, int64, error) {
	type queueOffset struct {
		q   int32
		off int64
	}
	type keyQueues struct {
		key string
		qs  []queueOffset
	}
	c.mu.Lock()
	n := 0
	for _, queues := range c.mu.table {
		n += len(queues)
	}
	flat := make([]queueOffset, 0, n)
	keys := make([]keyQueues, 0, len(c.mu.table))
	for k, queues := range c.mu.table {
		from := len(flat)
		for q, off := range queues {
			flat = append(flat, queueOffset{q, off})
		}
		keys = append(keys, keyQueues{key: k, qs: flat[from:len(flat):len(flat)]})
	}
	v := c.mu.version
	c.mu.Unlock()

	slices.SortFunc(keys, func(a, b keyQueues) int { return strings.Compare(a.key, b.key) })
	buf := make([]byte, 0, 32+len(keys)*48+n*16)
	buf = append(buf, `{"offsetTable":{`...)
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		var err error
		if buf, err = appendJSONString(buf, k.key); err != nil {
			return nil, 0, err
		}
		buf = append(buf, ':', '{')
		slices.SortFunc(k.qs, func(a, b queueOffset) int { return cmp.Compare(a.q, b.q) })
		for j, q := range k.qs {
			if j > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, '"')
			buf = strconv.AppendInt(buf, int64(q.q), 10)
			buf = append(buf, '"', ':')
			buf = strconv.AppendInt(buf, q.off, 10)
		}
		buf = append(buf, '}')
	}
	buf = append(buf, '}', '}')
	return buf, v, nil
}

// appendJSONString appends s as a JSON string: as is between quotes when
// it needs no escaping (topic and group names never do), else as
// encoding/json writes it.
func appendJSONString(buf []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b >= 0x7f || b == '"' || b == '\\' || b == '<' || b == '>' || b == '&' {
			q, err := json.Marshal(s)
			return append(buf, q...), err
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"'), nil
}

// Replace swaps the whole table for the one in b (consumerOffset.json), as a
// slave does when it copies its master's offsets.
func (c *ConsumerOffsets) Replace(b []byte) error {
	n := &ConsumerOffsets{changed: make(chan struct{}, 1)}
	n.mu.table = map[string]map[int32]int64{}
	if err := n.decode(b); err != nil {
		return fmt.Errorf("offsets: replace: %w", err)
	}
	c.mu.Lock()
	c.mu.table = n.mu.table
	c.bumpLocked()
	c.mu.Unlock()
	return nil
}

// Save writes the file if anything changed since the last Save.
func (c *ConsumerOffsets) Save() error {
	_, err := c.save()
	return err
}

// save is Save, also returning how long encoding took (the CPU a save
// costs; the write's time is mostly waiting for the disk).
func (c *ConsumerOffsets) save() (time.Duration, error) {
	c.saveMu.Lock()
	defer c.saveMu.Unlock()
	c.mu.Lock()
	dirty := c.mu.version != c.mu.saved
	c.mu.Unlock()
	if !dirty {
		return 0, nil
	}
	start := time.Now()
	b, v, err := c.Encode()
	took := time.Since(start)
	if err != nil {
		return took, err
	}
	if err := WriteFileAtomic(c.fs, c.path, b); err != nil {
		return took, err
	}
	c.mu.Lock()
	if v > c.mu.saved {
		c.mu.saved = v
	}
	c.mu.Unlock()
	return took, nil
}

// SaveLoop saves the table within delay of every change (Commit and the
// rest), until ctx ends: changes within one delay share one write, so the
// commit path never writes and a process crash loses at most the commits
// of the last delay plus one save's duration. A table so large that
// encoding it took more than a tenth of delay (hundreds of thousands of
// offsets) stretches the next wait to ten times that, so encoding never
// takes more than about a tenth of a core. A failed save is handed to
// onErr and retried after another wait. The owner saves once more after
// ctx ends (Save), for the changes of the last wait.
func (c *ConsumerOffsets) SaveLoop(ctx context.Context, delay time.Duration, onErr func(error)) {
	t := time.NewTimer(delay)
	t.Stop()
	defer t.Stop()
	wait := delay
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		took, err := c.save()
		wait = max(delay, 10*took)
		if err != nil {
			onErr(err)
			select { // try again after another wait
			case c.changed <- struct{}{}:
			default:
			}
		}
	}
}

// Clamp moves every committed offset above maxOf(topic, queue) down to it
// and returns how many moved (after a restore lost a queue's unsealed tail).
func (c *ConsumerOffsets) Clamp(maxOf func(topic string, queueID int32) int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, queues := range c.mu.table {
		topic, _, ok := strings.Cut(k, "@")
		if !ok {
			continue
		}
		for q, off := range queues {
			if mx := maxOf(topic, q); off > mx {
				queues[q] = mx
				n++
			}
		}
	}
	if n > 0 {
		c.bumpLocked()
	}
	return n
}
