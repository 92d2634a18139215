package namesrv

import (
	"fmt"

	"github.com/stratamq/stratamq/remoting"
)

// unregisterBroker handles UNREGISTER_BROKER (104), sent by a broker
// shutting down. Only the conn that made a live registration may remove
// it (a broker unregisters on the conn it registers on); the address is
// looked up under its broker name's cluster, so a request naming another
// cluster cannot remove it either. An address with no live registration
// is removed from its broker name as before.
func (ns *NameServer) unregisterBroker(c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.UnregisterBrokerRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return badRequest(req, err)
	}
	var connID uint64
	if c != nil {
		connID = c.ID()
	}
	ns.mu.Lock()
	cluster := h.ClusterName
	bd := ns.mu.brokers[h.BrokerName]
	if bd != nil {
		cluster = bd.Cluster
	}
	key := brokerKey{cluster, h.BrokerAddr}
	if lb := ns.mu.live[key]; lb != nil && lb.connID != 0 && lb.connID != connID && ns.aliveLocked(lb) {
		ns.mu.Unlock()
		ns.warnLimited("namesrv: UNREGISTER_BROKER from another connection refused", "broker", h.BrokerName,
			"addr", h.BrokerAddr, "peer", peerOf(c))
		return remoting.NewResponse(req, remoting.NoPermission, fmt.Sprintf(
			"broker %s at %s was registered on another connection; only that connection may unregister it",
			h.BrokerName, h.BrokerAddr))
	}
	delete(ns.mu.live, key)
	if bd != nil {
		if bd.BrokerAddrs[h.BrokerID] == h.BrokerAddr {
			delete(bd.BrokerAddrs, h.BrokerID)
		}
		if len(bd.BrokerAddrs) == 0 {
			ns.removeBrokerNameLocked(bd.Cluster, h.BrokerName)
		}
	}
	ns.mu.Unlock()
	ns.log.Info("namesrv: broker unregistered", "cluster", h.ClusterName, "broker", h.BrokerName,
		"id", h.BrokerID, "addr", h.BrokerAddr)
	return remoting.NewResponse(req, remoting.Success, "")
}
