package broker

import (
	"context"
	"strconv"

	"github.com/stratamq/stratamq/remoting"
)

// getMaxOffset handles GET_MAX_OFFSET (30): the next offset to be written.
func (b *Broker) getMaxOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.GetMaxOffsetRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.ExtFields = map[string]string{"offset": strconv.FormatInt(b.store.MaxQueueOffset(h.Topic, h.QueueID), 10)}
	return resp
}
