package broker

import (
	"encoding/json"
	"errors"
	"fmt"

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
