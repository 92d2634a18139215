package failover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stratamq/stratamq/offsets"
)

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

// NewContest is this slave generation's part in a competition for a
// lapsed lease (offsets.Contest): its candidacy names its instance, its
// address, whether its copy may lack what it acknowledged (mayLack), and
// the copy of the log self reports (the epoch it agrees with and where
// its last record ends). Contenders republish every eighth of a TTL.
func (r *Roles) NewContest(cs offsets.ObjectStore, ttl time.Duration, self func() (epoch, end int64)) *offsets.Contest {
	return r.contest(cs, ttl, func() offsets.Candidacy {
		epoch, end := self()
		return offsets.Candidacy{Instance: r.ident.Instance, Host: r.cfg.Advertise, Epoch: epoch, End: end, MayLack: r.mayLack.Load()}
	})
}

// StartContest is NewContest for a data dir that contests its own lapsed
// lease at start, before any generation ran (no PrepareReplica): the
// candidacy names prev's instance (one without an instance is no
// candidacy to the others, who would take the lease over a longer live
// copy) and, after a power loss, says its copy may lack what it
// acknowledged.
func (r *Roles) StartContest(cs offsets.ObjectStore, ttl time.Duration, prev *offsets.WriterState, end int64) *offsets.Contest {
	mayLack := !r.LogSurvivedWhole(prev)
	return r.contest(cs, ttl, func() offsets.Candidacy {
		return offsets.Candidacy{Instance: prev.Instance, Host: r.cfg.Advertise, Epoch: prev.Epoch, End: end, MayLack: mayLack}
	})
}

func (r *Roles) contest(cs offsets.ObjectStore, ttl time.Duration, self func() offsets.Candidacy) *offsets.Contest {
	return &offsets.Contest{Store: cs, Period: max(ttl/8, 50*time.Millisecond), Self: self,
		Cover: true, UncleanAfter: r.uncleanAfter(ttl),
		SelfHA: r.deps.Host.HAAddr(), SelfHost: offsets.IdentityFor("", "").Host}
}

// uncleanAfter is how long a takeover waits for silent slaves
// (STRATAMQ_HA_UNCLEAN_TAKEOVER_AFTER). With STRATAMQ_HA_MIN_INSYNC=1 a
// master acknowledges alone once its slaves are gone, so a slave gone for
// good holds nothing of that and must not keep the brokerName without a
// master: the wait is then bounded by three TTLs unless set.
func (r *Roles) uncleanAfter(ttl time.Duration) time.Duration {
	if r.cfg.HAUncleanAfter == 0 && r.cfg.HAMinInSync <= 1 {
		return 3 * ttl
	}
	return r.cfg.HAUncleanAfter
}

// LogSurvivedWhole reports whether the local log holds everything this
// data dir's master acknowledged before it stopped, so that it may take
// its lease back at once: with flush=sync every acknowledged record was
// synced; within the same machine boot a crash of the process loses
// nothing written (the page cache survives). After a power loss an async
// log may end before what a slave acknowledged.
func (r *Roles) LogSurvivedWhole(prev *offsets.WriterState) bool {
	return r.cfg.SyncFlush || prev.BootID != "" && prev.BootID == r.cfg.BootID
}

