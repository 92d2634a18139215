package namesrv

import (
	"maps"
	"slices"

	"github.com/stratamq/stratamq/remoting"
)

// getRouteInfoByTopic handles GET_ROUTEINFO_BY_TOPIC (105).
func (ns *NameServer) getRouteInfoByTopic(req *remoting.Command) *remoting.Command {
	var h remoting.GetRouteInfoRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return badRequest(req, err)
	}
	route := ns.route(h.Topic)
	if route == nil {
		return remoting.NewResponse(req, remoting.TopicNotExist,
			"No topic route info in name server for the topic: "+h.Topic)
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = route.Encode()
	return resp
}

// route builds a topic's route, or nil when no live broker serves it.
func (ns *NameServer) route(topic string) *remoting.TopicRouteData {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	qds := ns.mu.topics[topic]
	if len(qds) == 0 {
		return nil
	}
	r := &remoting.TopicRouteData{FilterServerTable: map[string][]string{}}
	for _, name := range slices.Sorted(maps.Keys(qds)) {
		bd := ns.mu.brokers[name]
		if bd == nil {
			continue
		}
		r.QueueDatas = append(r.QueueDatas, qds[name])
		r.BrokerDatas = append(r.BrokerDatas, remoting.BrokerData{
			Cluster:     bd.Cluster,
			BrokerName:  bd.BrokerName,
			BrokerAddrs: maps.Clone(bd.BrokerAddrs),
		})
	}
	if len(r.BrokerDatas) == 0 {
		return nil
	}
	r.OrderTopicConf = ns.mu.kv[orderTopicConfigNamespace][topic]
	return r
}
