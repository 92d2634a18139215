package pop

import (
	"context"
	"log/slog"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/store"
)

// What the engine needs of the broker it runs in. Each interface is
// declared here, by its one consumer, and is as small as the engine's use
// of it; the broker implements them with adapters over its own state
// (broker/wire_pop.go). None is called with Engine.mu held, except
// Offsets.Commit (see "Lock order" in doc.go).

// Store is the local store as the broker's consumers read it.
type Store interface {
	// Get reads a queue as a pull does: on a sync_master, bounded to what
	// a slave holds (the implementation sets GetRequest.MaxPhys).
	Get(ctx context.Context, req store.GetRequest) (store.GetResult, error)
	// ReadRecordContext reads the whole stored record at a commitlog
	// offset (from the bucket when dropped locally); store.ErrNotFound
	// when retention removed it.
	ReadRecordContext(ctx context.Context, phys int64) ([]byte, error)
	QueueEntryContext(ctx context.Context, topic string, queueID int32, idx int64) (phys int64, size int32, tags int64, ok bool, err error)
	MinQueueOffset(topic string, queueID int32) int64
	MaxQueueOffset(topic string, queueID int32) int64
	// LocalMinPhysOffset is the first commitlog offset on the local disk.
	LocalMinPhysOffset() int64
	// MaxPhysOffset is the commitlog's end.
	MaxPhysOffset() int64
}

// Offsets is the consumer offset store (consumerOffset.json): a POP
// group's progress is committed there as it moves, so remoting tools see
// POP groups too.
type Offsets interface {
	Commit(group, topic string, queueID int32, offset int64)
	Query(group, topic string, queueID int32) (int64, bool)
}

// Catalog is what a receive checks and compiles before it reads: the
// broker's topics, subscription groups and filter expressions.
type Catalog interface {
	// Topic describes a topic; ok false: it does not exist.
	Topic(name string) (t TopicInfo, ok bool)
	// Group is a consumer group's settings; it creates the group with
	// the defaults if it does not exist, as a pull does.
	Group(name string) GroupInfo
	// Filter compiles a filter expression of topic (filterType "TAG", ""
	// or "SQL92"); an error says why it is refused.
	Filter(topic, filterType, expr string) (Filter, error)
}

// TopicInfo is what a receive needs of a topic.
type TopicInfo struct {
	Readable   bool  // its permission allows reads
	ReadQueues int32 // its read queue count
	Queues     int32 // max(read, write) queue count
}

// GroupInfo is what a receive needs of a consumer group.
type GroupInfo struct {
	ConsumeEnable bool
	RetryMaxTimes int32
}

// Filter is a compiled filter expression; a nil func takes everything.
type Filter struct {
	// TagCode filters consume-queue entries by tag hash (the store's
	// GetRequest.Filter).
	TagCode func(tagsCode int64) bool
	// Props filters records by their encoded properties (SQL92; the
	// store's GetRequest.Match).
	Props func(props []byte) bool
	// Tags is asked last of every record, with its properties string:
	// exact tags (a tag hash collision is not this receive's). It takes
	// the string, not the record, so that the decoded record stays on
	// the stack.
	Tags func(properties string) bool
}

// DeadLetterer writes a message to a group's dead-letter queue.
type DeadLetterer interface {
	// DeadLetter stores the message at commitlog offset phys in
	// %DLQ%<group>, as a send-back past its maximum does, its reconsume
	// times attempts-1 before the send-back adds one. A message retention
	// removed meanwhile is done (nil).
	DeadLetter(ctx context.Context, group string, phys int64, attempts, maxAttempts int32) error
}

// Durability says how far the commitlog is durable.
type Durability interface {
	// DurableAll is the commitlog end durable for every fault
	// (fdatasynced, and listed in the bucket's manifest or committed to
	// the bucket WAL); it only grows within a run.
	DurableAll() int64
}

// Stopping says whether the broker is shutting down: a receive then
// answers at once instead of waiting.
type Stopping interface {
	Stopping() bool
}

// Config is the engine's settings. Zero values mean the defaults.
type Config struct {
	// MaxInflight, MaxInflightPerGroup, MaxInflightPerClient bound the
	// entries in flight (STRATAMQ_POP_MAX_INFLIGHT(_PER_GROUP|_PER_CLIENT)).
	MaxInflight, MaxInflightPerGroup, MaxInflightPerClient int
	// MaxBytes bounds one receive's bodies (default DefaultMaxBytes).
	MaxBytes int
	// ReviveInterval is how often Run's expiry runs (default 100 ms).
	ReviveInterval time.Duration
	// Slave: the broker is a slave; it serves no POP consumption.
	Slave bool
	// Dir is where the state file (popState.json) is; FS writes it.
	Dir string
	FS  vfs.FS
}

// Deps are the engine's collaborators. All but Logger are required.
type Deps struct {
	Store      Store
	Offsets    Offsets
	Catalog    Catalog
	DLQ        DeadLetterer
	Durability Durability
	Stopping   Stopping
	Logger     *slog.Logger // nil: slog.Default()
}
