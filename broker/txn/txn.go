package txn

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// The system topics, as RocketMQ 4.9 names them.
const (
	HalfTopic   = "RMQ_SYS_TRANS_HALF_TOPIC"
	OpHalfTopic = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
	opTag       = "d"
)

// Properties the service reads and writes on half messages.
const (
	PropCheckTimes           = "TRANSACTION_CHECK_TIMES"
	PropCheckImmunitySeconds = "CHECK_IMMUNITY_TIME_IN_SECONDS"
)

// The transaction bits of a record's sysFlag (RocketMQ MessageSysFlag).
const (
	SysFlagMask     = 0xC
	SysFlagPrepared = 0x4
	SysFlagCommit   = 0x8
	SysFlagRollback = 0xC
)

const (
	// File is the progress in the config dir (the same JSON is the bucket
	// checkpoint's Section).
	File = "transactionOffset.json"
	// Section is the bucket checkpoint section holding the progress.
	Section = "transactions"
)

// State is the check service's progress: every half message below
// HalfOffset is resolved (committed, rolled back, put back for a check, or
// discarded), and every op record below OpOffset is of a half below
// HalfOffset. Reading the op queue from OpOffset therefore finds every op
// record of a half at or past HalfOffset.
type State struct {
	HalfOffset int64 `json:"halfOffset"`
	OpOffset   int64 `json:"opOffset"`
}

// Store is what the service reads of the local store (*store.Store).
// Halves are read through it, so one whose segment left the local disk is
// read from the bucket.
type Store interface {
	MinQueueOffset(topic string, queueID int32) int64
	MaxQueueOffset(topic string, queueID int32) int64
	MaxPhysOffset() int64
	Get(ctx context.Context, req store.GetRequest) (store.GetResult, error)
	ReadRecordContext(ctx context.Context, phys int64) ([]byte, error)
	QueryByKey(ctx context.Context, q store.KeyQuery) (store.KeyQueryResult, error)
	Validate(m *store.Message) error
}

// Writer stores the service's records: a put-back copy and its op record,
// or an op record alone, in one store call so they land together, through
// the broker's write gates (lease, fencing, acknowledgement). It returns one
// result per message.
type Writer interface {
	WriteTrans(ctx context.Context, msgs []store.Message) ([]store.PutResult, error)
}

// Durability says how far the commitlog is durable for each fault a saved
// progress must survive: local (fdatasynced: the progress file saves this)
// and bucket (what a restore or a failover finds: the checkpoint saves
// this). Both only grow within a run.
type Durability interface {
	DurableEnds() (local, bucket int64)
}

// Steps is the progress's step log in this run: each step with the
// commitlog end the writes it depends on reached, so a save counts only a
// state whose writes are as durable as the save (the broker's durable
// progress log).
type Steps interface {
	// Reset forgets every step: base is durable for every fault.
	Reset(base State)
	// Add records that the progress is now st, after writes that end at
	// end (0: none).
	Add(st State, end int64)
	// At is the progress whose writes all end at or below d.
	At(d int64) State
	// Latest is the progress now.
	Latest() State
	// Trim forgets the steps whose writes end at or below d.
	Trim(d int64)
}

// Producers reaches the producers of a group to ask about a transaction.
type Producers interface {
	// Conn is a live remoting connection of a producer of group, or nil.
	Conn(group string) *remoting.Conn
	// CheckGRPC hands the check of the half put back at put (props are
	// its properties) to a gRPC producer of group; true when handed over.
	CheckGRPC(ctx context.Context, group string, props map[string]string, put store.PutResult) bool
}

// Topics says which topics exist.
type Topics interface {
	Exists(topic string) bool
}

