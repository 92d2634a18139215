package proxy

import (
	"context"

	"github.com/stratamq/stratamq/proxy/apiv2"
)

// subscriptionSettings fills in a consumer's settings answer (out, whose
// Subscription is sub). This default keeps what the client asked for and
// checks SUB on its group and topics; the consumer side (POP) replaces it
// with the group's real settings (fifo, maximum delivery attempts).
func (svc *service) subscriptionSettings(ctx context.Context, b Backend, out *apiv2.Settings, sub *apiv2.Subscription) error {
	group := resourceName(sub.GetGroup())
	for _, e := range sub.GetSubscriptions() {
		if err := svc.s.AuthConsume(ctx, b, group, resourceName(e.GetTopic())); err != nil {
			return err
		}
	}
	return nil
}
