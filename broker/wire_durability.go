package broker

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// The bucket lease and checkpoint loop (package durability) fences this
// broker and makes the bucket the system of record of its metadata. This
// file wires it: the checkpoint's section names, the names the rest of
// broker/ uses for its formats, and the adapters it reads the broker
// through (durWire). It is opened in New before the local data is judged
// (checkLocalData reads what it loaded), given the store once it is open
// (BlockWrites), runs among Run's loops on a master, and writes its final
// checkpoint at shutdown (Run's end).

// Checkpoint section names (SectionCommitLog: the package's own).
const (
	sectionConsumerOffsets    = "consumerOffsets"
	sectionTopics             = "topics"
	sectionSubscriptionGroups = "subscriptionGroups"
	sectionDelayOffsets       = "delayOffsets"
	sectionTimerOffsets       = "timerOffsets"
	sectionHeldProgress       = "heldProgress" // durable_progress.go
	// sectionAuth ("authMetadata", auth2.go): ACL 2.0's users and ACLs.
	sectionCommitLog = durability.SectionCommitLog
	// sectionTransactions ("transactions", broker/txn) is the
	// transaction check service's progress; sectionPop (broker/pop) POP's.
)

// errNotCheckpointed: a send to a queue no durable checkpoint lists yet.
var errNotCheckpointed = durability.ErrNotCheckpointed

// internalProgress is the progress of the internal services, per internal
// queue: every record below it is consumed by the broker itself
// (delivered, or resolved) and never read again.
type internalProgress map[queueKey]int64

// newCheckpointStore is the bucket (under the broker's prefix) as the
// object store of the lease and the checkpoints.
func newCheckpointStore(b tier.Bucket) offsets.ObjectStore { return durability.NewObjectStore(b) }

// writerStatePath is the data dir's writer identity file.
func (b *Broker) writerStatePath() string {
	return filepath.Join(b.cfg.DataDir, offsets.WriterStateFile)
}

// newDurability takes the lease on the broker's prefix and reads the last
// checkpoint (durability.Open); handed, if set, is a lease already taken
// (a promoted slave's). What it read at Open (ID, Prev, Lease, Loaded)
// never changes in a run: the broker reads it through the keeper.
func newDurability(b *Broker, bucket tier.Bucket, handed *offsets.Lease) (*durability.Keeper, error) {
	cfg := durability.Config{
		BrokerName: b.cfg.BrokerName, DataDir: b.cfg.DataDir,
		CheckpointInterval: b.cfg.CheckpointInterval, CheckpointWait: b.cfg.CheckpointWait, LeaseTTL: b.cfg.LeaseTTL,
		ReserveQueueMin: b.cfg.ReserveQueueMin, ReserveLogMin: b.cfg.ReserveLogMin, SegmentSize: int64(b.cfg.SegmentSize),
		HAFailover: b.cfg.HAFailover, Role: b.cfg.Role, HAAddr: b.haAdvertise(), BootID: b.bootID,
	}
	w := durWire{b}
	return durability.Open(cfg, durability.Deps{FS: b.fs, Mono: b.mono, Logger: b.log, Source: w, Failover: w}, bucket, handed)
}

// savedProgress is the internal services' progress in the last checkpoint
// written (nil: none yet, or no checkpoint).
func (b *Broker) savedProgress() internalProgress {
	if b.dur == nil {
		return nil
	}
	p := b.dur.SavedProgress()
	if p == nil {
		return nil
	}
	out := make(internalProgress, len(p))
	for k, v := range p {
		out[queueKey{k.Topic, k.Queue}] = v
	}
	return out
}

// durWire is the broker as the keeper reads it.
type durWire struct{ b *Broker }

