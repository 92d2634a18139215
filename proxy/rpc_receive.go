package proxy

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stratamq/stratamq/proxy/apiv2"
)

// The consumer RPCs (POP consumption): QueryAssignment, ReceiveMessage,
// AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue,
// on the broker's POP engine (package broker/pop) through ConsumerBackend.
//
// A receive takes from every queue of the topic on this broker (the
// queue a request names only picks the broker, as RocketMQ's proxy pops
// with queue id -1); QueryAssignment hands a push consumer one
// assignment per broker accordingly. The group's config decides FIFO
// (consumeMessageOrderly) and the maximum deliveries (retryMaxTimes + 1).

// Bounds of a receive.
const (
	// MaxLongPolling caps how long a receive waits for a message.
	MaxLongPolling = 60 * time.Second
	// DefaultInvisible is the invisible duration of a receive that asks
	// for none (a push consumer's, auto_renew), as RocketMQ's proxy
	// defaults it (Config.AutoRenewInvisible). An auto_renew receive's
	// handles are renewed while the client's session lives (renew.go).
	DefaultInvisible = 60 * time.Second
	// maxReceiveBatch caps batch_size.
	maxReceiveBatch = 1024
)

// consumerBackend is the serving broker as a ConsumerBackend.
func (svc *service) consumerBackend() (Backend, ConsumerBackend, error) {
	b, err := svc.s.backend()
	if err != nil {
		return nil, nil, err
	}
	cb, ok := b.(ConsumerBackend)
	if !ok {
		return nil, nil, bad(apiv2.Code_UNSUPPORTED, "this broker does not serve consumption over gRPC")
	}
	return b, cb, nil
}

// consumerStatus is the v2 status of a consumer RPC's error.
func consumerStatus(err error) *apiv2.Status {
	code := apiv2.Code_OK
	switch {
	case err == nil:
		return okStatus()
	case errors.Is(err, ErrInvalidReceiptHandle), errors.Is(err, ErrReceiptHandleExpired):
		code = apiv2.Code_INVALID_RECEIPT_HANDLE
	case errors.Is(err, ErrTooManyInflight):
		code = apiv2.Code_TOO_MANY_REQUESTS
	case errors.Is(err, ErrTopicNotReadable):
		code = apiv2.Code_TOPIC_NOT_FOUND
	case errors.Is(err, ErrGroupNotAllowed):
		code = apiv2.Code_ILLEGAL_CONSUMER_GROUP
	case errors.Is(err, ErrBadFilter):
		code = apiv2.Code_ILLEGAL_FILTER_EXPRESSION
	case errors.Is(err, ErrBadInvisible):
		code = apiv2.Code_ILLEGAL_INVISIBLE_TIME
	case errors.Is(err, ErrNotMaster):
		code = apiv2.Code_INTERNAL_SERVER_ERROR
	default:
		return statusOf(err)
	}
	return &apiv2.Status{Code: code, Message: err.Error()}
}

// groupAndTopic checks an RPC's group and topic resources and SUB on both.
func (svc *service) groupAndTopic(ctx context.Context, b Backend, g, t *apiv2.Resource) (string, string, error) {
	group, topic := resourceName(g), resourceName(t)
	if group == "" {
		return "", "", bad(apiv2.Code_ILLEGAL_CONSUMER_GROUP, "the consumer group is empty")
	}
	if topic == "" {
		return "", "", bad(apiv2.Code_ILLEGAL_TOPIC, "the topic is empty")
	}
	if err := svc.s.AuthConsume(ctx, b, group, topic); err != nil {
		return "", "", err
	}
	return group, topic, nil
}

// QueryAssignment gives a push consumer one assignment: all of the
// topic's readable queues on this broker (queue id -1).
func (svc *service) QueryAssignment(ctx context.Context, req *apiv2.QueryAssignmentRequest) (*apiv2.QueryAssignmentResponse, error) {
	b, _, err := svc.consumerBackend()
	if err != nil {
		return &apiv2.QueryAssignmentResponse{Status: consumerStatus(err)}, nil
	}
	_, topic, err := svc.groupAndTopic(ctx, b, req.GetGroup(), req.GetTopic())
	if err != nil {
		return &apiv2.QueryAssignmentResponse{Status: consumerStatus(err)}, nil
	}
	r, err := b.Route(ctx, topic, false) // a consumer creates no topic
	if err != nil {
		return &apiv2.QueryAssignmentResponse{Status: statusOf(err)}, nil
	}
	resp := &apiv2.QueryAssignmentResponse{Status: okStatus()}
	if r.ReadQueues > 0 && r.Perm&permRead != 0 {
		t := req.GetTopic()
		resp.Assignments = []*apiv2.Assignment{{MessageQueue: &apiv2.MessageQueue{
			Topic: &apiv2.Resource{ResourceNamespace: t.GetResourceNamespace(), Name: t.GetName()},
			Id:    -1, Permission: apiv2.Permission_READ_WRITE,
			Broker:             &apiv2.Broker{Name: b.BrokerName(), Id: 0, Endpoints: svc.endpoints()},
			AcceptMessageTypes: acceptTypes(r.MessageType),
		}}}
	}
	return resp, nil
}

