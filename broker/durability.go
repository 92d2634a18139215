package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

// Checkpoint section names.
const (
	sectionConsumerOffsets    = "consumerOffsets"
	sectionTopics             = "topics"
	sectionSubscriptionGroups = "subscriptionGroups"
	sectionDelayOffsets       = "delayOffsets"
	sectionTimerOffsets       = "timerOffsets"
	sectionCommitLog          = "commitlog"
	// sectionTransactions ("transactions", broker/txn) is the
	// transaction check service's progress.
)

// commitLogState is the "commitlog" checkpoint section: how far the log
// got durably, how far it may get before the next checkpoint (Reserved: a
// broker restored after an unclean loss starts its log there, so no offset
// or msgId handed out is ever reused; the store refuses writes past it),
// the retention floor and every queue's range.
type commitLogState struct {
	// HWM is the durable (fdatasynced) end of the log when the checkpoint
	// was taken: what a power loss cannot take back.
	HWM      int64                                `json:"hwm"`
	Reserved int64                                `json:"reserved"`
	Floor    int64                                `json:"floor"`
	Queues   map[string]map[string]queueRangeJSON `json:"queues"`
	// NewQueueReserved is the reservation of every queue of a checkpointed
	// topic that Queues does not list (no message yet): after an unclean
	// loss such queues resume there.
	NewQueueReserved int64 `json:"newQueueReserved,omitempty"`
	// Clean: written at a graceful shutdown after a complete drain: every
	// message is in the bucket, the ranges are exact and no reservation is
	// needed.
	Clean bool `json:"clean,omitempty"`
	// DrainFailed: written at a graceful shutdown whose drain did not
	// finish: these commitlog offsets are only on that broker's disk. A
	// broker on an empty disk refuses to start over them unless
	// STRATAMQ_ACCEPT_LOSS is set.
	DrainFailed *offsetRange `json:"drainFailed,omitempty"`
	// Epochs is the epoch history, oldest first: where each epoch's master
	// took the log over (failover.go; a rejoining slave cuts its log by it).
	Epochs []epochStart `json:"epochs,omitempty"`
	// Deleted is the store's tombstones (store.Tombstones): per deleted
	// queue, the offset its next incarnation starts at, so a restore
	// neither brings the deleted queue back nor numbers it from 0 again.
	Deleted map[string]map[string]int64 `json:"deleted,omitempty"`
}

// offsetRange is [From, To) of the commitlog.
type offsetRange struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// queueRangeJSON is one queue's range; Reserved is past every queue offset
// that may be handed out before the next checkpoint (no queue offset is
// reused after an unclean loss).
type queueRangeJSON struct {
	Min      int64 `json:"min"`
	Max      int64 `json:"max"`
	Reserved int64 `json:"reserved,omitempty"`
}

