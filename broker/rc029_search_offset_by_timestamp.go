package broker

import (
	"context"
	"fmt"
	"strconv"

	"github.com/stratamq/stratamq/remoting"
)

// searchOffsetByTimestamp handles SEARCH_OFFSET_BY_TIMESTAMP (29): the
// queue offset of the message stored nearest the timestamp (4.x), or with
// RocketMQ 5's boundaryType "lower" the first stored at or after it and
// with "upper" the last stored at or before it. A client starts a group
// there (CONSUME_FROM_TIMESTAMP): the answer is at most the end consumers
// see (readBound), as GET_MAX_OFFSET's.
func (b *Broker) searchOffsetByTimestamp(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.SearchOffsetRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	var off int64
	var err error
	switch h.BoundaryType {
	case "lower":
		off, err = b.offsetAtOrAfter(ctx, h.Topic, h.QueueID, h.Timestamp)
	case "upper":
		// The last at or before ts: one before the first after it.
		if off, err = b.offsetAtOrAfter(ctx, h.Topic, h.QueueID, h.Timestamp+1); err == nil && off > b.minOffset(h.Topic, h.QueueID) {
			off--
		}
	default:
		off, err = b.offsetByTime(ctx, h.Topic, h.QueueID, h.Timestamp)
	}
	if err != nil {
		return errResponse(req, remoting.SystemError, "search the offset by time: "+err.Error())
	}
	if v := b.readBoundOf(h.Topic); v > 0 {
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
