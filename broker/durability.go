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
}

type queueRangeJSON struct {
	Min int64 `json:"min"`
	Max int64 `json:"max"`
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

	mu      sync.Mutex // serializes save
	prevHWM int64
}

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
	d := &durability{b: b, id: id, lease: lease, cp: cp, loaded: loaded}
	b.log.Info("holding the bucket lease", "instance", id.Instance, "expires", lease.ExpiresAt(), "checkpointVersion", cp.Version())
	return d, nil
}

// sections gathers the checkpoint.
func (d *durability) sections() (map[string]json.RawMessage, error) {
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
	grew := max(hwm-d.prevHWM, 0)
	d.prevHWM = hwm
	d.mu.Unlock()
	cl := commitLogState{
		HWM: hwm,
		// Room for what may be written before the next checkpoint lands:
		// two segments plus twice what the last interval wrote.
		Reserved: hwm + 2*int64(b.cfg.SegmentSize) + 2*grew,
		Floor:    b.store.MinPhysOffset(),
		Queues:   map[string]map[string]queueRangeJSON{},
	}
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
			cl.Queues[topic][strconv.Itoa(int(q))] = queueRangeJSON{Min: b.store.MinQueueOffset(topic, q), Max: mx}
		}
	}
	clJSON, err := json.Marshal(cl)
	if err != nil {
		return nil, err
	}
	return map[string]json.RawMessage{
		sectionConsumerOffsets:    offsetsJSON,
		sectionTopics:             topicsJSON,
		sectionSubscriptionGroups: groupsJSON,
		sectionDelayOffsets:       json.RawMessage(`{"offsetTable":{}}`),
		sectionCommitLog:          clJSON,
	}, nil
}

// checkpoint renews the lease and writes a checkpoint. Once fenced it
// writes nothing, ever.
func (d *durability) checkpoint(ctx context.Context) error {
	if d.fenced.Load() {
		return offsets.ErrFenced
	}
	if err := d.lease.Renew(ctx); err != nil {
		return d.maybeFenced(err)
	}
	secs, err := d.sections()
	if err != nil {
		return err
	}
	if err := d.cp.Save(ctx, secs); err != nil {
		return d.maybeFenced(err)
	}
	return nil
}

func (d *durability) maybeFenced(err error) error {
	if errors.Is(err, offsets.ErrFenced) && d.fenced.CompareAndSwap(false, true) {
		d.b.log.Error("another broker took over this bucket prefix: this broker stops writing to the bucket and refuses sends; restart it", "err", err)
	}
	return err
}

// run checkpoints every interval until ctx ends.
func (d *durability) run(ctx context.Context) {
	t := time.NewTicker(d.b.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
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
	err := d.checkpoint(ctx)
	if !d.fenced.Load() {
		err = errors.Join(err, d.lease.Release(ctx))
	}
	return err
}
