package namesrv

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/stratamq/stratamq/remoting"
)

// getAllTopicList handles GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206).
func (ns *NameServer) getAllTopicList(req *remoting.Command) *remoting.Command {
	ns.mu.RLock()
	topics := slices.Sorted(maps.Keys(ns.mu.topics))
	ns.mu.RUnlock()
	return topicListResponse(req, topics)
}

func topicListResponse(req *remoting.Command, topics []string) *remoting.Command {
	if topics == nil {
		topics = []string{}
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body, _ = json.Marshal(remoting.TopicList{TopicList: topics})
	return resp
}
