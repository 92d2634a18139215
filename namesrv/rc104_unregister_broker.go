package namesrv

import "github.com/stratamq/stratamq/remoting"

// unregisterBroker handles UNREGISTER_BROKER (104), sent by a broker
// shutting down.
func (ns *NameServer) unregisterBroker(req *remoting.Command) *remoting.Command {
	var h remoting.UnregisterBrokerRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return badRequest(req, err)
	}
	ns.mu.Lock()
	delete(ns.mu.live, brokerKey{h.ClusterName, h.BrokerAddr})
	if bd := ns.mu.brokers[h.BrokerName]; bd != nil {
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