// ReceiveMessage pops messages for the group: the stream carries the
// delivery timestamp, the messages, then the status (OK), or only a
// status: MESSAGE_NOT_FOUND when nothing came within the long polling
// time, or why the receive was refused.
func (svc *service) ReceiveMessage(req *apiv2.ReceiveMessageRequest, stream apiv2.MessagingService_ReceiveMessageServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-svc.done: // the server stops: end the long poll
			cancel()
		case <-ctx.Done():
		}
	}()
	sendStatus := func(st *apiv2.Status) error {
		return svc.sendTimed(ctx, stream, &apiv2.ReceiveMessageResponse{Content: &apiv2.ReceiveMessageResponse_Status{Status: st}})
	}
	b, cb, err := svc.consumerBackend()
	if err != nil {
		return sendStatus(consumerStatus(err))
	}
	group, topic, err := svc.groupAndTopic(ctx, b, req.GetGroup(), req.GetMessageQueue().GetTopic())
	if err != nil {
		return sendStatus(consumerStatus(err))
	}
	gs, err := cb.ConsumerGroup(group)
	if err != nil {
		return sendStatus(consumerStatus(err))
	}
	r := ReceiveRequest{Group: group, Topic: topic, QueueID: -1, FIFO: gs.FIFO, MaxAttempts: gs.MaxDeliveryAttempts,
		MaxMessages: int(req.GetBatchSize()), Client: receiverKey(ctx)}
	if r.MaxMessages <= 0 {
		return sendStatus(statusOf(bad(apiv2.Code_BAD_REQUEST, "batch_size must be positive, got %d", req.GetBatchSize())))
	}
	r.MaxMessages = min(r.MaxMessages, maxReceiveBatch)
	if fe := req.GetFilterExpression(); fe != nil {
		r.FilterExpression = fe.GetExpression()
		switch fe.GetType() {
		case apiv2.FilterType_SQL:
			r.FilterType = "SQL92"
		case apiv2.FilterType_TAG, apiv2.FilterType_FILTER_TYPE_UNSPECIFIED:
			r.FilterType = "TAG"
		default:
			return sendStatus(statusOf(bad(apiv2.Code_ILLEGAL_FILTER_EXPRESSION, "unknown filter type %d", fe.GetType())))
		}
	}
	switch d := req.GetInvisibleDuration(); {
	case d == nil || (req.GetAutoRenew() && d.AsDuration() <= 0):
		r.Invisible = svc.s.cfg.AutoRenewInvisible
	case d.CheckValid() != nil || d.AsDuration() <= 0:
		return sendStatus(statusOf(bad(apiv2.Code_ILLEGAL_INVISIBLE_TIME, "the invisible duration must be positive")))
	default:
		r.Invisible = d.AsDuration()
	}
	if d := req.GetLongPollingTimeout(); d != nil {
		if d.CheckValid() != nil || d.AsDuration() < 0 {
			return sendStatus(statusOf(bad(apiv2.Code_ILLEGAL_POLLING_TIME, "the long polling timeout must not be negative")))
		}
		r.Wait = min(d.AsDuration(), MaxLongPolling)
	}
	// Answer before the client's deadline: it waits the long polling
	// time plus its request timeout.
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl) - time.Second; left < r.Wait {
			r.Wait = max(left, 0)
		}
	}
	got, err := cb.Receive(ctx, r)
	if err != nil {
		if ctx.Err() != nil && stream.Context().Err() != nil {
			return nil // the client went away
		}
		if ctx.Err() != nil {
			return sendStatus(&apiv2.Status{Code: apiv2.Code_MESSAGE_NOT_FOUND, Message: "the server is shutting down"})
		}
		return sendStatus(consumerStatus(err))
	}
	if len(got) == 0 {
		return sendStatus(&apiv2.Status{Code: apiv2.Code_MESSAGE_NOT_FOUND, Message: "no new message"})
	}
	send := func(resp *apiv2.ReceiveMessageResponse) error { return svc.sendTimed(ctx, stream, resp) }
	if err := send(&apiv2.ReceiveMessageResponse{Content: &apiv2.ReceiveMessageResponse_DeliveryTimestamp{
		DeliveryTimestamp: timestamppb.Now()}}); err != nil {
		return err
	}
	// auto_renew: the handles are renewed while the client's session lives.
	renewFor := ""
	if id := clientID(ctx); req.GetAutoRenew() && id != "" && svc.sessions.of(svc.s.callerOf(ctx, b), id) != nil {
		renewFor = id
	}
	// Inflated bodies count against the server's receive memory: twice
	// (the body, and its encoded copy the transport holds until it is
	// written) until the message is sent, then once until the next send
	// returns (which it does once the transport wrote the previous one
	// out) or the stream ends.
	mem := svc.s.recvMem
	var queued int64
	defer func() { mem.release(queued) }()
	for i := range got {
		m := &got[i]
		size, need := -1, int64(0)
		if m.Record.SysFlag&sysFlagCompressed != 0 {
			n, err := storedInflatedSize(&m.Record)
			if err != nil {
				// Undeliverable as a v2 message (a corrupt compressed body, or
				// one inflating past the largest response): it stays in
				// flight and ends in the DLQ after its attempts.
				svc.s.log.Warn("received message not convertible", "topic", topic, "offset", m.Record.QueueOffset, "err", err)
				continue
			}
			size, need = n, 2*int64(n)
			if err := svc.reserve(ctx, need, &queued); err != nil {
				// No room within the send timeout: what is left stays in
				// flight and is delivered again after its invisible time.
				svc.s.warnEvery("receive-memory", "receive: the inflated bodies receives hold are at their bound; the rest of this receive stays in flight",
					"bound", mem.max, "topic", topic, "group", group, "err", err)
				break
			}
		}
		pm, err := messageFromRecord(&m.Record, topic, size)
		if err != nil {
			mem.release(need)
			svc.s.log.Warn("received message not convertible", "topic", topic, "offset", m.Record.QueueOffset, "err", err)
			continue
		}
		handle, attempt := m.Handle, m.Attempt
		pm.SystemProperties.ReceiptHandle = &handle
		pm.SystemProperties.DeliveryAttempt = &attempt
		pm.SystemProperties.InvisibleDuration = durationpb.New(r.Invisible)
		err = send(&apiv2.ReceiveMessageResponse{Content: &apiv2.ReceiveMessageResponse_Message{Message: pm}})
		pm = nil
		// The previous message is written out; this one's body is done
		// with, its encoded copy queued.
		mem.release(queued + need/2)
		queued = need / 2
		if err != nil {
			return err
		}
		if renewFor != "" {
			until := m.InvisibleUntil
			if until.IsZero() {
				until = time.Now().Add(r.Invisible)
			}
			svc.renew.add(renewFor, group, topic, handle, r.Invisible, until)
		}
	}
	return send(&apiv2.ReceiveMessageResponse{Content: &apiv2.ReceiveMessageResponse_Status{Status: okStatus()}})
}

