package broker

import (
	"context"
	"fmt"

	"github.com/stratamq/stratamq/remoting"
)

// updateConsumerOffset handles UPDATE_CONSUMER_OFFSET (15), sent every 5 s
// per assigned queue (oneway from Java clients; client-go expects nothing).
//
// An offset for a topic this broker does not have is TOPIC_NOT_EXIST, and
// one for a queue the topic does not have (queueId < 0 or >= the larger of
// its read and write queue counts) is SYSTEM_ERROR, both with a remark. A
// negative offset is not stored (SUCCESS, with a remark): client-go commits
// -1 for a queue it holds but never pulled (its QUERY_CONSUMER_OFFSET got
// QUERY_NOT_FOUND), and storing it could overwrite the real offset another
// client committed meanwhile. RocketMQ 4.9 stores it; it never answers it
// back (QUERY_CONSUMER_OFFSET answers only offsets >= 0), so keeping the
// old offset is the only difference a client can see.
func (b *Broker) updateConsumerOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.UpdateConsumerOffsetRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	f := b.follower() // a serving slave takes offsets and pushes them to its master (wire_follow.go)
	if b.cfg.BrokerID != 0 && f == nil {
		return errResponse(req, remoting.NoPermission, "a slave does not take consumer offsets")
	}
	if r := badTopicAndGroup(req, h.Topic, h.ConsumerGroup); r != nil {
		return r
	}
	tc, ok := b.topics.Get(h.Topic)
	if !ok {
		return errResponse(req, remoting.TopicNotExist, fmt.Sprintf("topic[%s] not exist, apply first please! (consumer offset of group %s not stored)", h.Topic, h.ConsumerGroup))
	}
	if n := queueCount(tc); h.QueueID < 0 || h.QueueID >= n {
		return errResponse(req, remoting.SystemError, fmt.Sprintf("queueId[%d] is illegal, topic:[%s] has %d queues (consumer offset of group %s not stored)", h.QueueID, h.Topic, n, h.ConsumerGroup))
	}
	if h.CommitOffset < 0 {
		return remoting.NewResponse(req, remoting.Success, fmt.Sprintf("offset %d not stored: only offsets >= 0 are kept", h.CommitOffset))
	}
	if f != nil {
		f.Committed(h.ConsumerGroup, h.Topic, h.QueueID, h.CommitOffset) // before the table takes it
	}
	b.offsets.Commit(h.ConsumerGroup, h.Topic, h.QueueID, h.CommitOffset)
	return remoting.NewResponse(req, remoting.Success, "")
}
