package broker

import (
	"bytes"
	"encoding/json"
	"math"

	"github.com/stratamq/stratamq/broker/failover"
)

// Durable progress. The internal services (the schedule service, the
// transaction check, POP's dead-lettering) save progress that counts only
// writes as durable as each save (package progress keeps the steps); this
// file says how far the commitlog is durable for each fault.

// durableEnds is how far the commitlog is durable for each fault a saved
// progress must survive:
//
//   - local: fdatasynced (flush=sync, or the flush service synced it):
//     what a power loss keeps. The local progress files save this.
//   - bucket: listed in the bucket's manifest: what every restore finds,
//     on an empty disk or on whichever copy of the log wins a failover.
//     The bucket checkpoint's progress sections save this.
//     math.MaxInt64 without a bucket (no checkpoint).
//
// Both include what the bucket WAL committed (wire_wal.go): every restart,
// restore and takeover takes it back before it serves.
//
// Both only grow within a run.
func (b *Broker) durableEnds() (local, bucket int64) {
	if b.store == nil {
		return 0, 0
	}
	local = b.store.FlushedPhysOffset()
	if b.dur == nil {
		return local, math.MaxInt64
	}
	bucket = uploadedEnd(nil, b.tier)
	if d, ok := b.walDurable(); ok {
		local, bucket = max(local, d), max(bucket, d)
	}
	return local, bucket
}

// heldEnd is how far a sync_master's slaves hold the log (at least
// bucket, durableEnds' bucket end): what a failover to the slave that
// acknowledged keeps. The checkpoint saves the progress over writes below
// it apart (heldProgress, wire_durability.go) with the epoch it was
// written under: only a copy of the log that reaches it uses that
// progress. It is not durable for every fault: a slave that held those
// writes may lose its disk while the master loses its unsynced tail, and
// the copy that wins then lacks them (the simulator found it).
func (b *Broker) heldEnd(bucket int64) int64 {
	if b.cfg.Role == RoleSyncMaster && b.dur != nil {
		return max(bucket, b.slaveHeld())
	}
	return bucket
}

// durableAll is the commitlog end durable for every fault: progress over
// writes below it may be forgotten (progress.Log.Trim).
func (b *Broker) durableAll() int64 {
	l, bk := b.durableEnds()
	return min(l, bk)
}

// heldProgress is the checkpoint section heldProgress: the internal
// services' progress over writes below End, which the slaves of the
// sync_master of epoch Epoch held when it wrote the checkpoint. Those
// writes past what the bucket held lie in [From, End) of the writer's
// local log (From: the bucket's end then, or the writer's first local
// offset when its log starts past it, a restore's gap). The sections
// delayOffsets, timerOffsets and transactions keep the progress over what
// the bucket holds, durable for every fault.
type heldProgress struct {
	Epoch        int64           `json:"epoch"`
	From         int64           `json:"from,omitempty"`
	End          int64           `json:"end"`
	DelayOffsets json.RawMessage `json:"delayOffsets,omitempty"`
	TimerOffsets json.RawMessage `json:"timerOffsets,omitempty"`
	Transactions json.RawMessage `json:"transactions,omitempty"`
}

// heldSection is the heldProgress section of the checkpoint being made
// (nil when it would say nothing the bucket-durable sections delay, timer
// and trans do not).
func (b *Broker) heldSection(bucket int64, delay, timer, trans json.RawMessage) (json.RawMessage, error) {
	end := b.heldEnd(bucket)
	if end <= bucket {
		return nil, nil
	}
	h := heldProgress{Epoch: b.epoch(), From: max(uploadedEnd(nil, b.tier), b.store.LocalMinPhysOffset()), End: end}
	var err error
	if h.DelayOffsets, h.TimerOffsets, err = b.sched.Sections(end); err != nil {
		return nil, err
	}
	if h.Transactions, err = json.Marshal(b.trans.StateAt(end)); err != nil {
		return nil, err
	}
	if bytes.Equal(h.DelayOffsets, delay) && bytes.Equal(h.TimerOffsets, timer) && bytes.Equal(h.Transactions, trans) {
		return nil, nil
	}
	return json.Marshal(h)
}

// loadedHeld is the loaded checkpoint's heldProgress when this run's log
// holds the writes it depends on (New calls it once the store is open):
// the log reaches End, its local part starts at or below From (or what
// the bucket holds now reaches it), and no later epoch took the log over
// below End (a copy of the log that agrees with the bucket's epoch history
// then holds what epoch Epoch's master wrote below End). A log restored
// on an empty disk resumes past the checkpoint's reservation, beyond End,
// holding nothing between the bucket's end and its start: it fails the
// second test. Otherwise the services resume from the bucket-durable
// sections and do again what they did past them (at least once).
func (b *Broker) loadedHeld() (heldProgress, bool) {
	var h heldProgress
	if b.dur == nil || b.dur.Loaded() == nil {
		return h, false
	}
	raw := b.dur.Loaded().Sections[sectionHeldProgress]
	if len(raw) == 0 {
		return h, false
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		b.log.Warn("checkpoint heldProgress section unreadable; the internal services resume from the bucket-durable progress", "err", err)
		return h, false
	}
	// The bucket's objects, not durableEnds: a WAL claimed on a log
	// restored past a gap counts the gap as durable (nothing is there).
	end, start, bucket := b.store.MaxPhysOffset(), b.store.LocalMinPhysOffset(), uploadedEnd(nil, b.tier)
	gap := bucket < h.End && start > max(h.From, bucket)
	cut, ok := failover.CutFor(b.dur.LoadedHistory(), h.Epoch)
	if end < h.End || gap || !ok || (cut >= 0 && cut < h.End) {
		b.log.Info("this copy of the log lacks writes the slave-held progress depends on; the internal services resume from the bucket-durable progress (what they did past it is done again)",
			"logStart", start, "logEnd", end, "bucketEnd", bucket, "heldFrom", h.From, "heldEnd", h.End, "heldEpoch", h.Epoch)
		return h, false
	}
	return h, true
}
