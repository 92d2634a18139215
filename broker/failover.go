package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/broker/consumers"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Failover (issue 10 item 4). The bucket's lease on the brokerName's
// prefix is the only arbiter: whoever holds it is the master, every other
// broker of the brokerName with STRATAMQ_HA_FAILOVER is its slave.
//
//   - A slave watches the lease (offsets.AcquireLease: a lease unchanged
//     for a full TTL on the slave's monotonic clock, or released, is taken
//     with a conditional write and a higher epoch). It then hands the lease
//     to a new generation of the broker on the same data dir, as master
//     (Node runs the generations).
//   - A master that finds the lease taken by another instance (its renewal
//     is fenced) stops acknowledging (issue 9's fence), and with failover
//     becomes a slave of the new holder.
//   - A broker that starts while another instance holds the lease starts
//     as its slave.
//
// Each epoch's master records in the bucket checkpoint where its log
// took over from the older epochs (epochStart.From: the end of the log it
// inherited). A broker rejoining as a slave after writing under an older
// epoch cuts its log at the lowest From of the newer epochs: the bytes
// past it were never replicated (never acknowledged by sync_master) and
// the new master wrote other records at those offsets. The cut bytes are
// kept in <data>/diverged/ for operators (store.CutLog).

// RoleChange is what Run returns when the broker must continue in another
// role on the same data dir: Node starts the next generation with it.
type RoleChange struct {
	Role   string // RoleAsyncMaster, RoleSyncMaster or RoleSlave
	Reason string
	lease  *offsets.Lease // a promotion hands over the lease it took
	// holdOff: the next generation (a demoted master's) does not try to
	// take the lease for this long, so its slave does.
	holdOff time.Duration
	// diverged: the master refused this slave's log (StatusDiverged)
	// and said where it diverged (masterCut): the next generation cuts it
	// there.
	diverged  bool
	masterCut int64
	// restartAt: the master's log starts past this slave's end (a hello
	// refused with StatusBeforeLogStart): the next generation sets its
	// log aside and starts it again there.
	restartAt int64
}

func (r *RoleChange) Error() string {
	return fmt.Sprintf("broker: continuing as %s: %s", r.Role, r.Reason)
}

// cutFor is where a log last written under epoch must be cut to agree
// with every newer epoch: the lowest From of the entries above it (-1:
// no newer epoch wrote). Every master records its entry before it writes,
// so the entries are complete unless the oldest were trimmed: ok is false
// when they may have been and the history does not reach back to epoch.
func cutFor(h []epochStart, epoch int64) (cut int64, ok bool) {
	if len(h) >= maxEpochHistory && h[0].Epoch > epoch {
		return 0, false
	}
	cut = -1
	for _, e := range h {
		if e.Epoch > epoch && (cut < 0 || e.From < cut) {
			cut = e.From
		}
	}
	return cut, true
}

// divergedAt is the HA master's Diverged: where a log last written under
// epoch must be cut to agree with this master's log.
func (b *Broker) divergedAt(epoch int64) (int64, bool) {
	if b.dur == nil {
		return -1, true
	}
	return cutFor(b.dur.History(), epoch)
}

// requestRoleChange asks Run to stop and continue as rc (the first request
// wins).
func (b *Broker) requestRoleChange(rc *RoleChange) {
	select {
	case b.roleChange <- rc:
	default:
	}
}

// haAdvertise is the HA address other brokers dial: the advertised host
// with the HA listener's port ("" without one).
func (b *Broker) haAdvertise() string {
	if b.cfg.HAListen == "" {
		return ""
	}
	_, port, err := net.SplitHostPort(b.cfg.HAListen)
	if err != nil {
		return ""
	}
	if m := b.repl.Listener(); m != nil {
		_, port, _ = net.SplitHostPort(m.Addr().String())
	}
	host, _, err := net.SplitHostPort(b.advertise)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(host, port)
}

// masterRole is the role a promoted slave takes: its own STRATAMQ_ROLE if
// that is a master role, else the role the last holder recorded, else
// async_master.
func masterRole(configured, recorded string) string {
	switch {
	case configured == RoleSyncMaster || configured == RoleAsyncMaster:
		return configured
	case recorded == RoleSyncMaster || recorded == RoleAsyncMaster:
		return recorded
	}
	return RoleAsyncMaster
}

