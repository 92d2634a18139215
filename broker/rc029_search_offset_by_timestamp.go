package broker

import (
	"context"
	"fmt"
	"strconv"

	"github.com/stratamq/stratamq/remoting"
)

// searchOffsetByTimestamp handles SEARCH_OFFSET_BY_TIMESTAMP (29). A client
// starts a group there (CONSUME_FROM_TIMESTAMP): the answer is at most the
// end consumers see (readBound), as GET_MAX_OFFSET's.
func (b *Broker) searchOffsetByTimestamp(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.SearchOffsetRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	off := b.store.OffsetByTime(h.Topic, h.QueueID, h.Timestamp)
	if v := b.readBound(); v > 0 {
		end, err := b.store.VisibleMaxQueueOffset(ctx, h.Topic, h.QueueID, v)
		if err != nil {
			return errResponse(req, remoting.SystemError, fmt.Sprintf("reading the consumequeue of %s/%d: %v", h.Topic, h.QueueID, err))
		}
		off = min(off, end)
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.ExtFields = map[string]string{"offset": strconv.FormatInt(off, 10)}
	return resp
}
