package broker

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/stratamq/stratamq/ha"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// haState is the broker's HA side (issue 10): a master's HA listener, or a
// slave's stream from its master. Run starts it before serving and stops it
// after the remoting server drained.
type haState struct {
	master *ha.Master // nil unless a master with an HA listener
	slave  *ha.Slave  // nil unless STRATAMQ_ROLE=slave
	follow *follower  // nil unless STRATAMQ_ROLE=slave (wire_follow.go)
}

// onDispatch is the store's OnDispatch hook: wake held pulls, and the HA
// streams of a master.
func (b *Broker) onDispatch(topic string, queueID int32, queueOffset int64, tagsCode int64) {
	b.hold.notify(topic, queueID, queueOffset, tagsCode)
	b.pop.Dispatched()
	if m := b.haMaster.Load(); m != nil {
		m.Notify()
	}
}

// startHA starts the master's HA listener or the slave's stream.
func (b *Broker) startHA() error {
	switch b.cfg.Role {
	case RoleSlave:
		if b.haMasterAddr == "" {
			b.haMasterAddr = b.cfg.HAMaster
		}
		f, err := b.openFollower()
		if err != nil {
			return err
		}
		b.ha.follow = f
		resolve := b.resolveHAMaster
		if b.cfg.HAFailover && b.haMasterAddr != "" {
			resolve = nil // the lease holder, not a name server's possibly stale answer
		}
		if b.haMasterAddr == "" && len(b.cfg.NameServers()) == 0 {
			b.log.Warn("slave: no master to follow yet (no lease holder and no STRATAMQ_HA_MASTER); watching the bucket lease")
			return nil
		}
		s, err := ha.StartSlave(ha.SlaveOptions{Master: b.haMasterAddr, Resolve: resolve, MinEpoch: b.agreed.Load(),
			OnDiverged: func(cut int64) {
				b.requestRoleChange(&RoleChange{Role: RoleSlave, diverged: true, masterCut: cut,
					Reason: fmt.Sprintf("the master says this log diverged from its own at offset %d", cut)})
			},
			OnBeforeLogStart: func(start int64) {
				b.requestRoleChange(&RoleChange{Role: RoleSlave, restartAt: start,
					Reason: fmt.Sprintf("the master's log starts at offset %d, past this slave's end: the slave starts its log again there", start)})
			},
			OnAccepted: func(epoch int64) error {
				if !b.cfg.HAFailover || b.scoped == nil {
					return nil
				}
				return b.helloAccepted(epoch)
			},
			BrokerName: b.cfg.BrokerName, Log: b.store, MaxTransfer: max(ha.DefaultMaxTransfer, int(b.cfg.MaxMessageSize)+1<<20), Logger: b.log,
			Dial: b.haDial, Secret: b.haSecret})
		if err != nil {
			return fmt.Errorf("broker: STRATAMQ_ROLE=slave: %w", err)
		}
		b.ha.slave = s
		b.metrics.WatchHASlave(func() int64 { return s.State().Received })
		b.hastat.slave.Store(s)
		if b.haMasterAddr != "" {
			b.log.Info("following the master's HA stream", "haMaster", b.haMasterAddr, "epoch", b.following.Epoch)
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
		m, err := ha.StartMaster(ha.MasterOptions{Listen: b.cfg.HAListen, Log: b.store, Epoch: b.epoch, Diverged: b.divergedAt,
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
		b.ha.master = m
		b.haMaster.Store(m)
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

// stopHA stops what startHA started.
func (b *Broker) stopHA() {
	if b.ha.slave != nil {
		_ = b.ha.slave.Close()
	}
	if b.ha.master != nil {
		b.haMaster.Store(nil)
		_ = b.ha.master.Close()
	}
}

// HAAddr is the master's bound HA address ("" without a listener).
func (b *Broker) HAAddr() string {
	if b.ha.master == nil {
		return ""
	}
	return b.ha.master.Addr().String()
}

// haServerAddr is the HA address registered with the name servers (their
// answer to a slave names it): the advertised host with the HA listener's
// port; "" without a listener.
func (b *Broker) haServerAddr() string {
	m := b.haMaster.Load()
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
	return b.dur.id.Epoch
}

// readBound is the visibility bound of consumer reads, V
// (store.GetRequest.MaxPhys; 0: none). A sync_master shows consumers only
// what is replicated: the high watermark, the highest offset a slave
// acked during this run (ha.Master.Acked), and never less than the log
// this epoch took over (its start, the best copy there was). It never
// goes back when slaves leave: alone (sends answered SLAVE_NOT_AVAILABLE)
// the master stores what it is sent but shows none of it until a slave
// holds it, so a failover to a slave never hands a queue offset a consumer
// read to another message. With STRATAMQ_HA_MIN_INSYNC=1 the master
// acknowledges alone while no slave is in sync and shows what it
// acknowledged: the bound is the best ack of the in-sync slaves
// (ha.Master.InSync), none while no slave is in sync. Other roles: no
// bound.
func (b *Broker) readBound() int64 {
	if b.cfg.Role != RoleSyncMaster {
		return 0
	}
	m := b.haMaster.Load()
	if m == nil && b.cfg.HAListen != "" {
		return 1 // stopped (a held pull answered at shutdown): its slaves' acks are gone, show nothing more
	}
	if m == nil {
		return 0 // no HA listener: alone
	}
	if b.cfg.HAMinInSync <= 1 {
		n, best := m.InSync()
		if n == 0 {
			return 0
		}
		return max(best, 1)
	}
	hw := b.hw.Load()
	if acked, _ := m.Acked(); acked > hw {
		for !b.hw.CompareAndSwap(hw, acked) {
			if hw = b.hw.Load(); hw >= acked {
				break
			}
		}
		hw = max(hw, acked)
	}
	return max(hw, 1) // every record ends past offset 1: 1 hides them all
}

// visible reports whether a record ending at end is within readBound.
func (b *Broker) visible(end int64) bool {
	v := b.readBound()
	return v == 0 || end <= v
}

// hiddenEnd is the commitlog end of the record at topic/queue/offset when
// readBound hides it, else 0 (no bound, no such record, or a read error:
// the caller runs the pull again, which reports the error).
func (b *Broker) hiddenEnd(topic string, queue int32, offset int64) int64 {
	v := b.readBound()
	if v == 0 {
		return 0
	}
	phys, size, _, ok, err := b.store.QueueEntry(topic, queue, offset)
	if err != nil || !ok || phys+int64(size) <= v {
		return 0
	}
	return phys + int64(size)
}

// holdHANotify starts a sync_master's send whose records the sending
// goroutine pushes to the slaves itself (pushHA, before slaveAck waits):
// the store's dispatch of them does not wake the HA stream goroutines. It
// returns the master to give to pushHA (nil for the other roles); every
// non-nil result must reach pushHA, whatever the put's outcome.
func (b *Broker) holdHANotify() *ha.Master {
	if b.cfg.Role != RoleSyncMaster {
		return nil
	}
	m := b.haMaster.Load()
	if m != nil {
		m.HoldNotify()
	}
	return m
}

// pushHA ends holdHANotify: the bytes written since go to idle slaves on
// this goroutine (ha.Master.Push), within STRATAMQ_HA_ACK_TIMEOUT.
func (b *Broker) pushHA(m *ha.Master) {
	if m != nil {
		m.Push(time.Now().Add(b.cfg.HATimeout))
	}
}

// slaveAck is sync_master's wait: nil at once for the other roles; else nil
// once a slave holds the log up to the end of res (awaitSlave, waited for
// here: bounded by STRATAMQ_HA_ACK_TIMEOUT, ended by the HA master's stop).
func (b *Broker) slaveAck(res []store.PutResult) error {
	if b.cfg.Role != RoleSyncMaster || len(res) == 0 {
		return nil // no channel to allocate on every other role's send
	}
	ch := make(chan error, 1)
	b.awaitSlave(res, func(err error) { ch <- err })
	return <-ch
}

// awaitSlave is sync_master's wait without a waiting goroutine: done gets
// nil at once for the other roles; else nil once a slave holds the log up
// to the end of res, or the error that ends the wait. It runs on this
// goroutine when that is known at once (no slave, or already acked), else
// on the goroutine that settles it: the HA master's report reader (the
// ack), its deadline timer (STRATAMQ_HA_ACK_TIMEOUT), a slave's disconnect
// or the master's stop. done must not block.
func (b *Broker) awaitSlave(res []store.PutResult, done func(error)) {
	if b.cfg.Role != RoleSyncMaster || len(res) == 0 {
		done(nil)
		return
	}
	m := b.haMaster.Load()
	if m == nil {
		done(fmt.Errorf("%w: the HA listener is not running", ha.ErrSlaveNotAvailable))
		return
	}
	last := res[len(res)-1]
	m.AwaitAck(last.PhysOffset+int64(last.Size), time.Now().Add(b.cfg.HATimeout), func(err error) {
		if errors.Is(err, ha.ErrSlaveTimeout) {
			err = fmt.Errorf("%w (STRATAMQ_HA_ACK_TIMEOUT %v)", err, b.cfg.HATimeout)
		}
		done(err)
	})
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