// durability makes the bucket the system of record for the broker's
// metadata and fences the broker: it holds the prefix's lease (one writer
// per prefix; the epoch of the lease is stamped into every checkpoint and
// manifest write), refuses acknowledgements once the lease may have
// lapsed (monotonic clock, offsets.Lease.Check), writes a checkpoint
// every STRATAMQ_CHECKPOINT_INTERVAL and at shutdown, and gives the store
// the offset reservation of the last checkpoint written.
type durability struct {
	b      *Broker
	id     offsets.Identity     // this run: instance and lease epoch
	prev   *offsets.WriterState // what the data dir said at start; nil: a new (or pre-epoch) data dir
	lease  *offsets.Lease
	cp     *offsets.Checkpointer
	loaded *offsets.Checkpoint // read at start; nil on a new prefix
	fenced atomic.Bool
	// from is where this epoch took the log over (the log's end when the
	// store opened); recorded in the checkpoint's epoch history before
	// anything is written under the epoch (failover.go).
	from    int64
	history []epochStart // the loaded checkpoint's

	// covered is the topics of the last checkpoint written, with their
	// queue counts: a send to a queue beyond it waits for a checkpoint
	// that lists it (awaitCovered), so a restore after an unclean loss
	// knows every queue that may have been written.
	covered atomic.Pointer[map[string]int32]

	saveMu    sync.Mutex         // serializes save
	finished  bool               // the final checkpoint was attempted; guarded by saveMu
	drainMark *offsetRange       // set when a drain begins: kept in every checkpoint until the final one; guarded by saveMu
	pending   pendingReservation // reservations of the checkpoint being written; guarded by mu
	mu        sync.Mutex         // guards the fields below
	prevHWM   int64
	prevAt    time.Time          // when prevHWM and prevMax were taken
	reserved  int64              // commitlog reservation of the last checkpoint written
	prevMax   map[queueKey]int64 // queue max at the previous checkpoint
	qres      map[queueKey]int64 // queue reservations of the last checkpoint written
	lastTry   time.Time          // of the last checkpoint attempt while none is written yet

	near chan struct{} // the store says a write came near the reservation: checkpoint now
	// released is set before the final Release: the renewal loop stops.
	released atomic.Bool
	// renewMu is held by the renewal loop around each renewal (with
	// saveMu, a test holds it to stop every renewal, as a partition from
	// the bucket would: holdRenewals).
	renewMu sync.Mutex
	// resv is the reservation the last checkpoint written gave the store.
	resv atomic.Pointer[store.Reservation]
	// savedProgress is where the internal services stood in the last
	// checkpoint written (what a restore resumes from): the schedule
	// queues' and the transaction check's progress. Retention may expire
	// those internal queues up to it (package retention, through wire_retention.go).
	savedProgress atomic.Pointer[internalProgress]
}

// internalProgress is the progress of the internal services, per internal
// queue: every record below it is consumed by the broker itself
// (delivered, or resolved) and never read again.
type internalProgress map[queueKey]int64

// wakeNear asks run for a checkpoint now (store.Reservation.OnNear: never
// blocks).
func (d *durability) wakeNear() {
	select {
	case d.near <- struct{}{}:
	default:
	}
}

// Reservation headroom. Generous on purpose: a reservation costs nothing
// but a jump in offsets after an unclean loss (a restore starts past it),
// while a send that uses one up waits for the next checkpoint (at most
// STRATAMQ_CHECKPOINT_WAIT) and is refused if none lands. The lease (TTL
// minus margin) stops sends in an outage long before these do at any
// realistic rate.
const (
	// queueReserveMin is the least headroom a queue reservation leaves,
	// and the reservation of a checkpointed queue without messages.
	queueReserveMin = 1 << 16
	// logReserveMin is the least commitlog headroom.
	logReserveMin = 1 << 30
	// reserveIntervals: the headroom covers this many checkpoint
	// intervals at the rate the log or the queue grew since the previous
	// checkpoint attempt. The watcher checkpoints when half of it is
	// used, so at a steady rate checkpoints come at the interval and
	// early ones only when the rate climbs.
	reserveIntervals = 4
	// reserveMaxFactor bounds what a rate measured over less than an
	// interval (an early checkpoint after a burst) adds: at most this many
	// times the least headroom (what an unclean loss may then skip).
	reserveMaxFactor = 64
)

// headroom is how far a reservation reaches past the log's or a queue's
// end, for grew bytes or offsets written over elapsed since the previous
// checkpoint attempt: reserveIntervals × grew (at the interval: what it
// always was), or, after less than an interval, reserveIntervals
// intervals at that rate, up to reserveMaxFactor × least; at least least.
func (d *durability) headroom(grew int64, elapsed time.Duration, least int64) int64 {
	grew = max(grew, 0)
	h := reserveIntervals * grew
	if iv := d.b.cfg.CheckpointInterval; elapsed < iv {
		perInterval := float64(grew) * float64(iv) / float64(max(elapsed, time.Millisecond))
		h = max(h, int64(min(reserveIntervals*perInterval, float64(reserveMaxFactor)*float64(least))))
	}
	return max(h, least)
}

// checkpointWait is how long a send that reached a reservation waits for
// the checkpoint it triggered (store.Reservation.Wait).
func (d *durability) checkpointWait() time.Duration {
	if w := d.b.cfg.CheckpointWait; w > 0 {
		return w
	}
	return defaultCheckpointWait
}

