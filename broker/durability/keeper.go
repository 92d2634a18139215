package durability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// Config is what the keeper reads of the broker's configuration.
type Config struct {
	BrokerName string
	// DataDir holds the writer identity file (offsets.WriterStateFile).
	DataDir            string
	CheckpointInterval time.Duration
	CheckpointWait     time.Duration // 0: DefaultCheckpointWait
	LeaseTTL           time.Duration // 0: offsets.LeaseTTL(CheckpointInterval)
	ReserveQueueMin    int64         // 0: QueueReserveMin
	ReserveLogMin      int64         // 0: LogReserveMin
	SegmentSize        int64         // the commitlog reserve is at least two segments
	HAFailover         bool
	// Role, HAAddr: what the lease record says of this broker.
	Role, HAAddr string
	BootID       string // recorded in the writer identity file
}

// DefaultCheckpointWait is how long a send that reached a reservation
// waits for the checkpoint it triggered when Config.CheckpointWait is 0.
const DefaultCheckpointWait = 2 * time.Second

// Store is the local store as the keeper reads it and bounds its writes
// (*store.Store).
type Store interface {
	FlushedPhysOffset() int64
	MaxPhysOffset() int64
	MinPhysOffset() int64
	MaxQueueOffset(topic string, queueID int32) int64
	MinQueueOffset(topic string, queueID int32) int64
	Tombstones() map[string]map[int32]int64
	SetReservation(r *store.Reservation)
}

// QueueKey names one queue.
type QueueKey struct {
	Topic string
	Queue int32
}

// Gathered is what the Source gives a checkpoint.
type Gathered struct {
	// Sections is every section but SectionCommitLog.
	Sections map[string]json.RawMessage
	// Covered is the topics the checkpoint lists, with their queue counts:
	// the queues sends may go to once it is written (AwaitCovered), and
	// those whose ranges and reservations SectionCommitLog carries.
	Covered map[string]int32
	// Progress is where the internal services stand in this checkpoint,
	// per internal queue (SavedProgress once it is written).
	Progress map[QueueKey]int64
	// BucketOnly goes to SectionCommitLog (CommitLog.BucketOnly).
	BucketOnly bool
}

// Source is the broker's metadata the checkpoint carries besides the
// commitlog: the consumer offsets, topics, subscription groups and the
// internal services' progress.
type Source interface {
	// Gather encodes them for one checkpoint.
	Gather() (Gathered, error)
	// QueueCounts is every topic's queue count now.
	QueueCounts() map[string]int32
}

// Failover is the broker's failover as the keeper needs it.
type Failover interface {
	// Contest is called at Open, with failover on and no lease handed,
	// when the data dir was written before (prev): a contest for the
	// lease to take part in instead of taking this instance's lease back
	// at once (offsets.AcquireOptions.Contest), or nil.
	Contest(cs offsets.ObjectStore, ttl time.Duration, prev *offsets.WriterState) (*offsets.Contest, error)
	// Fenced is called once, with failover on, when another broker took
	// the prefix over: the broker continues as its slave.
	Fenced(err error)
}

// Deps is what the keeper works through.
type Deps struct {
	FS       vfs.FS
	Mono     offsets.MonoClock // nil: the process's
	Logger   *slog.Logger
	Source   Source
	Failover Failover
}

// ErrNotCheckpointed: a send to a queue no durable checkpoint lists yet,
// and the checkpoint that would list it did not succeed.
var ErrNotCheckpointed = errors.New("broker: the bucket checkpoint does not list this queue yet")

