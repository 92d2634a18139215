package namesrv

import (
	"maps"
	"slices"

	"github.com/stratamq/stratamq/remoting"
)

// getBrokerClusterInfo handles GET_BROKER_CLUSTER_INFO (106).
func (ns *NameServer) getBrokerClusterInfo(req *remoting.Command) *remoting.Command {
	ci := remoting.ClusterInfo{
		BrokerAddrTable:  map[string]remoting.BrokerData{},
		ClusterAddrTable: map[string][]string{},
	}
	ns.mu.RLock()
	for name, bd := range ns.mu.brokers {
		ci.BrokerAddrTable[name] = remoting.BrokerData{
			Cluster: bd.Cluster, BrokerName: bd.BrokerName, BrokerAddrs: maps.Clone(bd.BrokerAddrs),
		}
	}
	for cluster, names := range ns.mu.clusters {
		ci.ClusterAddrTable[cluster] = slices.Sorted(maps.Keys(names))
	}
	ns.mu.RUnlock()
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = ci.Encode()
	return resp
}