func (d *durability) queueReserveMin() int64 {
	if n := d.b.cfg.ReserveQueueMin; n > 0 {
		return n
	}
	return queueReserveMin
}

func (d *durability) logReserveMin() int64 {
	if n := d.b.cfg.ReserveLogMin; n > 0 {
		return n
	}
	return logReserveMin
}

// errNotCheckpointed: a send to a queue no durable checkpoint lists yet,
// and the checkpoint that would list it did not succeed.
var errNotCheckpointed = errors.New("broker: the bucket checkpoint does not list this queue yet")

// writerStatePath is the data dir's writer identity file.
func (b *Broker) writerStatePath() string {
	return filepath.Join(b.cfg.DataDir, offsets.WriterStateFile)
}

// newDurability takes the lease on the broker's prefix and reads the last
// checkpoint. A lease another live broker keeps renewing is an error
// naming it; one that stays unchanged for a full TTL is taken over.
//
// handed, if set, is a lease already taken (a promoted slave's): it is
// used as is.
func newDurability(b *Broker, bucket tier.Bucket, handed *offsets.Lease) (*durability, error) {
	prev, err := offsets.ReadWriterState(b.fs, b.writerStatePath())
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
	id := offsets.IdentityFor(b.cfg.BrokerName, inst)
	cs := newCheckpointStore(bucket)
	ttl := b.cfg.LeaseTTL
	if ttl <= 0 {
		ttl = offsets.LeaseTTL(b.cfg.CheckpointInterval)
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
		NoWait: b.cfg.HAFailover,
		HAAddr: b.haAdvertise(), Role: b.cfg.Role, Mono: b.mono,
		OnWait: func(held offsets.LeaseRecord, wait time.Duration) {
			b.log.Warn("another broker instance holds the bucket lease; waiting one TTL for it to renew or lapse",
				"holder", held.Identity().String(), "renewedAt", held.RenewedAt, "wait", wait)
		},
	}
	if lease == nil && b.cfg.HAFailover && prev != nil && (prev.Replica || !b.logSurvivedWhole(prev)) {
		// This data dir's master stopped without releasing the lease, in
		// another boot: after a power loss its log may lack the tail a
		// slave holds and acknowledged (flush=async, sync_master). It
		// must not take the lease back over such a slave: it watches its
		// own lease lapse like a slave does and competes with the copies
		// of the log that the slaves publish; the best live copy wins.
		// The same for a data dir that ran as a slave since: the lease
		// may still name its instance (it lost its own lease's contest and
		// nobody took it yet), but its copy is a replica's, judged like
		// any other.
		_, end, err := store.LogEnd(b.fs, filepath.Join(b.cfg.DataDir, "store"), int(b.cfg.MaxMessageSize))
		if err != nil {
			return nil, fmt.Errorf("broker: read the local log's end: %w", err)
		}
		opts.WatchOwn, opts.ContestNow = true, true
		opts.Contest = b.newContest(cs, ttl, func() (int64, int64) { return prev.Epoch, end })
	}
	for wait := 100 * time.Millisecond; lease == nil; wait = min(2*wait, 3*time.Second) {
		lease, err = offsets.AcquireLease(ctx, cs, id, ttl, opts)
		if err == nil {
			break
		}
		if errors.Is(err, offsets.ErrLeaseHeld) {
			return nil, fmt.Errorf("broker: refusing to start: %w", err)
		}
		b.log.Warn("bucket lease not acquired yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("broker: acquire the bucket lease (the bucket must be reachable at start): %w", err)
		case <-time.After(wait):
		}
	}
	if opts.Contest != nil {
		opts.Contest.Clear(ctx)
	}
	if b.cfg.HAFailover {
		offsets.PruneReplicas(ctx, cs, lease.Epoch())
	}
	cp, err := offsets.NewCheckpointer(leaseBound(cs, lease), lease.Identity(), offsets.CheckpointOptions{})
	if err != nil {
		_ = lease.Release(ctx)
		return nil, err
	}
	loaded, err := cp.Load(ctx)
	if err != nil {
		_ = lease.Release(ctx)
		return nil, fmt.Errorf("broker: read the bucket checkpoint: %w", err)
	}
	d := &durability{b: b, id: lease.Identity(), prev: prev, lease: lease, cp: cp, loaded: loaded,
		prevMax: map[queueKey]int64{}, qres: map[queueKey]int64{}, near: make(chan struct{}, 1)}
	d.covered.Store(&map[string]int32{})
	if cl, ok := b.commitLogOf(loaded); ok {
		d.history = cl.Epochs
	}
	b.log.Info("holding the bucket lease", "instance", d.id.Instance, "epoch", d.id.Epoch,
		"ttl", ttl, "checkpointVersion", cp.Version())
	return d, nil
}

