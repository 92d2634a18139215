package broker

import (
	"context"
	"strconv"

	"github.com/stratamq/stratamq/remoting"
)

// getMinOffset handles GET_MIN_OFFSET (31): the first retained offset.
func (b *Broker) getMinOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.GetMinOffsetRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.ExtFields = map[string]string{"offset": strconv.FormatInt(b.minOffset(h.Topic, h.QueueID), 10)}
	return resp
}
