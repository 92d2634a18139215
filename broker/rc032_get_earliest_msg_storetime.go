package broker

import (
	"context"
	"strconv"

	"github.com/stratamq/stratamq/remoting"
)

// getEarliestMsgStoretime handles GET_EARLIEST_MSG_STORETIME (32): the
// store time of the queue's first retained message.
func (b *Broker) getEarliestMsgStoretime(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.GetEarliestMsgStoretimeRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	ts, err := b.earliestStoreTime(ctx, h.Topic, h.QueueID) // wire_compaction.go
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.ExtFields = map[string]string{"timestamp": strconv.FormatInt(ts, 10)}
	return resp
}
