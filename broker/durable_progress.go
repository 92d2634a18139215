package broker

import "math"

// Durable progress. The internal services (the schedule service, the
// transaction check, POP's dead-lettering) save progress that counts only
// writes as durable as each save (package progress keeps the steps); this
// file says how far the commitlog is durable for each fault.

// durableEnds is how far the commitlog is durable for each fault a saved
// progress must survive:
//
//   - local: fdatasynced (flush=sync, or the flush service synced it):
//     what a power loss keeps. The local progress files save this.
//   - bucket: listed in the bucket's manifest (what a restore on an empty
//     disk, or a promoted slave, reads), or on a sync_master held by a
//     slave (what a failover keeps). The bucket checkpoint saves this.
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
	if b.cfg.Role == RoleSyncMaster {
		bucket = max(bucket, b.slaveHeld())
	}
	if d, ok := b.walDurable(); ok {
		local, bucket = max(local, d), max(bucket, d)
	}
	return local, bucket
}

// durableAll is the commitlog end durable for every fault: progress over
// writes below it may be forgotten (progress.Log.Trim).
func (b *Broker) durableAll() int64 {
	l, bk := b.durableEnds()
	return min(l, bk)
}
