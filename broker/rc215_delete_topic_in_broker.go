package broker

import (
	"context"

	"github.com/stratamq/stratamq/remoting"
)

// deleteTopicInBroker handles DELETE_TOPIC_IN_BROKER (215): the topic's
// config, its consume queues and every group's offsets on it go.
func (b *Broker) deleteTopicInBroker(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.DeleteTopicRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	if h.Topic == DefaultTopic {
		return errResponse(req, remoting.NoPermission, "the topic "+DefaultTopic+" cannot be deleted")
	}
	b.topics.Delete(h.Topic)
	b.offsets.DeleteTopic(h.Topic)
	if err := b.store.DeleteTopic(h.Topic); err != nil {
		return errResponse(req, remoting.SystemError, "delete topic data: "+err.Error())
	}
	if err := b.saveConfig(); err != nil {
		return errResponse(req, remoting.SystemError, "persist config: "+err.Error())
	}
	b.log.Info("topic deleted", "topic", h.Topic)
	b.requestRegister()
	return remoting.NewResponse(req, remoting.Success, "")
}
