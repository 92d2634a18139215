package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/remoting"
)

// The broker as the gRPC consumer RPCs' proxy.ConsumerBackend: the POP
// engine (package pop, through pop.go) and the consumer offsets, with the engine's errors
// wrapped in proxy's so the RPCs answer the codes the clients act on.

var _ proxy.ConsumerBackend = (*Broker)(nil)

// popErr wraps a POP engine error in the proxy error it maps to.
func popErr(err error) error {
	var to error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrPopHandle):
		to = proxy.ErrInvalidReceiptHandle
	case errors.Is(err, ErrPopHandleExpired):
		to = proxy.ErrReceiptHandleExpired
	case errors.Is(err, ErrPopInflightLimit):
		to = proxy.ErrTooManyInflight
	case errors.Is(err, ErrPopTopic):
		to = proxy.ErrTopicNotReadable
	case errors.Is(err, ErrPopGroup):
		to = proxy.ErrGroupNotAllowed
	case errors.Is(err, ErrPopFilter):
		to = proxy.ErrBadFilter
	case errors.Is(err, ErrPopInvisible):
		to = proxy.ErrBadInvisible
	case errors.Is(err, ErrPopNotMaster):
		to = proxy.ErrNotMaster
	default:
		return err
	}
	return fmt.Errorf("%w: %w", to, err)
}

// Receive is PopReceive.
func (b *Broker) Receive(ctx context.Context, r proxy.ReceiveRequest) ([]proxy.Received, error) {
	ms, err := b.PopReceive(ctx, PopRequest{Group: r.Group, Topic: r.Topic, QueueID: r.QueueID,
		FilterType: r.FilterType, FilterExpression: r.FilterExpression, MaxMessages: r.MaxMessages,
		Invisible: r.Invisible, FIFO: r.FIFO, MaxAttempts: r.MaxAttempts, Wait: r.Wait, Client: r.Client})
	if err != nil {
		return nil, popErr(err)
	}
	out := make([]proxy.Received, len(ms))
	for i, m := range ms {
		out[i] = proxy.Received{Record: m.Record, Handle: m.Handle, Attempt: m.Attempt, InvisibleUntil: m.InvisibleUntil}
	}
	bytes := 0
	for _, m := range ms {
		bytes += len(m.Record.Body)
	}
	if len(ms) > 0 {
		b.metrics.messagesOut(r.Topic, len(ms), bytes)
	}
	return out, nil
}

// Ack is PopAck.
func (b *Broker) Ack(group, topic, handle string) error {
	return popErr(b.PopAck(group, topic, handle))
}

// ChangeInvisible is PopChangeInvisible.
func (b *Broker) ChangeInvisible(group, topic, handle string, d time.Duration) (string, error) {
	h, _, err := b.PopChangeInvisible(group, topic, handle, d)
	return h, popErr(err)
}

// ForwardToDLQ is PopForwardToDLQ.
func (b *Broker) ForwardToDLQ(ctx context.Context, group, topic, handle string) error {
	return popErr(b.PopForwardToDLQ(ctx, group, topic, handle))
}

// ConsumerGroup is the group's config as the clients' settings say it:
// consumeMessageOrderly is FIFO, retryMaxTimes+1 deliveries.
func (b *Broker) ConsumerGroup(group string) (proxy.GroupSettings, error) {
	if err := remoting.ValidateGroup(group); err != nil {
		return proxy.GroupSettings{}, fmt.Errorf("%w: %v", proxy.ErrGroupNotAllowed, err)
	}
	g, err := b.groups.Create(group)
	if err != nil { // past STRATAMQ_MAX_GROUPS
		return proxy.GroupSettings{}, fmt.Errorf("%w: %v", proxy.ErrGroupNotAllowed, err)
	}
	return proxy.GroupSettings{FIFO: g.ConsumeMessageOrderly, MaxDeliveryAttempts: max(int32(g.RetryMaxTimes), 0) + 1}, nil
}

// CommittedOffset is the group's committed offset of a queue.
func (b *Broker) CommittedOffset(group, topic string, queueID int32) (int64, bool) {
	return b.offsets.Query(group, topic, queueID)
}

// QueueRange is a queue's min and max (next) offsets.
func (b *Broker) QueueRange(topic string, queueID int32) (int64, int64) {
	return b.minOffset(topic, queueID), b.store.MaxQueueOffset(topic, queueID)
}

// OffsetAt is the first offset stored at or after ts.
func (b *Broker) OffsetAt(ctx context.Context, topic string, queueID int32, ts time.Time) (int64, error) {
	return b.offsetByTime(ctx, topic, queueID, ts.UnixMilli())
}

// CommitOffset commits a group's offset (a master only, as
// UPDATE_CONSUMER_OFFSET is honoured by the master). As that request, it
// refuses an offset of a topic the broker does not have (TOPIC_NOT_FOUND)
// or of a queue the topic does not have (BAD_REQUEST).
func (b *Broker) CommitOffset(group, topic string, queueID int32, offset int64) error {
	if err := remoting.ValidateGroup(group); err != nil {
		return fmt.Errorf("%w: %v", proxy.ErrGroupNotAllowed, err)
	}
	if err := remoting.ValidateTopic(topic); err != nil {
		return fmt.Errorf("%w: %v", proxy.ErrTopicNotReadable, err)
	}
	tc, ok := b.topics.Get(topic)
	if !ok {
		return proxy.Errorf(remoting.TopicNotExist, "topic[%s] not exist, apply first please! (consumer offset of group %s not stored)", topic, group)
	}
	if n := queueCount(tc); queueID < 0 || queueID >= n {
		return proxy.Errorf(remoting.MessageIllegal, "queueId[%d] is illegal, topic:[%s] has %d queues (consumer offset of group %s not stored)", queueID, topic, n, group)
	}
	b.offsets.Commit(group, topic, queueID, offset)
	return nil
}
