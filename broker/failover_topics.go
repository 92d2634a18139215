package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/stratamq/stratamq/broker/consumers"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// persistAdopted writes what adoptCheckpointMetadata and widenAdoptedQueues
// added to a promoted slave's tables (topics, queues, subscription groups
// and consumer offsets its followed copy lacked and the bucket checkpoint
// lists) to its config dir
// before the broker serves or registers (issue 29 item 13). Otherwise
// they live in memory only until the periodic config flush (5 s): a new
// master killed meanwhile restarts on its disk, retakes its own lease and
// reads only its local tables (a master that wrote the prefix last does
// not adopt the checkpoint's), so a topic acknowledged before the failover
// is gone although its messages are stored: not registered, no route,
// and clients holding an empty route say "route info not found" for good.
func (b *Broker) persistAdopted() error {
	if err := errors.Join(b.topics.Save(), b.groups.Save(), b.offsets.Save()); err != nil {
		return fmt.Errorf("broker: saving the topics, groups and offsets adopted from the bucket checkpoint: %w", err)
	}
	return nil
}

// widenAdoptedQueues raises a promoted slave's read and write queue counts
// of a topic to the bucket checkpoint's where those are larger (issue 29
// item 13). Its copy of the master's topics is up to a sync interval old:
// queues the master added since, and acknowledged sends to (the first send
// to a queue waits for a checkpoint that lists it), would otherwise be
// outside the new master's route, their messages stored but out of reach.
// Counts are only raised: a topic the slave copied with more queues keeps
// them, and a topic it lacks is adoptCheckpointMetadata's.
func (b *Broker) widenAdoptedQueues(cp *offsets.Checkpoint) error {
	if cp == nil {
		return nil
	}
	raw := cp.Sections[sectionTopics]
	if len(raw) == 0 {
		return nil
	}
	var w remoting.TopicConfigSerializeWrapper
	if err := json.Unmarshal(remoting.QuoteIntegerKeys(raw), &w); err != nil {
		return fmt.Errorf("broker: checkpoint topics: %w", err)
	}
	for name, in := range w.TopicConfigTable {
		tc, ok := b.topics.Get(name)
		if !ok || (in.ReadQueueNums <= tc.ReadQueueNums && in.WriteQueueNums <= tc.WriteQueueNums) {
			continue
		}
		from := [2]int32{tc.ReadQueueNums, tc.WriteQueueNums}
		tc.ReadQueueNums, tc.WriteQueueNums = max(tc.ReadQueueNums, in.ReadQueueNums), max(tc.WriteQueueNums, in.WriteQueueNums)
		b.topics.Put(tc)
		b.log.Info("promoted: queues the followed config lacked added from the bucket checkpoint", "topic", name,
			"readQueues", tc.ReadQueueNums, "writeQueues", tc.WriteQueueNums, "followed", from)
	}
	return nil
}

// adoptCheckpointMetadata runs when a promoted slave keeps its copy of the
// log (New, after the config managers opened): what it followed from the
// master may be a sync interval old, so it adds from the bucket's
// checkpoint every topic and subscription group it lacks — the checkpoint
// lists every topic written to (a send to a new queue waits for a
// checkpoint naming it) — and takes each consumer offset the checkpoint
// has further along. Deleted-and-recreated differences are settled in
// favour of keeping data: nothing is removed here.
func (b *Broker) adoptCheckpointMetadata(cp *offsets.Checkpoint) error {
	if cp == nil {
		return nil
	}
	if raw := cp.Sections[sectionTopics]; len(raw) > 0 {
		var w remoting.TopicConfigSerializeWrapper
		if err := json.Unmarshal(remoting.QuoteIntegerKeys(raw), &w); err != nil {
			return fmt.Errorf("broker: checkpoint topics: %w", err)
		}
		have := b.topics.QueueCounts()
		for name, tc := range w.TopicConfigTable {
			if _, ok := have[name]; !ok {
				tc.TopicName = name
				b.topics.Put(tc)
				b.log.Info("promoted: topic the followed config lacked added from the bucket checkpoint", "topic", name)
			}
		}
	}
	if raw := cp.Sections[sectionSubscriptionGroups]; len(raw) > 0 {
		groups, err := consumers.DecodeGroups(raw)
		if err != nil {
			return fmt.Errorf("broker: checkpoint subscription groups: %w", err)
		}
		for name, g := range groups {
			if _, ok := b.groups.Get(name); !ok {
				b.groups.Put(g)
			}
		}
	}
	if raw := cp.Sections[sectionConsumerOffsets]; len(raw) > 0 {
		var f struct {
			OffsetTable map[string]map[string]int64 `json:"offsetTable"`
		}
		if err := json.Unmarshal(remoting.QuoteIntegerKeys(raw), &f); err != nil {
			return fmt.Errorf("broker: checkpoint consumer offsets: %w", err)
		}
		for key, qs := range f.OffsetTable {
			topic, group, ok := strings.Cut(key, "@")
			if !ok {
				continue
			}
			for q, off := range qs {
				id, err := strconv.Atoi(q)
				if err != nil {
					continue
				}
				if cur, ok := b.offsets.Query(group, topic, int32(id)); !ok || cur < off {
					b.offsets.Commit(group, topic, int32(id), off)
				}
			}
		}
	}
	return nil
}