// Run is a failover slave's lease watch (the broker runs it on a slave
// with STRATAMQ_HA_FAILOVER and a bucket, once the store is open): it
// takes the lease when the master's lapses and asks to continue as
// master; when the holder changes (another broker became master, or the
// master restarted under a new epoch) it asks to continue as a slave of
// the new holder, which re-checks the local log against the new epoch. It
// returns once it asked (RequestRoleChange) or ctx ends.
func (r *Roles) Run(ctx context.Context) {
	cs := r.deps.Bucket
	ttl := r.LeaseTTL()
	// A slave takes a lapsed lease only if no live slave holds a better
	// copy of the log (offsets.Contest): a lagging slave never wins over
	// one that acknowledged more.
	contest := r.NewContest(cs, ttl, func() (int64, int64) { return r.agreed.Load(), r.log.MaxPhysOffset() })
	// When in doubt, wait: a copy that ends before the durable end the
	// master last checkpointed lacks what it wrote, maybe acknowledged;
	// the slave that holds it may only be cut off for a moment. Such a
	// copy waits three TTLs for a better one before it takes over.
	contest.DoubtWait = 3 * ttl
	// A copy that may lack what this node acknowledged (it came back from
	// a power loss) also waits to hear from the lapsed lease's holder, the
	// other copy of it.
	contest.Floor = func(ctx context.Context) (int64, error) {
		cp, err := offsets.ReadCheckpoint(ctx, cs)
		if err != nil || cp == nil {
			return 0, err
		}
		cl, _ := r.deps.Checkpoints.CommitLog(cp)
		return cl.HWM, nil
	}
	// contesting: the last attempt deferred (to a better copy, or to wait
	// for one). The next keeps the candidacy live from its start: others
	// decide by whether it is republished while they wait, and a gap
	// between two attempts must not make it look gone.
	contesting := false
	lg := r.deps.Logger
	for wait := 100 * time.Millisecond; ctx.Err() == nil; {
		if r.mayLack.Load() && r.deps.Host.CaughtUp() {
			// Caught up with a master since: this copy holds what that
			// master had, and the data dir survives whole from now on.
			if err := r.recordBoot(); err != nil {
				lg.Warn("failover: recording the boot in writer.json failed", "err", err)
			} else {
				r.mayLack.Store(false)
			}
		}
		// A copy that may lack what this node acknowledged (it came back
		// from a power loss and has not caught up with a master since)
		// also waits to hear from the lapsed lease's holder, the other
		// copy of it (a sync_master's: an async_master's slaves never
		// made its acknowledgements).
		contest.HearHolder = r.mayLack.Load()
		rec, _, err := offsets.ReadLease(ctx, cs)
		if err == nil && rec.Instance != r.following.Instance && !rec.Released && rec.Instance != r.ident.Instance {
			r.RequestRoleChange(&RoleChange{Role: RoleSlave, Reason: "the bucket lease is held by " + rec.Identity().String()})
			return
		}
		if err == nil && rec.Epoch > r.following.Epoch && !rec.Released {
			r.RequestRoleChange(&RoleChange{Role: RoleSlave, Reason: fmt.Sprintf("the master now writes under epoch %d", rec.Epoch)})
			return
		}
		if err == nil && !rec.Released && rec.Instance != r.ident.Instance {
			// Another broker took the lease this one handed over: the
			// hold-off has done its job. (A demoted master whose slave
			// generation started after the new holder took over follows it
			// in the same generation; keeping the hold-off then left a
			// later demote of that holder with nobody to take the lease.)
			r.noTakeover = time.Time{}
		}
		if time.Now().Before(r.noTakeover) {
			// Demoted: leave the released lease to the slave.
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		role := masterRole(r.cfg.NodeRole, rec.Role)
		lease, err := offsets.AcquireLease(ctx, cs, r.ident, ttl, offsets.AcquireOptions{
			MinEpoch: r.following.Epoch, HAAddr: r.deps.Host.HAAddr(), Role: role, Mono: r.deps.Mono,
			// An unreleased lease of our own instance is a master
			// generation of this data dir that crashed: watched and
			// contested like anyone's. A generation younger than a TTL
			// contests at once, since its watch began late.
			Contest: contest, WatchOwn: true, ContestNow: contesting || time.Since(r.cfg.Started) < ttl,
			OnWait: func(held offsets.LeaseRecord, d time.Duration) {
				lg.Debug("failover: watching the master's lease", "holder", held.Identity().String(), "window", d)
			},
		})
		var held *offsets.LeaseHeldError
		var deferred *offsets.DeferredError
		contesting = errors.As(err, &deferred)
		switch {
		case err == nil:
			lg.Warn("failover: the master's lease lapsed; this slave took it and becomes master",
				"epoch", lease.Epoch(), "role", role, "lapsed", rec.Identity().String())
			contest.Clear(ctx)
			offsets.PruneReplicas(ctx, cs, lease.Epoch())
			r.RequestRoleChange(&RoleChange{Role: role, Reason: "took the bucket lease over", Lease: lease})
			return
		case errors.As(err, &held):
			wait = 100 * time.Millisecond // the master renewed: watch again
		case errors.As(err, &deferred) && len(deferred.Missing) > 0:
			// Slaves that followed the old sync_master have not been heard
			// from: one of them may hold what it acknowledged.
			r.logMissing(deferred)
			wait = 100 * time.Millisecond
		case errors.As(err, &deferred) && deferred.Doubt != nil:
			// No better copy is live, but this one lacks what the old
			// master checkpointed: the slave that holds it may be cut off
			// for a moment. Wait (bounded) before taking over without it.
			lg.Warn("failover: the master's lease lapsed; this slave's copy ends before what the master checkpointed, so it waits for a better copy first",
				"ownEnd", deferred.Doubt.End, "checkpointed", deferred.Doubt.Floor, "waitLeft", deferred.Doubt.Left)
			wait = 100 * time.Millisecond
		case errors.As(err, &deferred):
			// A live slave holds a better copy: it takes the lease, and
			// this one follows it (or, if it never does, contests again).
			lg.Warn("failover: the master's lease lapsed; leaving it to a slave with a better copy of the log",
				"better", deferred.Better.String(), "ownEpoch", deferred.Self.Epoch, "ownEnd", deferred.Self.End)
			wait = 100 * time.Millisecond
		case ctx.Err() != nil:
			return
		default:
			lg.Warn("failover: reading the bucket lease failed; retrying", "err", err, "retry", wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 3*time.Second)
		}
	}
}

// logMissing says, at most once a TTL, why a takeover waits for silent
// slaves (the contest retries every 100 ms).
func (r *Roles) logMissing(d *offsets.DeferredError) {
	now := time.Now()
	if now.Sub(r.missingLogged) < r.LeaseTTL() {
		return
	}
	r.missingLogged = now
	r.deps.Logger.Warn("failover: the master's lease lapsed; waiting to hear from every slave that may hold what it acknowledged",
		"reason", d.Error())
}
