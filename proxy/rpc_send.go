package proxy

import (
	"context"
	"hash/fnv"
	"time"

	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
)

// maxSendBatch bounds the messages of one SendMessage request.
const maxSendBatch = 1024

// SendMessage stores the request's messages (all of one topic, as the
// clients send them) and answers one entry per message, in order. The
// response status is the first failure's (OK when all are stored), as the
// clients read the top-level status first.
func (svc *service) SendMessage(ctx context.Context, req *apiv2.SendMessageRequest) (*apiv2.SendMessageResponse, error) {
	fail := func(err error) (*apiv2.SendMessageResponse, error) {
		return &apiv2.SendMessageResponse{Status: statusOf(err)}, nil
	}
	b, err := svc.s.backend()
	if err != nil {
		return fail(err)
	}
	msgs := req.GetMessages()
	switch {
	case len(msgs) == 0:
		return fail(bad(apiv2.Code_BAD_REQUEST, "the request has no message"))
	case len(msgs) > maxSendBatch:
		return fail(bad(apiv2.Code_BAD_REQUEST, "the request has %d messages; at most %d go in one", len(msgs), maxSendBatch))
	}
	topic := resourceName(msgs[0].GetTopic())
	for _, m := range msgs[1:] {
		if resourceName(m.GetTopic()) != topic {
			return fail(bad(apiv2.Code_BAD_REQUEST, "the messages of one request must be of one topic"))
		}
	}
	if err := svc.s.authTopic(ctx, b, topic, true); err != nil {
		return fail(err)
	}
	peer, now := peerAddr(ctx), time.Now()
	out := make([]Message, len(msgs))
	// The request's bodies, inflated, take at most what the same request
	// could carry uncompressed: a gzip bomb stores nothing and holds at
	// most that much while it is refused.
	left := svc.s.cfg.MaxRecvMsgSize
	for i, m := range msgs {
		if out[i], err = toStoreBounded(m, peer, b.MaxMessageSize(), &left, now); err != nil {
			return fail(err)
		}
	}
	r, err := b.Route(ctx, topic, true) // PUB on it was checked
	if err != nil {
		return fail(err)
	}
	if err := checkMessageTypes(r, out); err != nil { // msgtype.go
		return fail(err)
	}
	if err := pickQueues(r, msgs, out); err != nil {
		return fail(err)
	}
	res := b.Send(ctx, out)
	resp := &apiv2.SendMessageResponse{Status: okStatus(), Entries: make([]*apiv2.SendResultEntry, len(res))}
	stored, bytes := 0, 0
	for i, r := range res {
		e := &apiv2.SendResultEntry{Status: statusOf(r.Err), MessageId: msgs[i].GetSystemProperties().GetMessageId(), Offset: r.QueueOffset}
		if r.MsgID != "" {
			e.MessageId = r.MsgID
		}
		if r.Err != nil && resp.Status.Code == apiv2.Code_OK {
			resp.Status = e.Status
		}
		if r.PhysOffset > 0 || r.Err == nil {
			stored++
			bytes += len(out[i].Body)
			if out[i].SysFlag&sysFlagTransPrep != 0 {
				e.TransactionId = encodeTransactionID(r.PhysOffset, r.QueueOffset)
				svc.sessions.noteTxTopic(svc.s.callerOf(ctx, b), clientID(ctx), topic)
			}
			if r.DeliverMs > 0 {
				e.RecallHandle = encodeRecallHandle(Recall{RealTopic: topic, Topic: r.Topic, QueueID: r.QueueID,
					QueueOffset: r.QueueOffset, PhysOffset: r.PhysOffset, MsgID: e.MessageId})
			}
		}
		resp.Entries[i] = e
	}
	if m := svc.s.cfg.Metrics; m != nil && stored > 0 {
		m.GRPCMessagesIn(topic, stored, bytes)
	}
	return resp, nil
}

// pickQueues checks each message's queue against the topic's write
// queues (r). The clients pick the queue (a FIFO message's by its group); a
// FIFO message with a queue out of range goes to the queue its group
// hashes to, any other to one the broker picks.
func pickQueues(r Route, msgs []*apiv2.Message, out []Message) error {
	if r.WriteQueues <= 0 {
		return bad(apiv2.Code_FORBIDDEN, "the topic %s has no write queue", out[0].Topic)
	}
	for i := range out {
		if out[i].QueueID >= 0 && out[i].QueueID < r.WriteQueues {
			continue
		}
		out[i].QueueID = -1
		if g := msgs[i].GetSystemProperties().GetMessageGroup(); g != "" {
			h := fnv.New32a()
			h.Write([]byte(g))
			out[i].QueueID = int32(h.Sum32() % uint32(r.WriteQueues))
		}
	}
	return nil
}

// RecallMessage cancels a delayed or timer message by the recall handle
// its send returned.
func (svc *service) RecallMessage(ctx context.Context, req *apiv2.RecallMessageRequest) (*apiv2.RecallMessageResponse, error) {
	b, err := svc.s.backend()
	if err != nil {
		return &apiv2.RecallMessageResponse{Status: statusOf(err)}, nil
	}
	r, err := decodeRecallHandle(req.GetRecallHandle())
	if err == nil && resourceName(req.GetTopic()) != r.RealTopic {
		err = bad(apiv2.Code_BAD_REQUEST, "the recall handle is of topic %s, not %s", r.RealTopic, resourceName(req.GetTopic()))
	}
	if err == nil {
		err = svc.s.authTopic(ctx, b, r.RealTopic, true)
	}
	if err == nil {
		// Only a topic that takes DELAY messages has them to recall.
		if rt, rerr := b.Route(ctx, r.RealTopic, false); rerr == nil {
			err = checkMessageType(rt.MessageType, remoting.MessageTypeDelay)
		}
	}
	if err == nil {
		err = b.Recall(ctx, r)
	}
	if err != nil {
		return &apiv2.RecallMessageResponse{Status: statusOf(err)}, nil
	}
	return &apiv2.RecallMessageResponse{Status: okStatus(), MessageId: r.MsgID}, nil
}
