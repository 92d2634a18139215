package broker

import (
	"context"
	"path/filepath"

	"github.com/stratamq/stratamq/broker/follow"
	"github.com/stratamq/stratamq/remoting"
)

// A serving slave's follower (package follow): the master's addresses the
// name servers report, the offsets committed to the slave and not pushed
// yet, and the sync loop that copies the master's topics, groups and
// offsets and applies its manifest. This file wires it: startHA opens it
// (openFollower, the only writer of b.follow) for STRATAMQ_ROLE=slave,
// Run runs it among its loops (slaveFollow) and Close closes it; the
// registrar hands it the name server's answers and UPDATE_CONSUMER_OFFSET
// its commits (through follower).

// follower is a slave's follower; nil on a master. Run's startHA opens it
// before the remoting server serves and the loops start.
func (b *Broker) follower() *follow.Follower { return b.follow }

// openFollower opens the follower (b.follow) over the open store and
// tables, loading the pending offsets a previous run left in the config
// directory.
func (b *Broker) openFollower() error {
	d := follow.Deps{FS: b.fs, Logger: b.log, Master: followMaster{b}, Stream: followStream{b},
		Topics: b.topics, Groups: b.groups, Offsets: b.offsets, Store: b.store, Retention: b.ret}
	if b.tier != nil && b.tier.ReadOnly() {
		d.Bucket = b.tier
	}
	f, err := follow.Open(follow.Config{Dir: filepath.Join(b.cfg.DataDir, "config"), Interval: b.cfg.HASyncInterval}, d)
	if err != nil {
		return err
	}
	b.follow = f
	return nil
}

// slaveFollow is a slave's sync loop (Run starts it for STRATAMQ_ROLE=slave),
// and, with a bucket, the copy of the master's users and ACLs from its
// checkpoint (followAuth, auth2.go), ended and waited for when it returns.
func (b *Broker) slaveFollow(ctx context.Context) {
	if b.scoped != nil {
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); b.followAuth(actx) }()
		defer func() { cancel(); <-done }()
	}
	if f := b.follow; f != nil {
		f.Run(ctx)
	}
}

// resolveHAMaster is the slave's ha.SlaveOptions.Resolve: with
// STRATAMQ_HA_MASTER set, "" (Master is dialled); else the name server's
// haServerAddr for the master.
func (b *Broker) resolveHAMaster() string {
	if b.cfg.HAMaster != "" || b.follow == nil {
		return ""
	}
	return b.follow.NameServerHA()
}

// masterRemotingAddr is where the slave polls its master
// (follow.Follower.MasterAddr); "" on a broker that follows none.
func (b *Broker) masterRemotingAddr() string {
	if b.follow == nil {
		_, hello := followStream{b}.Hello()
		return hello
	}
	return b.follow.MasterAddr()
}

// followMaster is the master as the follower reaches it: requests signed
// as the broker signs its own (invoke).
type followMaster struct{ b *Broker }

func (m followMaster) Fetch(ctx context.Context, addr string, code remoting.RequestCode) (*remoting.Command, error) {
	return m.b.invoke(ctx, addr, remoting.NewRequest(code, nil, nil))
}

func (m followMaster) PushOffset(ctx context.Context, addr string, h remoting.UpdateConsumerOffsetRequestHeader) (*remoting.Command, error) {
	return m.b.invoke(ctx, addr, remoting.NewRequest(remoting.UpdateConsumerOffset, h.Encode(), nil))
}

// followStream is the slave's HA stream (replication.Service.Slave, once
// startHA started it).
type followStream struct{ b *Broker }

func (s followStream) Hello() (bool, string) {
	sl := s.b.repl.Slave()
	if sl == nil {
		return false, ""
	}
	st := sl.State()
	return st.Connected, st.MasterAddr
}

var (
	_ follow.Master = followMaster{}
	_ follow.Stream = followStream{}
)
