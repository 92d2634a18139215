package broker

import (
	"github.com/stratamq/stratamq/broker/replication"
	"github.com/stratamq/stratamq/ha"
	"github.com/stratamq/stratamq/store"
)

// A master's side of HA replication (package replication): its HA
// listener, a sync_master's high watermark, read bound and
// acknowledgement waits. This file wires it: the Service is made in New
// (its high watermark set once the store is open), started by startHA
// (ha.go) and stopped by stopHA; the handlers and the pull hold call the
// thin methods below, which say what the role needs.

// newReplication is the Service for cfg's role.
func newReplication(cfg Config) *replication.Service {
	return replication.New(replication.Config{SyncMaster: cfg.Role == RoleSyncMaster, Listener: cfg.HAListen != "",
		MinInSync: cfg.HAMinInSync, AckTimeout: cfg.HATimeout})
}

// readBound is the visibility bound of consumer reads (0: none;
// replication.Service.ReadBound): a sync_master's consumers read only
// what a slave holds.
func (b *Broker) readBound() int64 { return b.repl.ReadBound() }

// holdHANotify starts a sync_master's send whose records the sending
// goroutine pushes to the slaves itself (replication.Service.HoldNotify);
// every non-nil result must reach pushHA.
func (b *Broker) holdHANotify() *ha.Master { return b.repl.HoldNotify() }

// pushHA ends holdHANotify (replication.Service.Push).
func (b *Broker) pushHA(m *ha.Master) { b.repl.Push(m) }

// slaveAck is sync_master's wait (replication.Service.Ack): nil at once
// for the other roles.
func (b *Broker) slaveAck(res []store.PutResult) error { return b.repl.Ack(res) }

// awaitSlave is sync_master's wait without a waiting goroutine
// (replication.Service.Await); done must not block.
func (b *Broker) awaitSlave(res []store.PutResult, done func(error)) { b.repl.Await(res, done) }

// slaveHeld is the highest commitlog end a slave of this sync_master
// acknowledged in this run (replication.Service.Held).
func (b *Broker) slaveHeld() int64 { return b.repl.Held() }
