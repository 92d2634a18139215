package proxy

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stratamq/stratamq/proxy/apiv2"
)

// Defaults of a consumer's settings answer.
const (
	defaultReceiveBatch = 32
	defaultLongPolling  = 30 * time.Second
)

// subscriptionSettings fills in a consumer's settings answer (out, whose
// Subscription is sub): SUB on its group (even with no subscription: the
// group is created) and topics is checked, and the group's config
// decides what the clients act on: fifo (the group's
// consumeMessageOrderly: a push consumer then consumes each message group
// in order) and the backoff policy's max_attempts (retryMaxTimes + 1: a
// FIFO push consumer forwards a message to the DLQ after them). A batch
// size and long polling timeout the client left out get RocketMQ's
// defaults (32, 30 s).
func (svc *service) subscriptionSettings(ctx context.Context, b Backend, out *apiv2.Settings, sub *apiv2.Subscription) error {
	group := resourceName(sub.GetGroup())
	if group != "" {
		if err := svc.s.authGroup(ctx, b, group); err != nil {
			return err
		}
	}
	for _, e := range sub.GetSubscriptions() {
		if err := svc.s.AuthConsume(ctx, b, group, resourceName(e.GetTopic())); err != nil {
			return err
		}
	}
	cb, ok := b.(ConsumerBackend)
	if !ok || group == "" {
		return nil
	}
	gs, err := cb.ConsumerGroup(group)
	if err != nil {
		return err
	}
	sub.Fifo = &gs.FIFO
	if sub.GetReceiveBatchSize() <= 0 {
		n := int32(defaultReceiveBatch)
		sub.ReceiveBatchSize = &n
	}
	if sub.LongPollingTimeout == nil {
		sub.LongPollingTimeout = durationpb.New(defaultLongPolling)
	}
	if out.BackoffPolicy != nil {
		out.BackoffPolicy.MaxAttempts = gs.MaxDeliveryAttempts
	}
	return nil
}