// Keeper makes the bucket the system of record for the broker's metadata
// and fences the broker: it holds the prefix's lease (one writer per
// prefix; the epoch of the lease is stamped into every checkpoint and
// manifest write), refuses acknowledgements once the lease may have
// lapsed (monotonic clock, offsets.Lease.Check), writes a checkpoint
// every Config.CheckpointInterval and at shutdown, and gives the store
// the offset reservation of the last checkpoint written.
type Keeper struct {
	cfg      Config
	log      *slog.Logger
	fs       vfs.FS
	src      Source
	failover Failover
	st       Store // set by BlockWrites

	id     offsets.Identity     // this run: instance and lease epoch
	prev   *offsets.WriterState // what the data dir said at start; nil: a new (or pre-epoch) data dir
	lease  *offsets.Lease
	cp     *offsets.Checkpointer
	loaded *offsets.Checkpoint // read at start; nil on a new prefix
	fenced atomic.Bool
	// from is where this epoch took the log over (the log's end when the
	// store opened); recorded in the checkpoint's epoch history before
	// anything is written under the epoch (broker/failover).
	from    int64
	history []EpochStart // the loaded checkpoint's

	// covered is the topics of the last checkpoint written, with their
	// queue counts: a send to a queue beyond it waits for a checkpoint
	// that lists it (AwaitCovered), so a restore after an unclean loss
	// knows every queue that may have been written.
	covered atomic.Pointer[map[string]int32]

	saveMu    sync.Mutex         // serializes save
	finished  bool               // the final checkpoint was attempted; guarded by saveMu
	drainMark *OffsetRange       // set when a drain begins: kept in every checkpoint until the final one; guarded by saveMu
	pending   pendingReservation // reservations of the checkpoint being written; guarded by mu
	mu        sync.Mutex         // guards the fields below
	prevHWM   int64
	prevAt    time.Time          // when prevHWM and prevMax were taken
	reserved  int64              // commitlog reservation of the last checkpoint written
	prevMax   map[QueueKey]int64 // queue max at the previous checkpoint
	qres      map[QueueKey]int64 // queue reservations of the last checkpoint written
	lastTry   time.Time          // of the last checkpoint attempt while none is written yet

	near chan struct{} // the store says a write came near the reservation: checkpoint now
	// released is set before the final Release: the renewal loop stops.
	released atomic.Bool
	// renewMu is held by the renewal loop around each renewal (with
	// saveMu, a test holds it to stop every renewal, as a partition from
	// the bucket would: HoldRenewals).
	renewMu sync.Mutex
	// resv is the reservation the last checkpoint written gave the store.
	resv atomic.Pointer[store.Reservation]
	// savedProgress is where the internal services stood in the last
	// checkpoint written (what a restore resumes from): the schedule
	// queues' and the transaction check's progress. Retention may expire
	// those internal queues up to it (broker/retention.go expireInternal).
	savedProgress atomic.Pointer[map[QueueKey]int64]
}

// Open takes the lease on the broker's prefix (bucket, already under it)
// and reads the last checkpoint. A lease another live broker keeps
// renewing is an error naming it; one that stays unchanged for a full TTL
// is taken over.
//
// handed, if set, is a lease already taken (a promoted slave's): it is
// used as is.
func Open(cfg Config, deps Deps, bucket tier.Bucket, handed *offsets.Lease) (*Keeper, error) {
	log := deps.Logger
	statePath := filepath.Join(cfg.DataDir, offsets.WriterStateFile)
	prev, err := offsets.ReadWriterState(deps.FS, statePath)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	inst := ""
	var minEpoch int64
	if prev != nil {
		inst, minEpoch = prev.Instance, prev.Epoch
	} else if inst, err = offsets.NewInstanceID(); err != nil {
		return nil, err
	}
	id := offsets.IdentityFor(cfg.BrokerName, inst)
	cs := NewObjectStore(bucket)
	ttl := cfg.LeaseTTL
	if ttl <= 0 {
		ttl = offsets.LeaseTTL(cfg.CheckpointInterval)
	}
	// The bucket must answer at start: without the lease two brokers could
	// write one prefix. Transient errors are retried for a while; a lease
	// held by another instance is watched for up to one TTL.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+2*ttl)
	defer cancel()
	lease := handed
	opts := offsets.AcquireOptions{
		MinEpoch: minEpoch,
		// With failover a lease held by another instance makes this broker
		// its slave at once (Node), instead of refusing after a TTL.
		NoWait: cfg.HAFailover,
		HAAddr: cfg.HAAddr, Role: cfg.Role, Mono: deps.Mono,
		OnWait: func(held offsets.LeaseRecord, wait time.Duration) {
			log.Warn("another broker instance holds the bucket lease; waiting one TTL for it to renew or lapse",
				"holder", held.Identity().String(), "renewedAt", held.RenewedAt, "wait", wait)
		},
	}
	if lease == nil && cfg.HAFailover && prev != nil {
		c, err := deps.Failover.Contest(cs, ttl, prev)
		if err != nil {
			return nil, err
		}
		if c != nil {
			opts.WatchOwn, opts.ContestNow = true, true
			opts.Contest = c
		}
	}
	for wait := 100 * time.Millisecond; lease == nil; wait = min(2*wait, 3*time.Second) {
		lease, err = offsets.AcquireLease(ctx, cs, id, ttl, opts)
		if err == nil {
			break
		}
		if errors.Is(err, offsets.ErrLeaseHeld) {
			return nil, fmt.Errorf("broker: refusing to start: %w", err)
		}
		log.Warn("bucket lease not acquired yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("broker: acquire the bucket lease (the bucket must be reachable at start): %w", err)
		case <-time.After(wait):
		}
	}
	if opts.Contest != nil {
		opts.Contest.Clear(ctx)
	}
	if cfg.HAFailover {
		offsets.PruneReplicas(ctx, cs, lease.Epoch())
	}
	cp, err := offsets.NewCheckpointer(LeaseBound(cs, lease), lease.Identity(), offsets.CheckpointOptions{})
	if err != nil {
		_ = lease.Release(ctx)
		return nil, err
	}
	loaded, err := cp.Load(ctx)
	if err != nil {
		_ = lease.Release(ctx)
		return nil, fmt.Errorf("broker: read the bucket checkpoint: %w", err)
	}
	d := &Keeper{cfg: cfg, log: log, fs: deps.FS, src: deps.Source, failover: deps.Failover,
		id: lease.Identity(), prev: prev, lease: lease, cp: cp, loaded: loaded,
		prevMax: map[QueueKey]int64{}, qres: map[QueueKey]int64{}, near: make(chan struct{}, 1)}
	d.covered.Store(&map[string]int32{})
	if cl, ok, err := DecodeCommitLog(loaded); ok {
		d.history = cl.Epochs
	} else if err != nil {
		log.Warn("checkpoint commitlog section unreadable", "err", err)
	}
	log.Info("holding the bucket lease", "instance", d.id.Instance, "epoch", d.id.Epoch,
		"ttl", ttl, "checkpointVersion", cp.Version())
	return d, nil
}