// receiverKey names a receiving client for the per-client in-flight bound:
// its account (checked by then when the ACL is on), its client id and its
// IP, so another account or host reusing a client id counts apart.
func receiverKey(ctx context.Context) string {
	a, _ := parseAuthorization(header(ctx, hdrAuthorization))
	return a.accessKey + "/" + clientID(ctx) + "@" + peerAddr(ctx).Addr().String()
}

// reserve takes need bytes of the receive memory for a stream that holds
// *queued already (its last message's encoded copy). Waiting is bounded
// by the send timeout, and a stream never waits while it holds some: it
// lets its queued bytes go first (counted as the client's), so waiting
// streams cannot hold each other up.
func (svc *service) reserve(ctx context.Context, need int64, queued *int64) error {
	mem := svc.s.recvMem
	if mem.tryAcquire(need) {
		return nil
	}
	mem.release(*queued)
	*queued = 0
	actx, cancel := context.WithTimeout(ctx, svc.s.cfg.SendTimeout)
	defer cancel()
	return mem.acquire(actx, need)
}

// sendTimed sends one response of a server stream. A client that does not
// take it within the send timeout (its flow-control window stays shut)
// has its connection closed: the transport holds what was queued for a
// stream until the client reads it or the connection ends.
func (svc *service) sendTimed(ctx context.Context, stream grpc.ServerStream, resp any) error {
	t := time.AfterFunc(svc.s.cfg.SendTimeout, func() {
		if p, ok := peer.FromContext(ctx); ok && svc.s.conns.closePeer(p.Addr) {
			svc.s.warnEvery("send-timeout", "closed a connection whose client did not read a response within the send timeout",
				"remote", p.Addr.String(), "timeout", svc.s.cfg.SendTimeout)
		}
	})
	err := stream.SendMsg(resp)
	if !t.Stop() && err == nil {
		err = status.Errorf(codes.DeadlineExceeded, "the client did not read the response within %s", svc.s.cfg.SendTimeout)
	}
	return err
}