// recordWriter makes the data dir say that this run (instance, epoch)
// writes it. Called once the local data is judged ours, before the store
// opens: anything written locally from now on is under the new epoch.
func (d *durability) recordWriter() error {
	err := offsets.WriteWriterState(d.b.fs, d.b.writerStatePath(),
		offsets.WriterState{Broker: d.id.Broker, Instance: d.id.Instance, Epoch: d.id.Epoch, BootID: d.b.bootID})
	if err != nil {
		return fmt.Errorf("broker: record the writer of the data dir: %w", err)
	}
	return nil
}

// writable reports whether this broker may acknowledge writes and write to
// the bucket now, and under which epoch: not once another broker took the
// prefix, and not while the lease may have lapsed (its last renewal began
// more than TTL minus a margin ago on the monotonic clock). No I/O, no lock.
func (d *durability) writable() (int64, error) {
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

// sections gathers the checkpoint. clean marks the final one of a graceful
// shutdown after a complete drain; drainFailed the final one after an
// incomplete drain.
func (d *durability) sections(clean bool, drainFailed *offsetRange) (map[string]json.RawMessage, error) {
	b := d.b
	offsetsJSON, _, err := b.offsets.Encode()
	if err != nil {
		return nil, err
	}
	tw := b.topics.Wrapper()
	topicsJSON, err := json.Marshal(tw)
	if err != nil {
		return nil, err
	}
	groupsJSON, _, err := b.groups.Encode()
	if err != nil {
		return nil, err
	}
	// The internal services' progress counts only the writes it depends
	// on that a restore from this checkpoint finds: those the bucket lists
	// or, on a sync_master, a slave holds (durable_progress.go). The same
	// bound for the sections and for savedProgress (what retention may
	// expire of the internal queues).
	localEnd, bucketEnd := b.durableEnds()
	b.sched.Trim(min(localEnd, bucketEnd))
	b.trans.Trim(min(localEnd, bucketEnd))
	progress := b.schedProgress(bucketEnd) // wire_schedule.go
	ts := b.trans.StateAt(bucketEnd)
	progress[queueKey{TransHalfTopic, 0}] = ts.HalfOffset
	progress[queueKey{TransOpHalfTopic, 0}] = ts.OpOffset
	delayJSON, timerJSON, err := b.sched.Sections(bucketEnd)
	if err != nil {
		return nil, err
	}
	transJSON, err := json.Marshal(ts)
	if err != nil {
		return nil, err
	}
	popJSON, err := b.pop.Section() // package pop
	if err != nil {
		return nil, err
	}
	covered := make(map[string]int32, len(tw.TopicConfigTable))
	for name, tc := range tw.TopicConfigTable {
		covered[name] = queueCount(tc)
	}
	// What sends refused at the current reservation needed: the next
	// one covers it, however large the request.
	var wantLog int64
	var wantQ map[string]map[int32]int64
	if r := d.resv.Load(); r != nil {
		wantLog, wantQ = r.Wanted()
	}
	// The durable end first, then the writer's end: durable <= end.
	durable := b.store.FlushedPhysOffset()
	end := b.store.MaxPhysOffset()
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	elapsed := now.Sub(d.prevAt)
	d.prevAt = now
	grew := max(end-d.prevHWM, 0)
	d.prevHWM = end
	cl := commitLogState{
		HWM: durable,
		// Room for what may be written before the next checkpoint lands
		// (headroom: a few intervals at the rate the log grew), at least
		// two segments and logReserveMin. The watcher checkpoints early
		// when half of it is used.
		Reserved:         max(end, wantLog) + d.headroom(grew, elapsed, max(2*int64(b.cfg.SegmentSize), d.logReserveMin())),
		Floor:            b.store.MinPhysOffset(),
		Queues:           map[string]map[string]queueRangeJSON{},
		NewQueueReserved: d.queueReserveMin(),
		Clean:            clean,
		DrainFailed:      drainFailed,
		Epochs:           withEpoch(d.history, d.id.Epoch, d.from),
	}
	for topic, ids := range b.store.Tombstones() {
		for id, next := range ids {
			if cl.Deleted == nil {
				cl.Deleted = map[string]map[string]int64{}
			}
			if cl.Deleted[topic] == nil {
				cl.Deleted[topic] = map[string]int64{}
			}
			cl.Deleted[topic][strconv.Itoa(int(id))] = next
		}
	}
	qres := map[queueKey]int64{}
	for topic, n := range covered {
		for q := int32(0); q < n; q++ {
			mx := b.store.MaxQueueOffset(topic, q)
			want := wantQ[topic][q]
			if mx == 0 && want == 0 {
				continue
			}
			if cl.Queues[topic] == nil {
				cl.Queues[topic] = map[string]queueRangeJSON{}
			}
			k := queueKey{topic, q}
			res := max(mx, want) + d.headroom(mx-d.prevMax[k], elapsed, d.queueReserveMin())
			d.prevMax[k] = mx
			qres[k] = res
			cl.Queues[topic][strconv.Itoa(int(q))] = queueRangeJSON{Min: b.store.MinQueueOffset(topic, q), Max: mx, Reserved: res}
		}
	}
	clJSON, err := json.Marshal(cl)
	if err != nil {
		return nil, err
	}
	d.pending = pendingReservation{log: cl.Reserved, queues: qres, covered: covered, progress: progress}
	return map[string]json.RawMessage{
		sectionConsumerOffsets:    offsetsJSON,
		sectionTopics:             topicsJSON,
		sectionSubscriptionGroups: groupsJSON,
		sectionDelayOffsets:       delayJSON,
		sectionTimerOffsets:       timerJSON,
		sectionCommitLog:          clJSON,
		sectionTransactions:       transJSON,
		sectionPop:                popJSON,
	}, nil
}

type pendingReservation struct {
	log      int64
	queues   map[queueKey]int64
	covered  map[string]int32
	progress internalProgress
}

// checkpoint renews the lease and writes a checkpoint. Once fenced it
// writes nothing, ever. If it fails while sends wait at the reservation
// (it came near or was hit), they are refused now rather than at the end
// of their wait: the bucket did not answer.
func (d *durability) checkpoint(ctx context.Context) error {
	err := d.save(ctx, false, false, nil)
	if err != nil {
		if r := d.resv.Load(); r != nil && r.Near() {
			r.Fail(fmt.Errorf("the checkpoint to the bucket failed: %w", err))
		}
	}
	return err
}

// markDraining writes a checkpoint saying that a drain began with r not
// yet in the bucket (drainFailed = r), before the drain: if the drain then
// fails and the final checkpoint cannot be written either (a bucket that
// stops answering), the bucket still says that a stop left messages on
// local disk, and an empty disk refuses to start over them. Every later
// checkpoint keeps the mark until the final one.
func (d *durability) markDraining(ctx context.Context, r *offsetRange) error {
	d.saveMu.Lock()
	d.drainMark = r
	d.saveMu.Unlock()
	return d.checkpoint(ctx)
}

// save writes a checkpoint; final marks the last one of a shutdown, clean
// a complete drain, drainFailed the range an incomplete one left.
func (d *durability) save(ctx context.Context, final, clean bool, drainFailed *offsetRange) error {
	// One save at a time, and none after the final one: a periodic
	// checkpoint landing after it would make a clean stop look like a crash.
	d.saveMu.Lock()
	defer d.saveMu.Unlock()
	if d.finished {
		return nil
	}
	if final {
		d.finished = true
	} else {
		drainFailed = d.drainMark
	}
	if d.fenced.Load() {
		return offsets.ErrFenced
	}
	// The checkpoint is written only while we hold the lease. The renewal
	// loop (renew) keeps it; a checkpoint renews it first itself only when
	// less than half a TTL is left (a renewal failed, or none ran yet), so
	// it is never written close to the lease's end (Check is nil right
	// after a successful Renew).
	if d.lease.ValidFor() < d.lease.TTL()/2 {
		if err := d.lease.Renew(ctx); err != nil {
			return d.maybeFenced(err)
		}
	}
	secs, err := d.sections(clean, drainFailed)
	if err != nil {
		return err
	}
	if _, err := d.writable(); err != nil {
		return err
	}
	if err := d.cp.Save(ctx, secs); err != nil {
		return d.maybeFenced(err)
	}
	d.mu.Lock()
	p := d.pending
	d.reserved, d.qres = p.log, p.queues
	d.mu.Unlock()
	d.savedProgress.Store(&p.progress)
	// The store may now hand out offsets up to what this checkpoint
	// reserved, and sends may go to every queue it lists.
	r := &store.Reservation{Log: p.log, Queues: map[string]map[int32]int64{}, Default: d.queueReserveMin(),
		OnNear: d.wakeNear, LogNear: d.logReserveMin() / 2, QueueNear: d.queueReserveMin() / 2,
		Wait: d.checkpointWait()}
	for k, v := range p.queues {
		if r.Queues[k.topic] == nil {
			r.Queues[k.topic] = map[int32]int64{}
		}
		r.Queues[k.topic][k.queue] = v
	}
	d.b.store.SetReservation(r)
	d.resv.Store(r)
	d.covered.Store(&p.covered)
	return nil
}

// blockWrites makes the store refuse every write until a checkpoint sets a
// reservation (called once the store is open, before the first one), and
// seeds the growth the reservations are sized by with where the log and
// the queues stand now: the first checkpoint of a run must not count the
// whole existing log as what the last interval wrote (which made every
// restart reserve five times the log).
func (d *durability) blockWrites() {
	st := d.b.store
	// A send before the first checkpoint waits for it (the first one is
	// retried every second while it fails).
	r := &store.Reservation{Log: st.MaxPhysOffset(), OnNear: d.wakeNear, Wait: d.checkpointWait()}
	st.SetReservation(r)
	d.resv.Store(r)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.prevHWM, d.prevAt = st.MaxPhysOffset(), time.Now()
	for topic, n := range d.b.topics.QueueCounts() {
		for q := int32(0); q < n; q++ {
			if mx := st.MaxQueueOffset(topic, q); mx > 0 {
				d.prevMax[queueKey{topic, q}] = mx
			}
		}
	}
}

// awaitCovered returns once the last durable checkpoint lists topic's
// queue queueID, writing one if it does not (a new topic or a new queue:
// after an unclean loss, a restore must know it was written).
func (d *durability) awaitCovered(ctx context.Context, topic string, queueID int32) error {
	if n, ok := (*d.covered.Load())[topic]; ok && queueID < n {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := d.checkpoint(ctx); err != nil {
		if n, ok := (*d.covered.Load())[topic]; ok && queueID < n {
			return nil // another save listed it meanwhile
		}
		return fmt.Errorf("%w: %w", errNotCheckpointed, err)
	}
	if n, ok := (*d.covered.Load())[topic]; ok && queueID < n {
		return nil
	}
	return fmt.Errorf("%w (topic %s has no queue %d)", errNotCheckpointed, topic, queueID)
}

// nearReservation reports whether the log or a queue has used more than
// half of the headroom the last checkpoint reserved, or none is written
// yet: then the next checkpoint is written now rather than at the
// interval.
func (d *durability) nearReservation() bool {
	d.mu.Lock()
	defer d.mu.Unlock() // sections replaces prevMax's entries under mu
	if d.reserved == 0 {
		// No checkpoint yet (the first one failed): retry every second.
		if time.Since(d.lastTry) < time.Second {
			return false
		}
		d.lastTry = time.Now()
		return true
	}
	if r := d.resv.Load(); r != nil && r.Near() {
		// A write came near or hit the reservation and no checkpoint has
		// landed since (the one OnNear asked for failed): retry every
		// second. The growth tests below may not fire any more: a failed
		// attempt already moved prevMax to where the queues stand.
		if time.Since(d.lastTry) < time.Second {
			return false
		}
		d.lastTry = time.Now()
		return true
	}
	if hwm := d.b.store.MaxPhysOffset(); hwm-d.prevHWM > (d.reserved-d.prevHWM)/2 {
		return true
	}
	for k, res := range d.qres {
		prev := d.prevMax[k]
		if mx := d.b.store.MaxQueueOffset(k.topic, k.queue); mx-prev > (res-prev)/2 {
			return true
		}
	}
	return false
}

func (d *durability) maybeFenced(err error) error {
	if errors.Is(err, offsets.ErrFenced) && d.fenced.CompareAndSwap(false, true) {
		if d.b.cfg.HAFailover {
			d.b.log.Error("another broker took over this bucket prefix: this broker stops writing to the bucket, refuses sends and rejoins as its slave", "err", err)
			d.b.requestRoleChange(&RoleChange{Role: RoleSlave, Reason: "fenced: " + err.Error()})
		} else {
			d.b.log.Error("another broker took over this bucket prefix: this broker stops writing to the bucket and refuses sends; restart it", "err", err)
		}
	}
	return err
}

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
func (d *durability) renew(ctx context.Context) {
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
				d.b.log.Info("bucket lease renewed again")
				failing = false
			}
		case ctx.Err() != nil || d.released.Load():
			return
		case errors.Is(d.maybeFenced(err), offsets.ErrFenced):
			return
		case !failing:
			d.b.log.Warn("bucket lease renewal failed; retrying every fifth of the TTL (sends are refused once the lease may have lapsed)",
				"err", err, "every", every, "validFor", d.lease.ValidFor())
			failing = true
		}
	}
}

