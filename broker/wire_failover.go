package broker

import (
	"context"
	"net"
	"path/filepath"
	"time"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/broker/failover"
	"github.com/stratamq/stratamq/broker/restore"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Failover (package failover): the bucket's lease on the brokerName's
// prefix decides who is master; a slave watches it and takes it over, a
// fenced master continues as a slave, a rejoining slave cuts a divergent
// log. This file wires it: b.fo is made in New (before a slave's store
// opens: PrepareReplica) and given the store once it is open; Run watches
// the lease on a failover slave (watchLease) and returns the *RoleChange
// it asks for; Node starts the next generation with it. The adapters
// below are what the package reads of the broker (foWire).

// RoleChange is what Run returns when the broker must continue in another
// role on the same data dir: Node starts the next generation with it.
type RoleChange = failover.RoleChange

// errHandingOver: a demoting master refuses sends while its slave catches
// up and takes the lease (answered SERVICE_NOT_AVAILABLE: clients retry).
var errHandingOver = failover.ErrHandingOver

// newFailover is the failover part of the generation b is; New calls it
// once the advertised address and the bucket are known. noTakeover and
// masterCut come from the previous generation (Deps).
func newFailover(b *Broker, cs offsets.ObjectStore, noTakeover time.Time, masterCut int64) *failover.Roles {
	c := b.cfg
	w := foWire{b}
	return failover.New(failover.Config{
		BrokerName: c.BrokerName, Role: c.Role, NodeRole: c.Role, HAFailover: c.HAFailover, HAMaster: c.HAMaster,
		LeaseTTL: c.LeaseTTL, CheckpointInterval: c.CheckpointInterval, HATimeout: c.HATimeout,
		HAUncleanAfter: c.HAUncleanAfter, HAMinInSync: c.HAMinInSync, SyncFlush: c.Flush == "sync",
		BootID: b.bootID, Advertise: b.advertise, DataDir: c.DataDir, WriterState: b.writerStatePath(),
		Started: b.started, NoTakeover: noTakeover, MasterCut: masterCut, RestartAt: b.restartAt, Afresh: b.afresh,
	}, failover.Deps{FS: b.fs, Logger: b.log, Mono: b.mono, Bucket: cs, DataDir: w, Checkpoints: w, Host: w})
}

// requestRoleChange asks Run to stop and continue as rc (the first request
// wins).
func (b *Broker) requestRoleChange(rc *RoleChange) { b.fo.RequestRoleChange(rc) }

// watchLease is a failover slave's lease watch (failover.Roles.Run).
func (b *Broker) watchLease(ctx context.Context) { b.fo.Run(ctx) }

// divergedAt is the HA master's Diverged: where a log last written under
// epoch must be cut to agree with this master's log (failover.CutFor).
func (b *Broker) divergedAt(epoch int64) (int64, bool) {
	if b.dur == nil {
		return -1, true
	}
	return failover.CutFor(b.dur.History(), epoch)
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

// Promote asks a slave to become the master of its brokerName now (admin
// promote; failover.Roles.Promote): it asks its master to demote itself,
// and takes the lease the master then releases. It returns once the
// master agreed.
func (b *Broker) Promote(ctx context.Context) error { return b.fo.Promote(ctx, foWire{b}) }

// Demote asks a master to hand over to its slave (admin demote;
// failover.Roles.Demote): it refuses new sends, waits until a slave holds
// its whole log, then continues as a slave of whichever broker takes the
// lease.
func (b *Broker) Demote(ctx context.Context) error { return b.fo.Demote(ctx, b.repl.Master()) }

// foWire is the broker as package failover reads it.
type foWire struct{ b *Broker }

func (w foWire) Fresh() bool { return w.b.storeIsFresh() }

func (w foWire) LogRange() (lo, end int64, ok bool, err error) {
	b := w.b
	segs, err := restore.LocalSegments(b.fs, filepath.Join(b.cfg.DataDir, "store", "commitlog"), int(b.cfg.MaxMessageSize))
	if err != nil || len(segs) == 0 {
		return 0, 0, false, err
	}
	return segs[0].Base, segs[len(segs)-1].Base + segs[len(segs)-1].Size, true, nil
}

func (w foWire) SetAside(why string) error { return w.b.setAside(why) }

func (w foWire) CutLog(at int64, keep string) (int64, error) {
	return store.CutLog(w.b.fs, filepath.Join(w.b.cfg.DataDir, "store"), at, keep)
}

func (w foWire) ReadReplica() *offsets.Checkpoint { return w.b.readReplicaCheckpoint() }

func (w foWire) CommitLog(cp *offsets.Checkpoint) (durability.CommitLog, bool) {
	return w.b.commitLogOf(cp)
}

func (w foWire) HAAddr() string { return w.b.haAdvertise() }

func (w foWire) CaughtUp() bool {
	s := w.b.repl.Slave()
	return s != nil && !s.State().LastCaughtUp.IsZero()
}

func (w foWire) MasterAddr() string { return w.b.masterRemotingAddr() }

func (w foWire) AskDemote(ctx context.Context, addr string) (bool, string, error) {
	resp, err := w.b.invoke(ctx, addr, remoting.NewRequest(remoting.DemoteBroker, nil, nil))
	if err != nil {
		return false, "", err
	}
	return resp.Code == int32(remoting.Success), resp.Remark, nil
}