// Gather encodes the checkpoint's sections but the commitlog's.
func (w durWire) Gather() (durability.Gathered, error) {
	b := w.b
	var g durability.Gathered
	// Dead-lettered POP entries whose DLQ copy the bucket now holds are
	// done before the committed offsets and POP's section are encoded.
	b.pop.Release() // package pop
	offsetsJSON, _, err := b.offsets.Encode()
	if err != nil {
		return g, err
	}
	tw := b.topics.Wrapper()
	topicsJSON, err := json.Marshal(tw)
	if err != nil {
		return g, err
	}
	groupsJSON, _, err := b.groups.Encode()
	if err != nil {
		return g, err
	}
	// The internal services' progress counts only the writes it depends
	// on that every restore from this checkpoint finds: those the bucket
	// lists (durable_progress.go). The same bound for the sections and
	// for the saved progress (what retention may expire of the internal
	// queues). A sync_master adds the progress over what a slave holds
	// (heldProgress), for a copy of the log that holds it.
	localEnd, bucketEnd := b.durableEnds()
	b.sched.Trim(min(localEnd, bucketEnd))
	b.trans.Trim(min(localEnd, bucketEnd))
	progress := b.schedProgress(bucketEnd) // wire_schedule.go
	ts := b.trans.StateAt(bucketEnd)
	progress[queueKey{TransHalfTopic, 0}] = ts.HalfOffset
	progress[queueKey{TransOpHalfTopic, 0}] = ts.OpOffset
	delayJSON, timerJSON, err := b.sched.Sections(bucketEnd)
	if err != nil {
		return g, err
	}
	transJSON, err := json.Marshal(ts)
	if err != nil {
		return g, err
	}
	popJSON, err := b.pop.Section() // package pop
	if err != nil {
		return g, err
	}
	authJSON := json.RawMessage("null") // auth2.go; null: not opened yet
	if b.auth != nil {
		if authJSON, err = b.auth.Encode(); err != nil {
			return g, err
		}
	}
	heldJSON, err := b.heldSection(bucketEnd, delayJSON, timerJSON, transJSON)
	if err != nil {
		return g, err
	}
	covered := make(map[string]int32, len(tw.TopicConfigTable))
	for name, tc := range tw.TopicConfigTable {
		covered[name] = queueCount(tc)
	}
	g.Progress = make(map[durability.QueueKey]int64, len(progress))
	for k, v := range progress {
		g.Progress[durability.QueueKey{Topic: k.topic, Queue: k.queue}] = v
	}
	g.Covered = covered
	g.BucketOnly = b.walBucketOnly() // wire_walfold.go
	g.Sections = map[string]json.RawMessage{
		sectionConsumerOffsets:    offsetsJSON,
		sectionTopics:             topicsJSON,
		sectionSubscriptionGroups: groupsJSON,
		sectionDelayOffsets:       delayJSON,
		sectionTimerOffsets:       timerJSON,
		sectionTransactions:       transJSON,
		sectionPop:                popJSON,
		sectionAuth:               authJSON,
	}
	if heldJSON != nil {
		g.Sections[sectionHeldProgress] = heldJSON
	}
	return g, nil
}

func (w durWire) QueueCounts() map[string]int32 { return w.b.topics.QueueCounts() }

// Contest: a data dir whose master stopped without releasing the lease,
// in another boot, competes for it (package failover: Roles.NewContest) rather than
// taking it back: after a power loss its log may lack the tail a slave
// holds and acknowledged (flush=async, sync_master). It watches its own
// lease lapse like a slave does and competes with the copies of the log
// that the slaves publish; the best live copy wins. The same for a data
// dir that ran as a slave since: the lease may still name its instance
// (it lost its own lease's contest and nobody took it yet), but its copy
// is a replica's, judged like any other.
func (w durWire) Contest(cs offsets.ObjectStore, ttl time.Duration, prev *offsets.WriterState) (*offsets.Contest, error) {
	b := w.b
	if !prev.Replica && b.fo.LogSurvivedWhole(prev) {
		return nil, nil
	}
	_, end, err := store.LogEnd(b.fs, filepath.Join(b.cfg.DataDir, "store"), int(b.cfg.MaxMessageSize))
	if err != nil {
		return nil, fmt.Errorf("broker: read the local log's end: %w", err)
	}
	// No HearHolder here: this contest decides only a lease of this data
	// dir's own instance (another's makes the broker a slave at once,
	// AcquireOptions.NoWait), and its holder is this copy. A slave
	// generation waits for another holder (failover.Roles.Run).
	return b.fo.StartContest(cs, ttl, prev, end), nil
}

// Fenced: another broker took the prefix; with failover this one rejoins
// as its slave.
func (w durWire) Fenced(err error) {
	w.b.requestRoleChange(&RoleChange{Role: RoleSlave, Reason: "fenced: " + err.Error()})
}