// AckMessage acknowledges each entry; the response's status is OK when
// every one was, else the first failure's (each entry has its own).
func (svc *service) AckMessage(ctx context.Context, req *apiv2.AckMessageRequest) (*apiv2.AckMessageResponse, error) {
	b, cb, err := svc.consumerBackend()
	if err != nil {
		return &apiv2.AckMessageResponse{Status: consumerStatus(err)}, nil
	}
	group, topic, err := svc.groupAndTopic(ctx, b, req.GetGroup(), req.GetTopic())
	if err != nil {
		return &apiv2.AckMessageResponse{Status: consumerStatus(err)}, nil
	}
	if len(req.GetEntries()) == 0 {
		return &apiv2.AckMessageResponse{Status: statusOf(bad(apiv2.Code_BAD_REQUEST, "no entries to ack"))}, nil
	}
	resp := &apiv2.AckMessageResponse{Status: okStatus()}
	for _, e := range req.GetEntries() {
		st := consumerStatus(cb.Ack(group, topic, svc.renew.take(group, topic, e.GetReceiptHandle())))
		if st.GetCode() != apiv2.Code_OK && resp.Status.GetCode() == apiv2.Code_OK {
			resp.Status = st
		}
		resp.Entries = append(resp.Entries, &apiv2.AckMessageResultEntry{MessageId: e.GetMessageId(),
			ReceiptHandle: e.GetReceiptHandle(), Status: st})
	}
	return resp, nil
}

// ChangeInvisibleDuration extends (or shortens) a message's invisibility
// from now and answers its new receipt handle.
func (svc *service) ChangeInvisibleDuration(ctx context.Context, req *apiv2.ChangeInvisibleDurationRequest) (*apiv2.ChangeInvisibleDurationResponse, error) {
	b, cb, err := svc.consumerBackend()
	if err != nil {
		return &apiv2.ChangeInvisibleDurationResponse{Status: consumerStatus(err)}, nil
	}
	group, topic, err := svc.groupAndTopic(ctx, b, req.GetGroup(), req.GetTopic())
	if err != nil {
		return &apiv2.ChangeInvisibleDurationResponse{Status: consumerStatus(err)}, nil
	}
	d := req.GetInvisibleDuration()
	if d == nil || d.CheckValid() != nil {
		return &apiv2.ChangeInvisibleDurationResponse{Status: statusOf(bad(apiv2.Code_ILLEGAL_INVISIBLE_TIME, "no valid invisible duration"))}, nil
	}
	// A duration of 0 (a nack without backoff) makes it visible at once.
	dur := max(d.AsDuration(), time.Millisecond)
	// A renewed handle's current one; the client manages it from now on.
	h, err := cb.ChangeInvisible(group, topic, svc.renew.take(group, topic, req.GetReceiptHandle()), dur)
	if err != nil {
		return &apiv2.ChangeInvisibleDurationResponse{Status: consumerStatus(err)}, nil
	}
	return &apiv2.ChangeInvisibleDurationResponse{Status: okStatus(), ReceiptHandle: h}, nil
}

// ForwardMessageToDeadLetterQueue dead-letters a message the consumer
// gave up on (a FIFO push consumer past its attempts).
func (svc *service) ForwardMessageToDeadLetterQueue(ctx context.Context, req *apiv2.ForwardMessageToDeadLetterQueueRequest) (*apiv2.ForwardMessageToDeadLetterQueueResponse, error) {
	b, cb, err := svc.consumerBackend()
	if err != nil {
		return &apiv2.ForwardMessageToDeadLetterQueueResponse{Status: consumerStatus(err)}, nil
	}
	group, topic, err := svc.groupAndTopic(ctx, b, req.GetGroup(), req.GetTopic())
	if err != nil {
		return &apiv2.ForwardMessageToDeadLetterQueueResponse{Status: consumerStatus(err)}, nil
	}
	if err := cb.ForwardToDLQ(ctx, group, topic, svc.renew.take(group, topic, req.GetReceiptHandle())); err != nil {
		return &apiv2.ForwardMessageToDeadLetterQueueResponse{Status: consumerStatus(err)}, nil
	}
	return &apiv2.ForwardMessageToDeadLetterQueueResponse{Status: okStatus()}, nil
}
