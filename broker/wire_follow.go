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
// (openFollower) for STRATAMQ_ROLE=slave, Run runs it among its loops
// (slaveFollow) and Close closes it; the registrar hands it the name
// server's answers and UPDATE_CONSUMER_OFFSET its commits.

// follower is a slave's follower (nil on a master).
type follower = follow.Follower

// openFollower opens the follower over the open store and tables, loading
// the pending offsets a previous run left in the config directory.
func (b *Broker) openFollower() (*follower, error) {
	d := follow.Deps{FS: b.fs, Logger: b.log, Master: followMaster{b}, Stream: followStream{b},
		Topics: b.topics, Groups: b.groups, Offsets: b.offsets, Store: b.store, Retention: b.ret}
	if b.tier != nil && b.tier.ReadOnly() {
		d.Bucket = b.tier
	}
	return follow.Open(follow.Config{Dir: filepath.Join(b.cfg.DataDir, "config"), Interval: b.cfg.HASyncInterval}, d)
}

// slaveFollow is a slave's sync loop (Run starts it for STRATAMQ_ROLE=slave).
func (b *Broker) slaveFollow(ctx context.Context) {
	if f := b.ha.follow; f != nil {
		f.Run(ctx)
	}
}

// resolveHAMaster is the slave's ha.SlaveOptions.Resolve: with
// STRATAMQ_HA_MASTER set, "" (Master is dialled); else the name server's
// haServerAddr for the master.
func (b *Broker) resolveHAMaster() string {
	if b.cfg.HAMaster != "" || b.ha.follow == nil {
		return ""
	}
	return b.ha.follow.NameServerHA()
}

// masterRemotingAddr is where the slave polls its master
// (follow.Follower.MasterAddr); "" on a broker that follows none.
func (b *Broker) masterRemotingAddr() string {
	if b.ha.follow == nil {
		_, hello := followStream{b}.Hello()
		return hello
	}
	return b.ha.follow.MasterAddr()
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

// followStream is the slave's HA stream (b.ha.slave, once startHA made it).
type followStream struct{ b *Broker }

func (s followStream) Hello() (bool, string) {
	if s.b.ha.slave == nil {
		return false, ""
	}
	st := s.b.ha.slave.State()
	return st.Connected, st.MasterAddr
}

var (
	_ follow.Master = followMaster{}
	_ follow.Stream = followStream{}
)