// Config is the service's settings.
type Config struct {
	// Dir is the config dir, which holds File.
	Dir string
	// CheckInterval is the time between check rounds
	// (STRATAMQ_TRANSACTION_CHECK_INTERVAL).
	CheckInterval time.Duration
	// Timeout is the age at which a half in doubt is checked
	// (STRATAMQ_TRANSACTION_TIMEOUT).
	Timeout time.Duration
	// CheckMax is the number of checks after which a half is discarded
	// (STRATAMQ_TRANSACTION_CHECK_MAX).
	CheckMax int
	// DelayTopics are where a commit with a DELAY or a timer is stored
	// until it is due (the schedule service's topics): the check looks
	// for a commit stored without its op record there too.
	DelayTopics []string
	// StoreHost is the broker's address, the BORNHOST of its op records
	// and part of the OFFSET msgId a check names.
	StoreHost netip.AddrPort
	Logger    *slog.Logger
}

// Deps is what the service works on.
type Deps struct {
	FS         vfs.FS
	Store      Store
	Writer     Writer
	Durability Durability
	Steps      Steps
	Producers  Producers
	Topics     Topics
}

// Hooks lets tests watch the check rounds. OnRound is called as round n
// begins (at startMs), OnCheck as round n checks the half at queue offset
// half.
type Hooks struct {
	OnRound func(n, startMs int64)
	OnCheck func(n, half int64)
}

// Service is the broker's transactional messages: the bookkeeping of half
// messages (which are resolved, which are being resolved) and the check
// service that asks producers about the ones in doubt.
//
// done holds, for every half at or past state.HalfOffset that has an op
// record, the op's queue offset; pending the halves an END_TRANSACTION or
// the checker is resolving right now. A half is resolved at most once per
// broker run: an END_TRANSACTION for a half that is done, pending or below
// HalfOffset is ignored (a late answer for a half already put back for a
// check is answered again by that check).
type Service struct {
	cfg   Config
	deps  Deps
	log   *slog.Logger
	hooks Hooks

	mu      sync.Mutex
	state   State
	opScan  int64 // next op queue offset to read into done
	done    map[int64]int64
	pending map[int64]struct{}
	saved   State // last written to File
	// ends holds, for halves in done, the commitlog end of their op
	// record (the commit or put-back is stored with it, before it): a
	// state past the half depends on that write.
	ends map[int64]int64
	// steps is how state got where it is in this run, with the commitlog
	// end of the writes each step depends on: a save counts only a state
	// whose writes are as durable as it.
	steps Steps
	// caughtUp: a sync read the op queue to its end once. Every later op
	// record is this run's own (added to done as it is written), so
	// END_TRANSACTION needs no sync after it; check rounds still sync, to
	// move opScan (and OpOffset) on.
	caughtUp atomic.Bool
	// rounds counts the check rounds begun.
	rounds atomic.Int64
	// closed: Close was called; no round goes on.
	closed atomic.Bool
}

// New makes the service. It reads nothing and starts nothing: Load reads
// the progress, Run runs the check rounds.
func New(cfg Config, deps Deps) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service{cfg: cfg, deps: deps, log: cfg.Logger, steps: deps.Steps,
		done: map[int64]int64{}, pending: map[int64]struct{}{}, ends: map[int64]int64{}}
}

// SetHooks installs test hooks; call it before Run.
func (t *Service) SetHooks(h Hooks) { t.hooks = h }

// Run is RocketMQ's TransactionalMessageCheckService: every
// Config.CheckInterval it runs one check round (Round). Only a master runs
// it (a slave checks nothing; a promoted slave's master generation resumes
// from the progress it loaded). The progress is saved to the config dir
// after each round and as Run returns, when ctx ends.
func (t *Service) Run(ctx context.Context) {
	tick := time.NewTicker(t.cfg.CheckInterval)
	defer tick.Stop()
	save := func() {
		if err := t.Save(); err != nil {
			t.log.Warn("save the transaction check progress", "err", err)
		}
	}
	defer save()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := t.Round(ctx); err != nil && ctx.Err() == nil && !t.closed.Load() {
				t.log.Warn("transaction check round stopped early; it goes on next interval", "err", err)
			}
			save()
		}
	}
}

// Close stops the check rounds as the broker begins to shut down: a round
// under way stops at its next half, a later one before its first. Run still returns
// (and saves the progress last) when its ctx ends, once the broker's
// final flush and checkpoint are done. Close is idempotent.
func (t *Service) Close() {
	t.closed.Store(true)
}
