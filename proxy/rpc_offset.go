package proxy

import (
	"context"

	"github.com/stratamq/stratamq/proxy/apiv2"
)

// GetOffset, QueryOffset and UpdateOffset: a group's committed offsets
// and a queue's bounds, as the 5.x pull consumers use them, on the same
// consumer offset table remoting consumers and POP groups commit to.

// queueOf is a request's topic and queue id, checked.
func queueOf(mq *apiv2.MessageQueue) (string, int32, error) {
	topic := resourceName(mq.GetTopic())
	if topic == "" {
		return "", 0, bad(apiv2.Code_ILLEGAL_TOPIC, "the topic is empty")
	}
	if mq.GetId() < 0 {
		return "", 0, bad(apiv2.Code_BAD_REQUEST, "queue id %d: want a queue of the topic", mq.GetId())
	}
	return topic, mq.GetId(), nil
}

// GetOffset is the group's committed offset of a queue (NOT_FOUND when it
// has none).
func (svc *service) GetOffset(ctx context.Context, req *apiv2.GetOffsetRequest) (*apiv2.GetOffsetResponse, error) {
	b, cb, err := svc.consumerBackend()
	if err != nil {
		return &apiv2.GetOffsetResponse{Status: consumerStatus(err)}, nil
	}
	topic, q, err := queueOf(req.GetMessageQueue())
	if err == nil {
		_, _, err = svc.groupAndTopic(ctx, b, req.GetGroup(), req.GetMessageQueue().GetTopic())
	}
	if err != nil {
		return &apiv2.GetOffsetResponse{Status: consumerStatus(err)}, nil
	}
	off, ok := cb.CommittedOffset(resourceName(req.GetGroup()), topic, q)
	if !ok {
		return &apiv2.GetOffsetResponse{Status: &apiv2.Status{Code: apiv2.Code_OFFSET_NOT_FOUND,
			Message: "the group has no committed offset for this queue"}}, nil
	}
	return &apiv2.GetOffsetResponse{Status: okStatus(), Offset: off}, nil
}

// QueryOffset is a queue's first or next offset, or the first stored at
// or after a time.
func (svc *service) QueryOffset(ctx context.Context, req *apiv2.QueryOffsetRequest) (*apiv2.QueryOffsetResponse, error) {
	b, cb, err := svc.consumerBackend()
	if err != nil {
		return &apiv2.QueryOffsetResponse{Status: consumerStatus(err)}, nil
	}
	topic, q, err := queueOf(req.GetMessageQueue())
	if err == nil {
		err = svc.s.authTopic(ctx, b, topic, false)
	}
	if err != nil {
		return &apiv2.QueryOffsetResponse{Status: consumerStatus(err)}, nil
	}
	mn, mx := cb.QueueRange(topic, q)
	var off int64
	switch req.GetQueryOffsetPolicy() {
	case apiv2.QueryOffsetPolicy_BEGINNING:
		off = mn
	case apiv2.QueryOffsetPolicy_END:
		off = mx
	case apiv2.QueryOffsetPolicy_TIMESTAMP:
		ts := req.GetTimestamp()
		if ts == nil || ts.CheckValid() != nil {
			return &apiv2.QueryOffsetResponse{Status: statusOf(bad(apiv2.Code_BAD_REQUEST, "a TIMESTAMP query needs a valid timestamp"))}, nil
		}
		if off, err = cb.OffsetAt(ctx, topic, q, ts.AsTime()); err != nil {
			return &apiv2.QueryOffsetResponse{Status: consumerStatus(err)}, nil
		}
	default:
		return &apiv2.QueryOffsetResponse{Status: statusOf(bad(apiv2.Code_BAD_REQUEST, "unknown query offset policy %d", req.GetQueryOffsetPolicy()))}, nil
	}
	return &apiv2.QueryOffsetResponse{Status: okStatus(), Offset: off}, nil
}

// UpdateOffset commits the group's offset of a queue.
func (svc *service) UpdateOffset(ctx context.Context, req *apiv2.UpdateOffsetRequest) (*apiv2.UpdateOffsetResponse, error) {
	b, cb, err := svc.consumerBackend()
	if err != nil {
		return &apiv2.UpdateOffsetResponse{Status: consumerStatus(err)}, nil
	}
	topic, q, err := queueOf(req.GetMessageQueue())
	if err == nil {
		_, _, err = svc.groupAndTopic(ctx, b, req.GetGroup(), req.GetMessageQueue().GetTopic())
	}
	if err == nil && req.GetOffset() < 0 {
		err = bad(apiv2.Code_BAD_REQUEST, "offset %d: must not be negative", req.GetOffset())
	}
	if err == nil {
		err = cb.CommitOffset(resourceName(req.GetGroup()), topic, q, req.GetOffset())
	}
	return &apiv2.UpdateOffsetResponse{Status: consumerStatus(err)}, nil
}
