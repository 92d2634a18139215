package namesrv

import "github.com/stratamq/stratamq/remoting"

// deleteTopicInNamesrv handles DELETE_TOPIC_IN_NAMESRV (216). With a
// clusterName (5.x) only that cluster's brokers lose the topic. A name that
// fails remoting.ValidateTopic is refused with SYSTEM_ERROR.
func (ns *NameServer) deleteTopicInNamesrv(req *remoting.Command) *remoting.Command {
	var h remoting.DeleteTopicRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return badRequest(req, err)
	}
	if err := remoting.ValidateTopic(h.Topic); err != nil {
		return remoting.NewResponse(req, remoting.SystemError, err.Error())
	}
	ns.mu.Lock()
	if h.ClusterName == "" {
		delete(ns.mu.topics, h.Topic)
	} else if qds := ns.mu.topics[h.Topic]; qds != nil {
		for name := range ns.mu.clusters[h.ClusterName] {
			delete(qds, name)
		}
		if len(qds) == 0 {
			delete(ns.mu.topics, h.Topic)
		}
	}
	ns.mu.Unlock()
	ns.log.Info("namesrv: topic deleted", "topic", h.Topic, "cluster", h.ClusterName)
	return remoting.NewResponse(req, remoting.Success, "")
}
