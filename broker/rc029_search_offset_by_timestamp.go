package broker

import (
	"context"
	"strconv"

	"github.com/stratamq/stratamq/remoting"
)

// searchOffsetByTimestamp handles SEARCH_OFFSET_BY_TIMESTAMP (29).
func (b *Broker) searchOffsetByTimestamp(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.SearchOffsetRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	off := b.store.OffsetByTime(h.Topic, h.QueueID, h.Timestamp)
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.ExtFields = map[string]string{"offset": strconv.FormatInt(off, 10)}
	return resp
}
