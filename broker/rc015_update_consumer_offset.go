package broker

import (
	"context"

	"github.com/stratamq/stratamq/remoting"
)

// updateConsumerOffset handles UPDATE_CONSUMER_OFFSET (15), sent every 5 s
// per assigned queue (oneway from Java clients; client-go expects nothing).
func (b *Broker) updateConsumerOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.UpdateConsumerOffsetRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	if b.cfg.BrokerID != 0 {
		return errResponse(req, remoting.NoPermission, "a slave does not take consumer offsets")
	}
	b.offsets.Commit(h.ConsumerGroup, h.Topic, h.QueueID, h.CommitOffset)
	return remoting.NewResponse(req, remoting.Success, "")
}