// leaseTTL is the configured TTL, or the default for the checkpoint
// interval.
func (b *Broker) leaseTTL() time.Duration {
	if b.cfg.LeaseTTL > 0 {
		return b.cfg.LeaseTTL
	}
	return offsets.LeaseTTL(b.cfg.CheckpointInterval)
}

// newContest is this broker's part in a competition for a lapsed lease
// (offsets.Contest): its candidacy names its instance, its address and
// the copy of the log self reports (the epoch it agrees with and where
// its last record ends). Contenders republish every eighth of a TTL.
func (b *Broker) newContest(cs offsets.ObjectStore, ttl time.Duration, self func() (epoch, end int64)) *offsets.Contest {
	return &offsets.Contest{Store: cs, Period: max(ttl/8, 50*time.Millisecond), Self: func() offsets.Candidacy {
		epoch, end := self()
		return offsets.Candidacy{Instance: b.ident.Instance, Host: b.advertise, Epoch: epoch, End: end}
	}, Cover: true, UncleanAfter: b.uncleanAfter(ttl)}
}

// uncleanAfter is how long a takeover waits for silent slaves
// (STRATAMQ_HA_UNCLEAN_TAKEOVER_AFTER). With STRATAMQ_HA_MIN_INSYNC=1 a
// master acknowledges alone once its slaves are gone, so a slave gone for
// good holds nothing of that and must not keep the brokerName without a
// master: the wait is then bounded by three TTLs unless set.
func (b *Broker) uncleanAfter(ttl time.Duration) time.Duration {
	if b.cfg.HAUncleanAfter == 0 && b.cfg.HAMinInSync <= 1 {
		return 3 * ttl
	}
	return b.cfg.HAUncleanAfter
}

// logSurvivedWhole reports whether the local log holds everything this
// data dir's master acknowledged before it stopped, so that it may take
// its lease back at once: with flush=sync every acknowledged record was
// synced; within the same machine boot a crash of the process loses
// nothing written (the page cache survives). After a power loss an async
// log may end before what a slave acknowledged.
func (b *Broker) logSurvivedWhole(prev *offsets.WriterState) bool {
	return b.cfg.Flush == "sync" || prev.BootID != "" && prev.BootID == b.bootID
}

