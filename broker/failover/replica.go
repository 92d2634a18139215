package failover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stratamq/stratamq/offsets"
)

// PrepareReplica readies a slave's data dir before its store opens: it
// reads the master's lease and checkpoint, cuts a local log that diverged
// from a newer epoch (rejoinCut), records the data dir as a replica of
// the current epoch (writer.json) and picks the master's HA address (the
// lease holder's, with failover). It returns the checkpoint (nil when
// unreadable).
func (r *Roles) PrepareReplica() (*offsets.Checkpoint, error) {
	fs, lg, cps, dd := r.deps.FS, r.deps.Logger, r.deps.Checkpoints, r.deps.DataDir
	prev, err := offsets.ReadWriterState(fs, r.cfg.WriterState)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	inst := ""
	r.mayLack.Store(prev != nil && !r.LogSurvivedWhole(prev))
	if prev != nil {
		inst = prev.Instance
	} else if inst, err = offsets.NewInstanceID(); err != nil {
		return nil, err
	}
	r.ident = offsets.IdentityFor(r.cfg.BrokerName, inst)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, _, err := offsets.ReadLease(ctx, r.deps.Bucket)
	if err != nil && !errors.Is(err, offsets.ErrObjectNotFound) {
		lg.Warn("slave: the bucket lease is not readable; following the configured master", "err", err)
	}
	held := err == nil && !rec.Released && rec.Instance != inst
	cp := cps.ReadReplica()
	cl, _ := cps.CommitLog(cp)
	if prev != nil && held && prev.Epoch < rec.Epoch && !hasEpoch(cl.Epochs, rec.Epoch) {
		// The holder records its epoch with its first checkpoint, before
		// it writes anything: give it that long.
		for deadline := time.Now().Add(2*r.cfg.CheckpointInterval + 5*time.Second); time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
			if cp = cps.ReadReplica(); cp != nil {
				if cl, _ = cps.CommitLog(cp); hasEpoch(cl.Epochs, rec.Epoch) {
					break
				}
			}
		}
	}
	cur := rec.Epoch
	if cp != nil {
		cur = max(cur, cp.Writer.Epoch)
	}
	if r.cfg.RestartAt > 0 && !dd.Fresh() {
		// The master's log starts past this log's end, at offsets it
		// cannot read: nothing of this log past the bucket's end is in
		// the master's history. Kept aside (renamed), the log starts again
		// at the master's start.
		if err := dd.SetAside(fmt.Sprintf("the master's log starts at offset %d, past the end of this slave's log", r.cfg.RestartAt)); err != nil {
			return nil, err
		}
	}
	if r.cfg.Afresh && !dd.Fresh() {
		// The master numbers a queue below what this log's own restore
		// (or, as a promoted master, its resume past the checkpoint's
		// reservations) set: the log cannot follow it, though its bytes
		// may agree. Kept aside (renamed), it restores afresh as a
		// replica: the bucket up to its end, the master's stream after.
		if err := dd.SetAside("the master numbers a queue below the range this log's restore gave it"); err != nil {
			return nil, err
		}
	}
	if err := r.rejoinCut(prev, cur, cl.Epochs, r.cfg.MasterCut); err != nil {
		return nil, err
	}
	// The epoch the local log is known to agree with: the current one
	// only once the cut was judged against a history that lists the
	// current epoch's start (or the data dir is fresh, or already agreed
	// with it); else the one it last agreed with, and the master's own
	// check of the hello (ha: StatusDiverged) decides. Never 0 for an
	// unreadable lease and checkpoint: that would look like a log that
	// agrees with nothing in particular.
	agreed := cur
	switch {
	case prev == nil:
		// A new copy: it starts from the bucket and the stream.
	case dd.Fresh():
		agreed = max(cur, prev.Epoch) // an emptied data dir: the same, never below what it knew
	case prev.Epoch >= cur:
		agreed = prev.Epoch // also when the lease and checkpoint were unreadable (cur 0)
	case !hasEpoch(cl.Epochs, cur):
		agreed = prev.Epoch
		lg.Warn("slave: the bucket does not list where the current epoch began yet; the master checks this log against it when it connects",
			"epoch", cur, "localEpoch", prev.Epoch)
	}
	r.agreed.Store(agreed)
	r.following = offsets.Identity{Epoch: cur}
	r.haMaster = r.cfg.HAMaster
	if held {
		r.following = rec.Identity()
		r.following.Epoch = cur
		if r.cfg.HAFailover && rec.HAAddr != "" {
			r.haMaster = rec.HAAddr
		}
	}
	if err := r.recordReplica(prev, inst, agreed); err != nil {
		return nil, err
	}
	return cp, nil
}

// recordReplica records the data dir as a replica whose log agrees with
// epoch (writer.json), unless it says so already.
func (r *Roles) recordReplica(prev *offsets.WriterState, inst string, epoch int64) error {
	// The boot is recorded too: a slave that comes back after a power
	// loss learns from it that its log may lack what it acknowledged.
	// Until it caught up with a master (recordBoot), the old boot stays:
	// a restart in this boot must not forget it.
	boot := r.cfg.BootID
	if r.mayLack.Load() && prev != nil {
		boot = prev.BootID
	}
	if prev != nil && prev.Epoch == epoch && prev.Replica && prev.BootID == boot {
		return nil
	}
	if err := offsets.WriteWriterState(r.deps.FS, r.cfg.WriterState,
		offsets.WriterState{Broker: r.cfg.BrokerName, Instance: inst, Epoch: epoch, Replica: true, BootID: boot}); err != nil {
		return fmt.Errorf("broker: record the data dir as a replica: %w", err)
	}
	return nil
}

// HelloAccepted runs when the master accepted this slave's hello
// (ha.SlaveOptions.OnAccepted, with failover and a bucket): it checked
// the log against its epochs, so the log agrees with the master's epoch
// from now on; writer.json says so before anything of that epoch is
// appended.
func (r *Roles) HelloAccepted(epoch int64) error {
	if r.cfg.HAFailover && epoch > r.replicaPublished.Load() {
		// Before any ack of ours counts under epoch: a takeover of this
		// sync_master's lease then waits to hear from this copy.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := offsets.PublishReplica(ctx, r.deps.Bucket,
			offsets.ReplicaRecord{Instance: r.ident.Instance, Host: r.cfg.Advertise, Epoch: epoch})
		cancel()
		if err != nil {
			return err
		}
		r.replicaPublished.Store(epoch)
	}
	if epoch <= r.agreed.Load() {
		return nil
	}
	prev, err := offsets.ReadWriterState(r.deps.FS, r.cfg.WriterState)
	if err != nil {
		return err
	}
	if err := r.recordReplica(prev, r.ident.Instance, epoch); err != nil {
		return err
	}
	r.agreed.Store(epoch)
	return nil
}

// recordBoot records this boot in writer.json once a slave that came back
// from a power loss caught up with a master (Run): its copy holds what
// that master had, and a later restart in this boot loses nothing.
func (r *Roles) recordBoot() error {
	prev, err := offsets.ReadWriterState(r.deps.FS, r.cfg.WriterState)
	if err != nil || prev == nil {
		return err
	}
	if prev.BootID == r.cfg.BootID {
		return nil
	}
	st := *prev
	st.BootID = r.cfg.BootID
	return offsets.WriteWriterState(r.deps.FS, r.cfg.WriterState, st)
}