// ID is this run's identity: instance and lease epoch.
func (d *Keeper) ID() offsets.Identity { return d.id }

// Prev is what the data dir's writer identity file said at Open (nil: a
// new or pre-epoch data dir).
func (d *Keeper) Prev() *offsets.WriterState { return d.prev }

// Lease is the prefix's lease this keeper holds.
func (d *Keeper) Lease() *offsets.Lease { return d.lease }

// Loaded is the checkpoint read at Open (nil on a new prefix).
func (d *Keeper) Loaded() *offsets.Checkpoint { return d.loaded }

// CheckpointVersion is the version of the last checkpoint read or written.
func (d *Keeper) CheckpointVersion() int64 { return d.cp.Version() }

// Fenced reports whether another broker took the prefix over: nothing is
// written to it any more.
func (d *Keeper) Fenced() bool { return d.fenced.Load() }

// StopWriting makes the keeper write nothing more, as if fenced, without
// the log and the role change (tests: a broker that died).
func (d *Keeper) StopWriting() { d.fenced.Store(true) }

// SetFrom records where this epoch takes the log over (the log's end once
// the store is open), before anything is written under it.
func (d *Keeper) SetFrom(from int64) { d.from = from }

// History is the epoch history as this run's checkpoints write it: the
// loaded one's plus this epoch's start.
func (d *Keeper) History() []EpochStart { return WithEpoch(d.history, d.id.Epoch, d.from) }

// LoadedHistory is the epoch history of the checkpoint this run loaded
// (nil without one): the epochs before this run's.
func (d *Keeper) LoadedHistory() []EpochStart { return slices.Clone(d.history) }

// SavedProgress is the internal services' progress in the last checkpoint
// written (nil before the first).
func (d *Keeper) SavedProgress() map[QueueKey]int64 {
	if p := d.savedProgress.Load(); p != nil {
		return *p
	}
	return nil
}

// RecordWriter makes the data dir say that this run (instance, epoch)
// writes it. Called once the local data is judged ours, before the store
// opens: anything written locally from now on is under the new epoch.
func (d *Keeper) RecordWriter() error {
	err := offsets.WriteWriterState(d.fs, filepath.Join(d.cfg.DataDir, offsets.WriterStateFile),
		offsets.WriterState{Broker: d.id.Broker, Instance: d.id.Instance, Epoch: d.id.Epoch, BootID: d.cfg.BootID})
	if err != nil {
		return fmt.Errorf("broker: record the writer of the data dir: %w", err)
	}
	return nil
}

// Writable reports whether this broker may acknowledge writes and write to
// the bucket now, and under which epoch: not once another broker took the
// prefix, and not while the lease may have lapsed (its last renewal began
// more than TTL minus a margin ago on the monotonic clock). No I/O, no lock.
func (d *Keeper) Writable() (int64, error) {
	if d.fenced.Load() {
		return 0, offsets.ErrFenced
	}
	if err := d.lease.Check(); err != nil {
		if errors.Is(err, offsets.ErrFenced) {
			d.maybeFenced(err)
		}
		return 0, err
	}
	return d.id.Epoch, nil
}