// watchLease is a failover slave's loop: it takes the lease when the
// master's lapses and asks Run to continue as master; when the holder
// changes (another broker became master, or the master restarted under a
// new epoch) it asks Run to continue as a slave of the new holder, which
// re-checks the local log against the new epoch.
func (b *Broker) watchLease(ctx context.Context) {
	cs := newCheckpointStore(b.scoped)
	ttl := b.leaseTTL()
	// A slave takes a lapsed lease only if no live slave holds a better
	// copy of the log (offsets.Contest): a lagging slave never wins over
	// one that acknowledged more.
	contest := b.newContest(cs, ttl, func() (int64, int64) { return b.agreed.Load(), b.store.MaxPhysOffset() })
	// When in doubt, wait: a copy that ends before the durable end the
	// master last checkpointed lacks what it wrote, maybe acknowledged;
	// the slave that holds it may only be cut off for a moment. Such a
	// copy waits three TTLs for a better one before it takes over.
	contest.DoubtWait = 3 * ttl
	contest.Floor = func(ctx context.Context) (int64, error) {
		cp, err := offsets.ReadCheckpoint(ctx, cs)
		if err != nil || cp == nil {
			return 0, err
		}
		cl, _ := b.commitLogOf(cp)
		return cl.HWM, nil
	}
	// contesting: the last attempt deferred (to a better copy, or to wait
	// for one). The next keeps the candidacy live from its start: others
	// decide by whether it is republished while they wait, and a gap
	// between two attempts must not make it look gone.
	contesting := false
	for wait := 100 * time.Millisecond; ctx.Err() == nil; {
		rec, _, err := offsets.ReadLease(ctx, cs)
		if err == nil && rec.Instance != b.following.Instance && !rec.Released && rec.Instance != b.ident.Instance {
			b.requestRoleChange(&RoleChange{Role: RoleSlave, Reason: "the bucket lease is held by " + rec.Identity().String()})
			return
		}
		if err == nil && rec.Epoch > b.following.Epoch && !rec.Released {
			b.requestRoleChange(&RoleChange{Role: RoleSlave, Reason: fmt.Sprintf("the master now writes under epoch %d", rec.Epoch)})
			return
		}
		if err == nil && !rec.Released && rec.Instance != b.ident.Instance {
			// Another broker took the lease this one handed over: the
			// hold-off has done its job. (A demoted master whose slave
			// generation started after the new holder took over follows it
			// in the same generation; keeping the hold-off then left a
			// later demote of that holder with nobody to take the lease.)
			b.noTakeover = time.Time{}
		}
		if time.Now().Before(b.noTakeover) {
			// Demoted: leave the released lease to the slave.
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		role := masterRole(b.nodeRole, rec.Role)
		lease, err := offsets.AcquireLease(ctx, cs, b.ident, ttl, offsets.AcquireOptions{
			MinEpoch: b.following.Epoch, HAAddr: b.haAdvertise(), Role: role, Mono: b.mono,
			// An unreleased lease of our own instance is a master
			// generation of this data dir that crashed: watched and
			// contested like anyone's. A generation younger than a TTL
			// contests at once, since its watch began late.
			Contest: contest, WatchOwn: true, ContestNow: contesting || time.Since(b.started) < ttl,
			OnWait: func(held offsets.LeaseRecord, d time.Duration) {
				b.log.Debug("failover: watching the master's lease", "holder", held.Identity().String(), "window", d)
			},
		})
		var held *offsets.LeaseHeldError
		var deferred *offsets.DeferredError
		contesting = errors.As(err, &deferred)
		switch {
		case err == nil:
			b.log.Warn("failover: the master's lease lapsed; this slave took it and becomes master",
				"epoch", lease.Epoch(), "role", role, "lapsed", rec.Identity().String())
			contest.Clear(ctx)
			offsets.PruneReplicas(ctx, cs, lease.Epoch())
			b.requestRoleChange(&RoleChange{Role: role, Reason: "took the bucket lease over", lease: lease})
			return
		case errors.As(err, &held):
			wait = 100 * time.Millisecond // the master renewed: watch again
		case errors.As(err, &deferred) && len(deferred.Missing) > 0:
			// Slaves that followed the old sync_master have not been heard
			// from: one of them may hold what it acknowledged.
			b.logMissing(deferred)
			wait = 100 * time.Millisecond
		case errors.As(err, &deferred) && deferred.Doubt != nil:
			// No better copy is live, but this one lacks what the old
			// master checkpointed: the slave that holds it may be cut off
			// for a moment. Wait (bounded) before taking over without it.
			b.log.Warn("failover: the master's lease lapsed; this slave's copy ends before what the master checkpointed, so it waits for a better copy first",
				"ownEnd", deferred.Doubt.End, "checkpointed", deferred.Doubt.Floor, "waitLeft", deferred.Doubt.Left)
			wait = 100 * time.Millisecond
		case errors.As(err, &deferred):
			// A live slave holds a better copy: it takes the lease, and
			// this one follows it (or, if it never does, contests again).
			b.log.Warn("failover: the master's lease lapsed; leaving it to a slave with a better copy of the log",
				"better", deferred.Better.String(), "ownEpoch", deferred.Self.Epoch, "ownEnd", deferred.Self.End)
			wait = 100 * time.Millisecond
		case ctx.Err() != nil:
			return
		default:
			b.log.Warn("failover: reading the bucket lease failed; retrying", "err", err, "retry", wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 3*time.Second)
		}
	}
}

// rejoinCut runs before a slave's store opens: when the data dir last
// wrote or followed an older epoch than the bucket's, its log is cut where
// the newer epochs took over (see the package comment above), or set
// aside whole when the history cannot say. It returns the epoch history
// it read.
//
// masterCut, when not negative, is where the master itself said this log
// diverged (a hello refused with StatusDiverged): the master knows its own
// epoch's start even before its first checkpoint lands, so it is used
// when given.
func (b *Broker) rejoinCut(prev *offsets.WriterState, cur int64, history []epochStart, masterCut int64) error {
	if prev == nil || (prev.Epoch >= cur && masterCut < 0) || b.storeIsFresh() {
		return nil
	}
	clDir := filepath.Join(b.cfg.DataDir, "store", "commitlog")
	segs, err := localSegmentFiles(b.fs, clDir, int(b.cfg.MaxMessageSize))
	if err != nil || len(segs) == 0 {
		return err
	}
	localMin, localEnd := segs[0].base, segs[len(segs)-1].base+segs[len(segs)-1].size
	cut, ok := cutFor(history, prev.Epoch)
	if masterCut >= 0 {
		cut, ok = masterCut, true
	}
	switch {
	case !ok:
		return b.setAside(fmt.Sprintf("the data dir last wrote under epoch %d and the bucket's epoch history (%d entries) "+
			"does not reach back to it, so where its log diverges is unknown", prev.Epoch, len(history)))
	case cut < 0 || cut >= localEnd:
		return nil
	case cut < localMin:
		return b.setAside(fmt.Sprintf("the log diverged from the master's at offset %d, below the local log's start %d", cut, localMin))
	}
	keep := filepath.Join(b.cfg.DataDir, "diverged", fmt.Sprintf("%020d-%020d.epoch%d", cut, localEnd, prev.Epoch))
	n, err := store.CutLog(b.fs, filepath.Join(b.cfg.DataDir, "store"), cut, keep)
	if err != nil {
		return fmt.Errorf("broker: cut the divergent end of the local log: %w", err)
	}
	b.log.Warn("rejoining as a slave: the end of the local log was never part of the newer master's log; it is cut (and kept for inspection)",
		"from", cut, "to", localEnd, "bytes", n, "lastEpoch", prev.Epoch, "epoch", cur, "kept", keep)
	return nil
}

// errHandingOver: a demoting master refuses sends while its slave catches
// up and takes the lease (answered SERVICE_NOT_AVAILABLE: clients retry).
var errHandingOver = errors.New("broker: this master is handing over to its slave (admin demote); retry")

// Promote asks a slave to become the master of its brokerName now (admin
// promote): it asks its master to demote itself, and takes the lease the
// master then releases. It needs STRATAMQ_HA_FAILOVER and a reachable
// master; a master that is gone is replaced without it, once its lease
// lapses. It returns once the master agreed.
func (b *Broker) Promote(ctx context.Context) error {
	if b.cfg.Role != RoleSlave {
		return fmt.Errorf("broker: this broker is already %s", b.cfg.Role)
	}
	if !b.cfg.HAFailover || b.scoped == nil {
		return errors.New("broker: promote needs STRATAMQ_HA_FAILOVER and a bucket (the lease decides who is master)")
	}
	addr := b.masterRemotingAddr()
	if addr == "" {
		return errors.New("broker: the master's address is not known yet; if it is gone, this slave takes over once its lease lapses")
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.HATimeout+10*time.Second)
	defer cancel()
	resp, err := b.invoke(ctx, addr, remoting.NewRequest(remoting.DemoteBroker, nil, nil))
	if err != nil {
		return fmt.Errorf("broker: ask the master at %s to demote: %w (if it is gone, this slave takes over once its lease lapses)", addr, err)
	}
	if resp.Code != int32(remoting.Success) {
		return fmt.Errorf("broker: the master at %s refused to demote: %s", addr, resp.Remark)
	}
	b.log.Warn("admin promote: the master agreed to hand over; taking the lease it releases", "master", addr)
	return nil
}

// Demote asks a master to hand over to its slave (admin demote): it
// refuses new sends, waits (up to STRATAMQ_HA_ACK_TIMEOUT) until a slave
// holds its whole log, then stops as master — the drain, the final
// checkpoint and the lease release of a graceful stop — and continues as
// a slave of whichever broker takes the lease (it does not take the lease
// back itself for two TTLs). It needs STRATAMQ_HA_FAILOVER, a bucket and a
// connected slave.
func (b *Broker) Demote(ctx context.Context) error {
	if b.cfg.Role == RoleSlave {
		return errors.New("broker: this broker is a slave already")
	}
	if !b.cfg.HAFailover || b.dur == nil {
		return errors.New("broker: demote needs STRATAMQ_HA_FAILOVER and a bucket (the lease decides who is master)")
	}
	m := b.repl.Master()
	if m == nil || len(m.Slaves()) == 0 {
		return errors.New("broker: no slave is connected to hand over to")
	}
	if !b.demoting.CompareAndSwap(false, true) {
		return errors.New("broker: a demote is already under way")
	}
	end := b.store.MaxPhysOffset()
	wctx, cancel := context.WithTimeout(ctx, b.cfg.HATimeout)
	defer cancel()
	if err := m.WaitAcked(wctx, end); err != nil {
		b.demoting.Store(false)
		return fmt.Errorf("broker: no slave caught up with the log end %d: %w", end, err)
	}
	b.log.Warn("admin demote: a slave holds the whole log; handing the lease over", "end", end)
	b.requestRoleChange(&RoleChange{Role: RoleSlave, Reason: "admin demote", holdOff: 2 * b.leaseTTL()})
	return nil
}

// prepareReplica readies a slave's data dir before its store opens: it
// reads the master's lease and checkpoint, cuts a local log that diverged
// from a newer epoch (rejoinCut), records the data dir as a replica of
// the current epoch (writer.json) and picks the master's HA address (the
// lease holder's, with failover). It returns the checkpoint (nil when
// unreadable).
func (b *Broker) prepareReplica() (*offsets.Checkpoint, error) {
	prev, err := offsets.ReadWriterState(b.fs, b.writerStatePath())
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	inst := ""
	if prev != nil {
		inst = prev.Instance
	} else if inst, err = offsets.NewInstanceID(); err != nil {
		return nil, err
	}
	b.ident = offsets.IdentityFor(b.cfg.BrokerName, inst)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, _, err := offsets.ReadLease(ctx, newCheckpointStore(b.scoped))
	if err != nil && !errors.Is(err, offsets.ErrObjectNotFound) {
		b.log.Warn("slave: the bucket lease is not readable; following the configured master", "err", err)
	}
	held := err == nil && !rec.Released && rec.Instance != inst
	cp := b.readReplicaCheckpoint()
	cl, _ := b.commitLogOf(cp)
	if prev != nil && held && prev.Epoch < rec.Epoch && !hasEpoch(cl.Epochs, rec.Epoch) {
		// The holder records its epoch with its first checkpoint, before
		// it writes anything: give it that long.
		for deadline := time.Now().Add(2*b.cfg.CheckpointInterval + 5*time.Second); time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
			if cp = b.readReplicaCheckpoint(); cp != nil {
				if cl, _ = b.commitLogOf(cp); hasEpoch(cl.Epochs, rec.Epoch) {
					break
				}
			}
		}
	}
	cur := rec.Epoch
	if cp != nil {
		cur = max(cur, cp.Writer.Epoch)
	}
	if b.restartAt > 0 && !b.storeIsFresh() {
		// The master's log starts past this log's end, at offsets it
		// cannot read: nothing of this log past the bucket's end is in
		// the master's history. Kept aside (renamed), the log starts again
		// at the master's start.
		if err := b.setAside(fmt.Sprintf("the master's log starts at offset %d, past the end of this slave's log", b.restartAt)); err != nil {
			return nil, err
		}
	}
	if err := b.rejoinCut(prev, cur, cl.Epochs, b.masterCut); err != nil {
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
	case b.storeIsFresh():
		agreed = max(cur, prev.Epoch) // an emptied data dir: the same, never below what it knew
	case prev.Epoch >= cur:
		agreed = prev.Epoch // also when the lease and checkpoint were unreadable (cur 0)
	case !hasEpoch(cl.Epochs, cur):
		agreed = prev.Epoch
		b.log.Warn("slave: the bucket does not list where the current epoch began yet; the master checks this log against it when it connects",
			"epoch", cur, "localEpoch", prev.Epoch)
	}
	b.agreed.Store(agreed)
	b.following = offsets.Identity{Epoch: cur}
	b.haMasterAddr = b.cfg.HAMaster
	if held {
		b.following = rec.Identity()
		b.following.Epoch = cur
		if b.cfg.HAFailover && rec.HAAddr != "" {
			b.haMasterAddr = rec.HAAddr
		}
	}
	if err := b.recordReplica(prev, inst, agreed); err != nil {
		return nil, err
	}
	return cp, nil
}

