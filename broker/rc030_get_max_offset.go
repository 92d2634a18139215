package broker

import (
	"context"
	"fmt"
	"strconv"

	"github.com/stratamq/stratamq/remoting"
)

// getMaxOffset handles GET_MAX_OFFSET (30): the next offset to be written,
// as consumers see the queue (readBound): a client starts a new group
// there (CONSUME_FROM_LAST_OFFSET), so it must not pass a record no slave
// holds.
func (b *Broker) getMaxOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.GetMaxOffsetRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	off, err := b.store.VisibleMaxQueueOffset(ctx, h.Topic, h.QueueID, b.readBoundOf(h.Topic))
	if err != nil {
		return errResponse(req, remoting.SystemError, fmt.Sprintf("reading the consumequeue of %s/%d: %v", h.Topic, h.QueueID, err))
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.ExtFields = map[string]string{"offset": strconv.FormatInt(off, 10)}
	return resp
}
