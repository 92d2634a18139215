package broker

import (
	"context"
	"strconv"

	"github.com/stratamq/stratamq/remoting"
)

// queryConsumerOffset handles QUERY_CONSUMER_OFFSET (14). With nothing
// committed it follows RocketMQ 4.9: offset 0 when the queue still starts at
// 0 and its first message is local (a young topic: a new group replays it
// from the start), else QUERY_NOT_FOUND so the client applies its
// ConsumeFromWhere.
func (b *Broker) queryConsumerOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.QueryConsumerOffsetRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	off, ok := b.offsets.Query(h.ConsumerGroup, h.Topic, h.QueueID)
	if !ok {
		if b.store.MinQueueOffset(h.Topic, h.QueueID) > 0 {
			return errResponse(req, remoting.QueryNotFound, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
		}
		off = 0
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.ExtFields = map[string]string{"offset": strconv.FormatInt(off, 10)}
	return resp
}