// recordReplica records the data dir as a replica whose log agrees with
// epoch (writer.json), unless it says so already.
func (b *Broker) recordReplica(prev *offsets.WriterState, inst string, epoch int64) error {
	if prev != nil && prev.Epoch == epoch && prev.Replica {
		return nil
	}
	if err := offsets.WriteWriterState(b.fs, b.writerStatePath(),
		offsets.WriterState{Broker: b.cfg.BrokerName, Instance: inst, Epoch: epoch, Replica: true}); err != nil {
		return fmt.Errorf("broker: record the data dir as a replica: %w", err)
	}
	return nil
}

// helloAccepted runs when the master accepted this slave's hello: it
// checked the log against its epochs, so the log agrees with the
// master's epoch from now on; writer.json says so before anything of that
// epoch is appended.
func (b *Broker) helloAccepted(epoch int64) error {
	if b.cfg.HAFailover && epoch > b.replicaPublished.Load() {
		// Before any ack of ours counts under epoch: a takeover of this
		// sync_master's lease then waits to hear from this copy.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := offsets.PublishReplica(ctx, newCheckpointStore(b.scoped),
			offsets.ReplicaRecord{Instance: b.ident.Instance, Host: b.advertise, Epoch: epoch})
		cancel()
		if err != nil {
			return err
		}
		b.replicaPublished.Store(epoch)
	}
	if epoch <= b.agreed.Load() {
		return nil
	}
	prev, err := offsets.ReadWriterState(b.fs, b.writerStatePath())
	if err != nil {
		return err
	}
	if err := b.recordReplica(prev, b.ident.Instance, epoch); err != nil {
		return err
	}
	b.agreed.Store(epoch)
	return nil
}