func (d *Keeper) maybeFenced(err error) error {
	if errors.Is(err, offsets.ErrFenced) && d.fenced.CompareAndSwap(false, true) {
		if d.cfg.HAFailover {
			d.log.Error("another broker took over this bucket prefix: this broker stops writing to the bucket, refuses sends and rejoins as its slave", "err", err)
			d.failover.Fenced(err)
		} else {
			d.log.Error("another broker took over this bucket prefix: this broker stops writing to the bucket and refuses sends; restart it", "err", err)
		}
	}
	return err
}

// HoldRenewals stops every renewal of the lease (the renewal loop's and
// the checkpoints'), as a partition from the bucket would, until release
// is called. For tests.
func (d *Keeper) HoldRenewals() (release func()) {
	d.saveMu.Lock()
	d.renewMu.Lock()
	return func() {
		d.renewMu.Unlock()
		d.saveMu.Unlock()
	}
}

// KeepRenewed renews the lease as Run does (every fifth of its TTL)
// until ctx ends: for work New does before Run starts, which may outlast
// the lease's validity (folding a WAL tail into segments).
func (d *Keeper) KeepRenewed(ctx context.Context) { d.renew(ctx) }

// renewEvery is how often the lease is renewed, and how long one renewal
// may take: a fifth of its TTL. Sends stop TTL - TTL/5 (four fifths) after
// the start of the last successful renewal (offsets.Lease.Check), and
// renewals start one, two and three fifths after it: the first two may
// fail, even by hanging until their deadline, and the third still has a
// full fifth to land before that. (A quarter would leave the third a
// twentieth of the TTL.) A renewal is one small conditional PUT.
func renewEvery(ttl time.Duration) time.Duration { return ttl / 5 }

// renew renews the lease every renewEvery until ctx ends, fenced or
// released: on its own timer, so neither the checkpoint interval nor a
// slow checkpoint (save holds saveMu, never the lease's op lock across
// its bucket writes) delays it. A failure is logged once, and so is the
// recovery; Check refuses sends meanwhile once the lease runs short.
func (d *Keeper) renew(ctx context.Context) {
	every := renewEvery(d.lease.TTL())
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if d.fenced.Load() || d.released.Load() {
			return
		}
		d.renewMu.Lock()
		rctx, cancel := context.WithTimeout(ctx, every)
		err := d.lease.Renew(rctx)
		cancel()
		d.renewMu.Unlock()
		switch {
		case err == nil:
			if failing {
				d.log.Info("bucket lease renewed again")
				failing = false
			}
		case ctx.Err() != nil || d.released.Load():
			return
		case errors.Is(d.maybeFenced(err), offsets.ErrFenced):
			return
		case !failing:
			d.log.Warn("bucket lease renewal failed; retrying every fifth of the TTL (sends are refused once the lease may have lapsed)",
				"err", err, "every", every, "validFor", d.lease.ValidFor())
			failing = true
		}
	}
}

// Run renews the lease (renew) and checkpoints every interval, and early
// when the log or a queue nears its reservation, until ctx ends; it
// returns once the renewal loop has too. Call it after BlockWrites.
func (d *Keeper) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.renew(ctx)
	}()
	defer wg.Wait()
	t := time.NewTicker(d.cfg.CheckpointInterval)
	defer t.Stop()
	watch := time.NewTicker(100 * time.Millisecond)
	defer watch.Stop()
	// now writes one checkpoint, bounded by the interval; a failure is
	// logged with why it was written (and retried by the next trigger).
	now := func(failed string) {
		cctx, cancel := context.WithTimeout(ctx, d.cfg.CheckpointInterval)
		defer cancel()
		if err := d.Checkpoint(cctx); err != nil && ctx.Err() == nil && !d.fenced.Load() {
			d.log.Warn(failed, "err", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.near:
			if !d.fenced.Load() {
				now("early checkpoint (a write came near the reservation) failed")
				t.Reset(d.cfg.CheckpointInterval)
			}
		case <-watch.C:
			if !d.fenced.Load() && d.nearReservation() {
				now("early checkpoint (reservation nearly used) failed")
				t.Reset(d.cfg.CheckpointInterval)
			}
		case <-t.C:
			now("checkpoint to the bucket failed; retrying next interval")
		}
	}
}

// Final writes the last checkpoint and releases the lease (shutdown):
// clean only when the drain uploaded everything; otherwise it records the
// range left on local disk (drainFailed).
func (d *Keeper) Final(ctx context.Context, drainFailed *OffsetRange) error {
	err := d.save(ctx, true, drainFailed == nil, drainFailed)
	d.released.Store(true)
	if !d.fenced.Load() {
		err = errors.Join(err, d.lease.Release(ctx))
	}
	return err
}
