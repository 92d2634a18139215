package broker

import (
	"encoding/binary"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Slave reads: the suggestWhichBrokerId of a PULL_MESSAGE answer (issue 10
// item 3; rocketmq-protocol.md §4.3). The official clients keep the last
// suggestion per message queue and send that queue's next pull to the
// broker of that id under the same brokerName (rocketmq-client-go:
// processPullResult → updatePullFromWhichNode, tryFindBroker →
// recalculatePullFromWhichNode), falling back to any address of the
// brokerName when that id is not in the route.
//
// A consumer lags when the first record a pull returns is
//   - below the broker's local log start (LocalMinPhysOffset): it was read
//     from the bucket, the cold tier — RocketMQ's rule that the pulled
//     bytes are no longer in memory, with our local disk as the hot tier;
//     or
//   - more than STRATAMQ_SLAVE_READ_LAG bytes behind the log end, when that
//     is set (RocketMQ: 40 % of RAM, accessMessageInMemoryMaxRatio).
//
// A master, with STRATAMQ_SLAVE_READ_ENABLE, suggests the group's
// whichBrokerWhenConsumeSlowly (1 by default) for a lagging pull when a
// slave is connected, lags at most STRATAMQ_HA_MAX_LAG and holds the pulled
// record (its acked end is past it), and the group's brokerId (0) for the
// others. Unlike RocketMQ it never sends a consumer to a slave it does not
// see. Without the setting a master always suggests 0, as RocketMQ.
//
// A slave serves every pull it gets (RocketMQ's slave without
// slaveReadEnable answers PULL_RETRY_IMMEDIATELY and suggests the master;
// serving is harmless and keeps a consumer whose route lost the master
// reading). It suggests 0, back to the master, once the consumer no longer
// lags or without STRATAMQ_SLAVE_READ_ENABLE — but only while its HA stream
// from the master is up: with the master gone it suggests its own id, so
// consumers stay on it (RocketMQ 5.x redirects to the master only while the
// master is in the group).

// recordPhysOffsetAt is PHYSICALOFFSET's position in a stored record (§3.3).
const recordPhysOffsetAt = 28

// suggestBroker is the suggestWhichBrokerId of a pull answered with res to
// group g.
func (b *Broker) suggestBroker(g remoting.SubscriptionGroupConfig, res store.GetResult) int64 {
	phys := int64(-1)
	if res.Status == store.Found && len(res.Records) > 0 && len(res.Records[0]) >= recordPhysOffsetAt+8 {
		phys = int64(binary.BigEndian.Uint64(res.Records[0][recordPhysOffsetAt:]))
	}
	lagging := phys >= 0 && b.pullLags(phys)
	if b.cfg.Role == RoleSlave {
		if !b.masterStreaming() {
			return b.cfg.BrokerID
		}
		if b.cfg.SlaveReadEnable && lagging {
			return g.WhichBrokerWhenConsumeSlowly
		}
		return remoting.MasterID
	}
	if !b.cfg.SlaveReadEnable {
		return remoting.MasterID
	}
	if lagging && b.slaveHolds(phys) {
		return g.WhichBrokerWhenConsumeSlowly
	}
	return g.BrokerID
}

// pullLags reports whether a pull whose first record is at phys lags (see
// above).
func (b *Broker) pullLags(phys int64) bool {
	if phys < b.store.LocalMinPhysOffset() {
		return true
	}
	return b.cfg.SlaveReadLag > 0 && b.store.MaxPhysOffset()-phys > int64(b.cfg.SlaveReadLag)
}

// slaveHolds reports whether a master has a connected slave that lags at
// most STRATAMQ_HA_MAX_LAG and holds the record at phys.
func (b *Broker) slaveHolds(phys int64) bool {
	m := b.repl.Master()
	if m == nil {
		return false
	}
	for _, s := range m.Slaves() {
		if s.Lag <= int64(b.cfg.HAMaxLag) && s.Acked > phys {
			return true
		}
	}
	return false
}

// masterStreaming reports whether a slave's HA stream from its master is
// connected. It runs on handler goroutines while Run may still be
// starting HA: replication.Service.Slave reads an atomic pointer.
func (b *Broker) masterStreaming() bool {
	s := b.repl.Slave()
	return s != nil && s.State().Connected
}
