package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/tier"
)

// Checkpoint section names.
const (
	sectionConsumerOffsets    = "consumerOffsets"
	sectionTopics             = "topics"
	sectionSubscriptionGroups = "subscriptionGroups"
	sectionDelayOffsets       = "delayOffsets"
	sectionCommitLog          = "commitlog"
)

// commitLogState is the "commitlog" checkpoint section: how far the log
// got, how far it may have got before the next checkpoint (Reserved: a
// broker restored after an unclean loss starts its log there, so no offset
// or msgId handed out is ever reused), the retention floor and every
// queue's range.
type commitLogState struct {
	HWM      int64                                `json:"hwm"`
	Reserved int64                                `json:"reserved"`
	Floor    int64                                `json:"floor"`
	Queues   map[string]map[string]queueRangeJSON `json:"queues"`
	// Clean: written at a graceful shutdown, after the last write; the
	// ranges are exact and no reservation is needed.
	Clean bool `json:"clean,omitempty"`
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
// metadata: it holds the prefix's lease (fencing a second broker), writes a
// checkpoint every STRATAMQ_CHECKPOINT_INTERVAL and at shutdown, and keeps
// the checkpoint read at start for the restore.
type durability struct {
	b      *Broker
	id     offsets.Identity
	lease  *offsets.Lease
	cp     *offsets.Checkpointer
	loaded *offsets.Checkpoint // read at start; nil on a new prefix
	fenced atomic.Bool

	saveMu   sync.Mutex         // serializes save
	finished bool               // the final checkpoint was attempted; guarded by saveMu
	pending  pendingReservation // reservations of the checkpoint being written
	mu       sync.Mutex         // serializes save; guards the fields below
	prevHWM  int64
	reserved int64              // commitlog reservation of the last checkpoint written
	prevMax  map[queueKey]int64 // queue max at the previous checkpoint
	qres     map[queueKey]int64 // queue reservations of the last checkpoint written
}

// queueReserveMin is the least headroom a queue reservation leaves.
const queueReserveMin = 1024

// newDurability takes the lease on the broker's prefix and reads the last
// checkpoint. A live lease held by another broker is an error naming it.
func newDurability(b *Broker, bucket tier.Bucket) (*durability, error) {
	id, err := offsets.NewIdentity(b.cfg.BrokerName)
	if err != nil {
		return nil, err
	}
	store := newCheckpointStore(bucket)
	// The bucket must answer at start: without the lease two brokers could
	// write one prefix. Transient errors are retried for a while.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lease *offsets.Lease
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 3*time.Second) {
		ttl := b.cfg.LeaseTTL
		if ttl <= 0 {
			ttl = offsets.LeaseTTL(b.cfg.CheckpointInterval)
		}
		lease, err = offsets.AcquireLease(ctx, store, id, ttl, time.Now)
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
	cp, err := offsets.NewCheckpointer(store, id, offsets.CheckpointOptions{})
	if err != nil {
		return nil, err
	}
	loaded, err := cp.Load(ctx)
	if err != nil {
		_ = lease.Release(ctx)
		return nil, fmt.Errorf("broker: read the bucket checkpoint: %w", err)
	}
	d := &durability{b: b, id: id, lease: lease, cp: cp, loaded: loaded, prevMax: map[queueKey]int64{}, qres: map[queueKey]int64{}}
	b.log.Info("holding the bucket lease", "instance", id.Instance, "expires", lease.ExpiresAt(), "checkpointVersion", cp.Version())
	return d, nil
}

// sections gathers the checkpoint. clean marks the final one of a graceful
// shutdown.
func (d *durability) sections(clean bool) (map[string]json.RawMessage, error) {
	b := d.b
	offsetsJSON, _, err := b.offsets.Encode()
	if err != nil {
		return nil, err
	}
	topicsJSON, err := json.Marshal(b.topics.Wrapper())
	if err != nil {
		return nil, err
	}
	groupsJSON, _, err := b.groups.Encode()
	if err != nil {
		return nil, err
	}
	hwm := b.store.MaxPhysOffset()
	d.mu.Lock()
	defer d.mu.Unlock()
	grew := max(hwm-d.prevHWM, 0)
	d.prevHWM = hwm
	cl := commitLogState{
		HWM: hwm,
		// Room for what may be written before the next checkpoint lands:
		// two segments plus twice what the last interval wrote. The
		// watcher checkpoints early when the log gets near it.
		Reserved: hwm + 2*int64(b.cfg.SegmentSize) + 2*grew,
		Floor:    b.store.MinPhysOffset(),
		Queues:   map[string]map[string]queueRangeJSON{},
		Clean:    clean,
	}
	qres := map[queueKey]int64{}
	for _, topic := range b.topics.Names() {
		tc, ok := b.topics.Get(topic)
		if !ok {
			continue
		}
		n := max(tc.ReadQueueNums, tc.WriteQueueNums)
		for q := int32(0); q < n; q++ {
			mx := b.store.MaxQueueOffset(topic, q)
			if mx == 0 {
				continue
			}
			if cl.Queues[topic] == nil {
				cl.Queues[topic] = map[string]queueRangeJSON{}
			}
			k := queueKey{topic, q}
			res := mx + max(queueReserveMin, 2*max(mx-d.prevMax[k], 0))
			d.prevMax[k] = mx
			qres[k] = res
			cl.Queues[topic][strconv.Itoa(int(q))] = queueRangeJSON{Min: b.store.MinQueueOffset(topic, q), Max: mx, Reserved: res}
		}
	}
	clJSON, err := json.Marshal(cl)
	if err != nil {
		return nil, err
	}
	d.pending = pendingReservation{log: cl.Reserved, queues: qres}
	return map[string]json.RawMessage{
		sectionConsumerOffsets:    offsetsJSON,
		sectionTopics:             topicsJSON,
		sectionSubscriptionGroups: groupsJSON,
		sectionDelayOffsets:       json.RawMessage(`{"offsetTable":{}}`),
		sectionCommitLog:          clJSON,
	}, nil
}

type pendingReservation struct {
	log    int64
	queues map[queueKey]int64
}

// checkpoint renews the lease and writes a checkpoint. Once fenced it
// writes nothing, ever.
func (d *durability) checkpoint(ctx context.Context) error { return d.save(ctx, false) }

func (d *durability) save(ctx context.Context, clean bool) error {
	// One save at a time, and none after the final (clean) one: a periodic
	// checkpoint landing after it would make a clean stop look like a crash.
	d.saveMu.Lock()
	defer d.saveMu.Unlock()
	if d.finished {
		return nil
	}
	if clean {
		d.finished = true
	}
	if d.fenced.Load() {
		return offsets.ErrFenced
	}
	if err := d.lease.Renew(ctx); err != nil {
		return d.maybeFenced(err)
	}
	secs, err := d.sections(clean)
	if err != nil {
		return err
	}
	if err := d.cp.Save(ctx, secs); err != nil {
		return d.maybeFenced(err)
	}
	d.mu.Lock()
	d.reserved, d.qres = d.pending.log, d.pending.queues
	d.mu.Unlock()
	return nil
}

// nearReservation reports whether the log or a queue has used more than
// half of the headroom the last checkpoint reserved: then the next
// checkpoint is written now rather than at the interval.
func (d *durability) nearReservation() bool {
	d.mu.Lock()
	reserved, qres, prevHWM, prevMax := d.reserved, d.qres, d.prevHWM, d.prevMax
	defer d.mu.Unlock() // sections replaces prevMax's entries under mu
	if reserved == 0 {
		return false
	}
	if hwm := d.b.store.MaxPhysOffset(); hwm-prevHWM > (reserved-prevHWM)/2 {
		return true
	}
	for k, res := range qres {
		prev := prevMax[k]
		if mx := d.b.store.MaxQueueOffset(k.topic, k.queue); mx-prev > (res-prev)/2 {
			return true
		}
	}
	return false
}

func (d *durability) maybeFenced(err error) error {
	if errors.Is(err, offsets.ErrFenced) && d.fenced.CompareAndSwap(false, true) {
		d.b.log.Error("another broker took over this bucket prefix: this broker stops writing to the bucket and refuses sends; restart it", "err", err)
	}
	return err
}

// run checkpoints every interval, and early when the log or a queue nears
// its reservation, until ctx ends.
func (d *durability) run(ctx context.Context) {
	t := time.NewTicker(d.b.cfg.CheckpointInterval)
	defer t.Stop()
	watch := time.NewTicker(100 * time.Millisecond)
	defer watch.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-watch.C:
			if d.fenced.Load() || !d.nearReservation() {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, d.b.cfg.CheckpointInterval)
			if err := d.checkpoint(cctx); err != nil && ctx.Err() == nil && !d.fenced.Load() {
				d.b.log.Warn("early checkpoint (reservation nearly used) failed", "err", err)
			}
			cancel()
			t.Reset(d.b.cfg.CheckpointInterval)
		case <-t.C:
			cctx, cancel := context.WithTimeout(ctx, d.b.cfg.CheckpointInterval)
			if err := d.checkpoint(cctx); err != nil && ctx.Err() == nil && !d.fenced.Load() {
				d.b.log.Warn("checkpoint to the bucket failed; retrying next interval", "err", err)
			}
			cancel()
		}
	}
}

// final writes the last checkpoint and releases the lease (shutdown).
func (d *durability) final(ctx context.Context) error {
	err := d.save(ctx, true)
	if !d.fenced.Load() {
		err = errors.Join(err, d.lease.Release(ctx))
	}
	return err
}
