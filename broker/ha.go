package broker

import (
	"errors"
	"fmt"
	"net"

	"github.com/stratamq/stratamq/ha"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// onDispatch is the store's OnDispatch hook: wake held pulls, and the HA
// streams of a master.
func (b *Broker) onDispatch(topic string, queueID int32, queueOffset int64, tagsCode int64) {
	b.hold.notify(topic, queueID, queueOffset, tagsCode)
	b.pop.Dispatched()
	b.repl.Notify()
}

// startHA starts the master's HA listener or the slave's stream and its
// follower (both in b.repl and b.follow before Run serves; stopHA stops
// the stream after the remoting server drained).
func (b *Broker) startHA() error {
	switch b.cfg.Role {
	case RoleSlave:
		haMaster := b.fo.HAMaster() // the lease holder's (PrepareReplica)
		if haMaster == "" {
			haMaster = b.cfg.HAMaster
		}
		if err := b.openFollower(); err != nil { // wire_follow.go
			return err
		}
		resolve := b.resolveHAMaster
		if b.cfg.HAFailover && haMaster != "" {
			resolve = nil // the lease holder, not a name server's possibly stale answer
		}
		if haMaster == "" && len(b.cfg.NameServers()) == 0 {
			b.log.Warn("slave: no master to follow yet (no lease holder and no STRATAMQ_HA_MASTER); watching the bucket lease")
			return nil
		}
		s, err := b.repl.StartSlave(ha.SlaveOptions{Master: haMaster, Resolve: resolve, MinEpoch: b.fo.Agreed(),
			OnDiverged: func(cut int64) {
				b.requestRoleChange(&RoleChange{Role: RoleSlave, Diverged: true, MasterCut: cut,
					Reason: fmt.Sprintf("the master says this log diverged from its own at offset %d", cut)})
			},
			OnBeforeLogStart: func(start int64) {
				b.requestRoleChange(&RoleChange{Role: RoleSlave, RestartAt: start,
					Reason: fmt.Sprintf("the master's log starts at offset %d, past this slave's end: the slave starts its log again there", start)})
			},
			OnAppendError: func(err error) {
				if errors.Is(err, store.ErrQueueNumbering) {
					b.requestRoleChange(&RoleChange{Role: RoleSlave, Afresh: true,
						Reason: "this log cannot follow the master's: " + err.Error()})
				}
			},
			OnAccepted: func(epoch int64) error {
				if !b.cfg.HAFailover || b.scoped == nil {
					return nil
				}
				return b.fo.HelloAccepted(epoch)
			},
			BrokerName: b.cfg.BrokerName, Log: b.store, MaxTransfer: max(ha.DefaultMaxTransfer, int(b.cfg.MaxMessageSize)+1<<20), Logger: b.log,
			Dial: b.haDial, Secret: b.haSecret})
		if err != nil {
			return fmt.Errorf("broker: STRATAMQ_ROLE=slave: %w", err)
		}
		b.metrics.WatchHASlave(func() int64 { return s.State().Received })
		if haMaster != "" {
			b.log.Info("following the master's HA stream", "haMaster", haMaster, "epoch", b.fo.Following().Epoch)
		} else {
			b.log.Info("following the master's HA stream at the address the name server reports", "namesrv", b.cfg.Namesrv)
		}
	default:
		if b.cfg.HAListen == "" {
			return nil
		}
		var onAcked func() // a sync_master's acks move its read bound: wake the pulls behind it
		if b.cfg.Role == RoleSyncMaster {
			onAcked = b.hold.wakeVisible
		}
		m, err := b.repl.Start(ha.MasterOptions{Listen: b.cfg.HAListen, Log: b.store, Epoch: b.epoch, Diverged: b.divergedAt,
			BrokerName: b.cfg.BrokerName, MaxLag: int64(b.cfg.HAMaxLag), MinInSync: b.cfg.HAMinInSync, Advertise: b.advertise,
			OnAcked: onAcked, Logger: b.log, WrapListener: b.tls.haListener, Listener: b.listener(),
			Secret: b.haSecret, MaxConns: b.cfg.HAMaxConns, StallTimeout: b.cfg.HATimeout})
		if err != nil {
			return fmt.Errorf("broker: STRATAMQ_HA_LISTEN: %w", err)
		}
		if len(b.haSecret()) == 0 {
			b.log.Warn("HA port without a secret: it serves slaves on this host only (loopback); set STRATAMQ_HA_SECRET on the master and its slaves (or an ACL admin account both sign with)",
				"haListen", m.Addr().String())
		}
		b.metrics.WatchHAAlone(m.AckedAlone)
		b.log.Info("HA listener ready", "haListen", m.Addr().String(), "role", b.cfg.Role)
	}
	return nil
}

// haSecret is the HA port's shared secret (ha.MasterOptions.Secret,
// SlaveOptions.Secret): STRATAMQ_HA_SECRET, else the secret of the account
// the broker signs its own requests with (the ACL's admin account), read
// at every hello so a reloaded ACL file's applies; nil without either.
func (b *Broker) haSecret() []byte {
	if b.cfg.HASecret != "" {
		return []byte(string(b.cfg.HASecret))
	}
	if c := b.credentials(); c.SecretKey != "" {
		return []byte(string(c.SecretKey))
	}
	return nil
}

// stopHA stops what startHA started (replication.Service.Stop: the
// slave's stream, or the master's listener).
func (b *Broker) stopHA() { b.repl.Stop() }

// HAAddr is the master's bound HA address ("" without a listener).
func (b *Broker) HAAddr() string {
	m := b.repl.Listener()
	if m == nil {
		return ""
	}
	return m.Addr().String()
}

// haServerAddr is the HA address registered with the name servers (their
// answer to a slave names it): the advertised host with the HA listener's
// port; "" without a listener.
func (b *Broker) haServerAddr() string {
	m := b.repl.Master()
	if m == nil {
		return ""
	}
	_, port, err := net.SplitHostPort(m.Addr().String())
	if err != nil {
		return ""
	}
	host, _, err := net.SplitHostPort(b.advertise)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(host, port)
}

// epoch is the lease's epoch (0 without a bucket), stamped on HA transfers.
func (b *Broker) epoch() int64 {
	if b.dur == nil {
		return 0
	}
	return b.dur.ID().Epoch
}

// slaveResult turns a stored message's success response into sync_master's
// FLUSH_SLAVE_TIMEOUT (12) or SLAVE_NOT_AVAILABLE (11) when err says so: the
// send result header stays (the message is stored), as RocketMQ answers.
func (b *Broker) slaveResult(resp *remoting.Command, err error) *remoting.Command {
	switch {
	case err == nil:
		return resp
	case errors.Is(err, ha.ErrSlaveTimeout):
		resp.Code = int32(remoting.FlushSlaveTimeout)
		resp.Remark = "the message is stored but no slave acknowledged it in time: " + err.Error()
	default:
		resp.Code = int32(remoting.SlaveNotAvailable)
		resp.Remark = "the message is stored but no slave can acknowledge it: " + err.Error()
	}
	return resp
}
