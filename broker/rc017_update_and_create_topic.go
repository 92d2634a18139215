package broker

import (
	"context"
	"fmt"

	"github.com/stratamq/stratamq/broker/compaction"
	"github.com/stratamq/stratamq/remoting"
)

// updateAndCreateTopic handles UPDATE_AND_CREATE_TOPIC (17) from admin tools.
func (b *Broker) updateAndCreateTopic(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.CreateTopicRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	if r := badTopic(req, h.Topic); r != nil {
		return r
	}
	if r := systemTopicConflict(req, h.Topic); r != nil && !(traceTopicUpdate(h.Topic) && h.Attributes != "") {
		return r
	}
	if h.Topic == b.cfg.Cluster || h.Topic == b.cfg.BrokerName {
		return errResponse(req, remoting.SystemError, fmt.Sprintf("the topic[%s] is conflict with system reserved words", h.Topic))
	}
	if lim := int32(b.cfg.MaxQueuesPerTopic); h.ReadQueueNums <= 0 || h.WriteQueueNums <= 0 || h.ReadQueueNums > lim || h.WriteQueueNums > lim {
		return errResponse(req, remoting.SystemError, fmt.Sprintf("illegal queue numbers read=%d write=%d: want 1..%d (the broker's queue limit per topic, STRATAMQ_MAX_QUEUES_PER_TOPIC)", h.ReadQueueNums, h.WriteQueueNums, lim))
	}
	perm := h.Perm
	if perm == 0 {
		perm = PermRead | PermWrite
	}
	// RocketMQ 5's attribute modifications ("+k=v,-k") apply to the
	// topic's current attributes (retention.time: package retention).
	cur, exists := b.topics.Get(h.Topic)
	attrs, err := b.applyAttributes(cur.Attributes, h.Attributes)
	if err != nil {
		return errResponse(req, remoting.SystemError, fmt.Sprintf("topic %s: %v", h.Topic, err))
	}
	if exists && cur.Attributes[compaction.Attribute] != attrs[compaction.Attribute] {
		// As RocketMQ's: cleanup.policy is set when a topic is created (a
		// compacted topic's history lives in its generations).
		return errResponse(req, remoting.SystemError, fmt.Sprintf("topic %s: attempt to update an unchangeable attribute. key: %s", h.Topic, compaction.Attribute))
	}
	if r := b.checkMessageType(req, h.Topic, h.Attributes, attrs); r != nil {
		return r
	}
	tc := remoting.TopicConfig{TopicName: h.Topic, ReadQueueNums: h.ReadQueueNums, WriteQueueNums: h.WriteQueueNums,
		Perm: perm, TopicFilterType: h.TopicFilterType, TopicSysFlag: h.TopicSysFlag, Order: h.Order, Attributes: attrs}
	var changed bool
	err = b.changeDurability(tc, func() error { // durability_history.go
		var err error
		changed, err = b.topics.Create(tc)
		return err
	})
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	if changed {
		b.log.Info("topic created or updated", "topic", h.Topic, "read", h.ReadQueueNums, "write", h.WriteQueueNums, "perm", perm,
			"attributes", attrs)
		if err := b.topics.Save(); err != nil {
			return errResponse(req, remoting.SystemError, "persist topics: "+err.Error())
		}
		b.requestRegister()
	}
	return remoting.NewResponse(req, remoting.Success, "")
}
