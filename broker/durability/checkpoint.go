package durability

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
)

// Reservation headroom. Generous on purpose: a reservation costs nothing
// but a jump in offsets after an unclean loss (a restore starts past it),
// while a send that uses one up waits for the next checkpoint (at most
// Config.CheckpointWait) and is refused if none lands. The lease (TTL
// minus margin) stops sends in an outage long before these do at any
// realistic rate.
const (
	// QueueReserveMin is the least headroom a queue reservation leaves,
	// and the reservation of a checkpointed queue without messages.
	QueueReserveMin = 1 << 16
	// LogReserveMin is the least commitlog headroom.
	LogReserveMin = 1 << 30
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

// wakeNear asks Run for a checkpoint now (store.Reservation.OnNear: never
// blocks).
func (d *Keeper) wakeNear() {
	select {
	case d.near <- struct{}{}:
	default:
	}
}

// headroom is how far a reservation reaches past the log's or a queue's
// end, for grew bytes or offsets written over elapsed since the previous
// checkpoint attempt: reserveIntervals × grew (at the interval: what it
// always was), or, after less than an interval, reserveIntervals
// intervals at that rate, up to reserveMaxFactor × least; at least least.
func (d *Keeper) headroom(grew int64, elapsed time.Duration, least int64) int64 {
	grew = max(grew, 0)
	h := reserveIntervals * grew
	if iv := d.cfg.CheckpointInterval; elapsed < iv {
		perInterval := float64(grew) * float64(iv) / float64(max(elapsed, time.Millisecond))
		h = max(h, int64(min(reserveIntervals*perInterval, float64(reserveMaxFactor)*float64(least))))
	}
	return max(h, least)
}

// checkpointWait is how long a send that reached a reservation waits for
// the checkpoint it triggered (store.Reservation.Wait).
func (d *Keeper) checkpointWait() time.Duration {
	if w := d.cfg.CheckpointWait; w > 0 {
		return w
	}
	return DefaultCheckpointWait
}

func (d *Keeper) queueReserveMin() int64 {
	if n := d.cfg.ReserveQueueMin; n > 0 {
		return n
	}
	return QueueReserveMin
}

func (d *Keeper) logReserveMin() int64 {
	if n := d.cfg.ReserveLogMin; n > 0 {
		return n
	}
	return LogReserveMin
}

// sections gathers the checkpoint. clean marks the final one of a graceful
// shutdown after a complete drain; drainFailed the final one after an
// incomplete drain.
func (d *Keeper) sections(clean bool, drainFailed *OffsetRange) (map[string]json.RawMessage, error) {
	g, err := d.src.Gather()
	if err != nil {
		return nil, err
	}
	// What sends refused at the current reservation needed: the next
	// one covers it, however large the request.
	var wantLog int64
	var wantQ map[string]map[int32]int64
	if r := d.resv.Load(); r != nil {
		wantLog, wantQ = r.Wanted()
	}
	st := d.st
	// The durable end first, then the writer's end: durable <= end.
	durable := st.FlushedPhysOffset()
	end := st.MaxPhysOffset()
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	elapsed := now.Sub(d.prevAt)
	d.prevAt = now
	grew := max(end-d.prevHWM, 0)
	d.prevHWM = end
	cl := CommitLog{
		HWM: durable,
		// Room for what may be written before the next checkpoint lands
		// (headroom: a few intervals at the rate the log grew), at least
		// two segments and logReserveMin. The watcher checkpoints early
		// when half of it is used.
		Reserved:         max(end, wantLog) + d.headroom(grew, elapsed, max(2*d.cfg.SegmentSize, d.logReserveMin())),
		Floor:            st.MinPhysOffset(),
		Queues:           map[string]map[string]QueueRange{},
		NewQueueReserved: d.queueReserveMin(),
		Clean:            clean,
		DrainFailed:      drainFailed,
		Epochs:           WithEpoch(d.history, d.id.Epoch, d.from),
		BucketOnly:       g.BucketOnly,
	}
	for topic, ids := range st.Tombstones() {
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
	qres := map[QueueKey]int64{}
	for topic, n := range g.Covered {
		for q := int32(0); q < n; q++ {
			mx := st.MaxQueueOffset(topic, q)
			want := wantQ[topic][q]
			if mx == 0 && want == 0 {
				continue
			}
			if cl.Queues[topic] == nil {
				cl.Queues[topic] = map[string]QueueRange{}
			}
			k := QueueKey{topic, q}
			res := max(mx, want) + d.headroom(mx-d.prevMax[k], elapsed, d.queueReserveMin())
			d.prevMax[k] = mx
			qres[k] = res
			cl.Queues[topic][strconv.Itoa(int(q))] = QueueRange{Min: st.MinQueueOffset(topic, q), Max: mx, Reserved: res}
		}
	}
	clJSON, err := json.Marshal(cl)
	if err != nil {
		return nil, err
	}
	d.pending = pendingReservation{log: cl.Reserved, queues: qres, covered: g.Covered, progress: g.Progress}
	secs := make(map[string]json.RawMessage, len(g.Sections)+1)
	maps.Copy(secs, g.Sections)
	secs[SectionCommitLog] = clJSON
	return secs, nil
}

type pendingReservation struct {
	log      int64
	queues   map[QueueKey]int64
	covered  map[string]int32
	progress map[QueueKey]int64
}

// Checkpoint renews the lease if needed and writes a checkpoint. Once
// fenced it writes nothing, ever. If it fails while sends wait at the
// reservation (it came near or was hit), they are refused now rather than
// at the end of their wait: the bucket did not answer.
func (d *Keeper) Checkpoint(ctx context.Context) error {
	err := d.save(ctx, false, false, nil)
	if err != nil {
		if r := d.resv.Load(); r != nil && r.Near() {
			r.Fail(fmt.Errorf("the checkpoint to the bucket failed: %w", err))
		}
	}
	return err
}

// MarkDraining writes a checkpoint saying that a drain began with r not
// yet in the bucket (drainFailed = r), before the drain: if the drain then
// fails and the final checkpoint cannot be written either (a bucket that
// stops answering), the bucket still says that a stop left messages on
// local disk, and an empty disk refuses to start over them. Every later
// checkpoint keeps the mark until the final one.
func (d *Keeper) MarkDraining(ctx context.Context, r *OffsetRange) error {
	d.saveMu.Lock()
	d.drainMark = r
	d.saveMu.Unlock()
	return d.Checkpoint(ctx)
}

// save writes a checkpoint; final marks the last one of a shutdown, clean
// a complete drain, drainFailed the range an incomplete one left.
func (d *Keeper) save(ctx context.Context, final, clean bool, drainFailed *OffsetRange) error {
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
	if _, err := d.Writable(); err != nil {
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
		if r.Queues[k.Topic] == nil {
			r.Queues[k.Topic] = map[int32]int64{}
		}
		r.Queues[k.Topic][k.Queue] = v
	}
	d.st.SetReservation(r)
	d.resv.Store(r)
	d.covered.Store(&p.covered)
	return nil
}

// BlockWrites attaches the open store: it makes it refuse every write
// until a checkpoint sets a reservation (called once the store is open,
// before the first checkpoint), and seeds the growth the reservations are
// sized by with where the log and the queues stand now: the first
// checkpoint of a run must not count the whole existing log as what the
// last interval wrote (which made every restart reserve five times the
// log).
func (d *Keeper) BlockWrites(st Store) {
	d.st = st
	// A send before the first checkpoint waits for it (the first one is
	// retried every second while it fails).
	r := &store.Reservation{Log: st.MaxPhysOffset(), OnNear: d.wakeNear, Wait: d.checkpointWait()}
	st.SetReservation(r)
	d.resv.Store(r)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.prevHWM, d.prevAt = st.MaxPhysOffset(), time.Now()
	for topic, n := range d.src.QueueCounts() {
		for q := int32(0); q < n; q++ {
			if mx := st.MaxQueueOffset(topic, q); mx > 0 {
				d.prevMax[QueueKey{topic, q}] = mx
			}
		}
	}
}

// AwaitCovered returns once the last durable checkpoint lists topic's
// queue queueID, writing one if it does not (a new topic or a new queue:
// after an unclean loss, a restore must know it was written).
func (d *Keeper) AwaitCovered(ctx context.Context, topic string, queueID int32) error {
	if n, ok := (*d.covered.Load())[topic]; ok && queueID < n {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := d.Checkpoint(ctx); err != nil {
		if n, ok := (*d.covered.Load())[topic]; ok && queueID < n {
			return nil // another save listed it meanwhile
		}
		return fmt.Errorf("%w: %w", ErrNotCheckpointed, err)
	}
	if n, ok := (*d.covered.Load())[topic]; ok && queueID < n {
		return nil
	}
	return fmt.Errorf("%w (topic %s has no queue %d)", ErrNotCheckpointed, topic, queueID)
}

// nearReservation reports whether the log or a queue has used more than
// half of the headroom the last checkpoint reserved, or none is written
// yet: then the next checkpoint is written now rather than at the
// interval.
func (d *Keeper) nearReservation() bool {
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
	if hwm := d.st.MaxPhysOffset(); hwm-d.prevHWM > (d.reserved-d.prevHWM)/2 {
		return true
	}
	for k, res := range d.qres {
		prev := d.prevMax[k]
		if mx := d.st.MaxQueueOffset(k.Topic, k.Queue); mx-prev > (res-prev)/2 {
			return true
		}
	}
	return false
}