// logMissing says, at most once a TTL, why a takeover waits for silent
// slaves (the contest retries every 100 ms).
func (b *Broker) logMissing(d *offsets.DeferredError) {
	now := time.Now()
	if now.Sub(b.missingLogged) < b.leaseTTL() {
		return
	}
	b.missingLogged = now
	b.log.Warn("failover: the master's lease lapsed; waiting to hear from every slave that may hold what it acknowledged",
		"reason", d.Error())
}

func hasEpoch(h []epochStart, epoch int64) bool {
	return slices.ContainsFunc(h, func(e epochStart) bool { return e.Epoch == epoch })
}

// adoptCheckpointMetadata runs when a promoted slave keeps its copy of the
// log (New, after the config managers opened): what it followed from the
// master may be a sync interval old, so it adds from the bucket's
// checkpoint every topic and subscription group it lacks — the checkpoint
// lists every topic written to (a send to a new queue waits for a
// checkpoint naming it) — and takes each consumer offset the checkpoint
// has further along. Deleted-and-recreated differences are settled in
// favour of keeping data: nothing is removed here.
func (b *Broker) adoptCheckpointMetadata(cp *offsets.Checkpoint) error {
	if cp == nil {
		return nil
	}
	if raw := cp.Sections[sectionTopics]; len(raw) > 0 {
		var w remoting.TopicConfigSerializeWrapper
		if err := json.Unmarshal(remoting.QuoteIntegerKeys(raw), &w); err != nil {
			return fmt.Errorf("broker: checkpoint topics: %w", err)
		}
		have := b.topics.QueueCounts()
		for name, tc := range w.TopicConfigTable {
			if _, ok := have[name]; !ok {
				tc.TopicName = name
				b.topics.Put(tc)
				b.log.Info("promoted: topic the followed config lacked added from the bucket checkpoint", "topic", name)
			}
		}
	}
	if raw := cp.Sections[sectionSubscriptionGroups]; len(raw) > 0 {
		groups, err := consumers.DecodeGroups(raw)
		if err != nil {
			return fmt.Errorf("broker: checkpoint subscription groups: %w", err)
		}
		for name, g := range groups {
			if _, ok := b.groups.Get(name); !ok {
				b.groups.Put(g)
			}
		}
	}
	if raw := cp.Sections[sectionConsumerOffsets]; len(raw) > 0 {
		var f struct {
			OffsetTable map[string]map[string]int64 `json:"offsetTable"`
		}
		if err := json.Unmarshal(remoting.QuoteIntegerKeys(raw), &f); err != nil {
			return fmt.Errorf("broker: checkpoint consumer offsets: %w", err)
		}
		for key, qs := range f.OffsetTable {
			topic, group, ok := strings.Cut(key, "@")
			if !ok {
				continue
			}
			for q, off := range qs {
				id, err := strconv.Atoi(q)
				if err != nil {
					continue
				}
				if cur, ok := b.offsets.Query(group, topic, int32(id)); !ok || cur < off {
					b.offsets.Commit(group, topic, int32(id), off)
				}
			}
		}
	}
	return nil
}
