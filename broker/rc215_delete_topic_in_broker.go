package broker

import (
	"context"

	"github.com/stratamq/stratamq/remoting"
)

// deleteTopicInBroker handles DELETE_TOPIC_IN_BROKER (215): the topic's
// config, its consume queues and every group's offsets on it go. An invalid
// name or a RocketMQ system topic (TBW102, SCHEDULE_TOPIC_XXXX, rmq_sys_*,
// ...) is refused with SYSTEM_ERROR, as in 4.9, before anything is touched.
func (b *Broker) deleteTopicInBroker(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.DeleteTopicRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	if r := badTopic(req, h.Topic); r != nil {
		return r
	}
	if r := systemTopicConflict(req, h.Topic); r != nil {
		return r
	}
	// A compacted topic's generations are unlisted first: created again,
	// the topic numbers its queues anew, and no read below an old point
	// may reach the old records.
	if err := b.dropCompacted(ctx, h.Topic); err != nil { // wire_compaction.go
		return errResponse(req, remoting.SystemError, "unlist the topic's compacted generations: "+err.Error())
	}
	// Created again, the topic takes STRATAMQ_DURABILITY: framed in the
	// durability history (durability_history.go) like a change.
	if err := b.changeDurability(remoting.TopicConfig{TopicName: h.Topic}, func() error {
		b.topics.Delete(h.Topic)
		return nil
	}); err != nil {
		return errResponse(req, remoting.SystemError, "record the topic's durability change: "+err.Error())
	}
	b.offsets.DeleteTopic(h.Topic)
	b.pop.DeleteTopic(h.Topic) // package pop: no group has its messages in flight any more
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
