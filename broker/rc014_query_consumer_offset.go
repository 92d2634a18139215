package broker

import (
	"context"
	"strconv"

	"github.com/stratamq/stratamq/remoting"
)

// queryConsumerOffset handles QUERY_CONSUMER_OFFSET (14). It answers only
// a committed offset >= 0 (RocketMQ 4.9: a stored -1, from a file written
// by 4.9 or an older StrataMQ, counts as nothing committed; answered back,
// it made a CONSUME_FROM_LAST_OFFSET client skip the queue). With nothing
// committed it follows RocketMQ 4.9 (ConsumerManageProcessor.queryConsumerOffset): offset 0 when the queue still starts at
// 0 and is empty or its first message is still on local disk (a young topic:
// a new group replays it from the start), else QUERY_NOT_FOUND so the client
// applies its ConsumeFromWhere (FIRST → 0, LAST → the max offset). A new
// CONSUME_FROM_LAST_OFFSET group thus never replays history from the bucket.
func (b *Broker) queryConsumerOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.QueryConsumerOffsetRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	if r := badTopicAndGroup(req, h.Topic, h.ConsumerGroup); r != nil {
		return r
	}
	off, ok := b.offsets.Query(h.ConsumerGroup, h.Topic, h.QueueID)
	if !ok || off < 0 {
		if !b.queueStartsHot(h.Topic, h.QueueID) {
			return errResponse(req, remoting.QueryNotFound, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
		}
		off = 0
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.ExtFields = map[string]string{"offset": strconv.FormatInt(off, 10)}
	return resp
}

// queueStartsHot reports whether the queue starts at offset 0 and is empty
// or its first message is on local disk.
func (b *Broker) queueStartsHot(topic string, queueID int32) bool {
	if b.minOffset(topic, queueID) > 0 {
		return false
	}
	if b.store.MaxQueueOffset(topic, queueID) == 0 {
		return true
	}
	phys, _, _, ok, err := b.queueEntry(context.Background(), topic, queueID, 0) // a compacted queue's too
	if err != nil || !ok {
		return false
	}
	return phys >= b.store.LocalMinPhysOffset()
}
