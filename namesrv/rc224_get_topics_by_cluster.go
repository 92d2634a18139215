package namesrv

import (
	"slices"

	"github.com/stratamq/stratamq/remoting"
)

// getTopicsByCluster handles GET_TOPICS_BY_CLUSTER (224): the topics with
// queues on any broker of the cluster.
func (ns *NameServer) getTopicsByCluster(req *remoting.Command) *remoting.Command {
	var h remoting.ClusterHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return badRequest(req, err)
	}
	var topics []string
	ns.mu.RLock()
	names := ns.mu.clusters[h.Cluster]
	for topic, qds := range ns.mu.topics {
		for name := range qds {
			if _, ok := names[name]; ok {
				topics = append(topics, topic)
				break
			}
		}
	}
	ns.mu.RUnlock()
	slices.Sort(topics)
	return topicListResponse(req, topics)
}