// run renews the lease (renew) and checkpoints every interval, and early
// when the log or a queue nears its reservation, until ctx ends; it
// returns once the renewal loop has too.
func (d *durability) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.renew(ctx)
	}()
	defer wg.Wait()
	t := time.NewTicker(d.b.cfg.CheckpointInterval)
	defer t.Stop()
	watch := time.NewTicker(100 * time.Millisecond)
	defer watch.Stop()
	// now writes one checkpoint, bounded by the interval; a failure is
	// logged with why it was written (and retried by the next trigger).
	now := func(failed string) {
		cctx, cancel := context.WithTimeout(ctx, d.b.cfg.CheckpointInterval)
		defer cancel()
		if err := d.checkpoint(cctx); err != nil && ctx.Err() == nil && !d.fenced.Load() {
			d.b.log.Warn(failed, "err", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.near:
			if !d.fenced.Load() {
				now("early checkpoint (a write came near the reservation) failed")
				t.Reset(d.b.cfg.CheckpointInterval)
			}
		case <-watch.C:
			if !d.fenced.Load() && d.nearReservation() {
				now("early checkpoint (reservation nearly used) failed")
				t.Reset(d.b.cfg.CheckpointInterval)
			}
		case <-t.C:
			now("checkpoint to the bucket failed; retrying next interval")
		}
	}
}

// final writes the last checkpoint and releases the lease (shutdown):
// clean only when the drain uploaded everything; otherwise it records the
// range left on local disk (drainFailed).
func (d *durability) final(ctx context.Context, drainFailed *offsetRange) error {
	err := d.save(ctx, true, drainFailed == nil, drainFailed)
	d.released.Store(true)
	if !d.fenced.Load() {
		err = errors.Join(err, d.lease.Release(ctx))
	}
	return err
}
