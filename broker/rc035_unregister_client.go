package broker

import (
	"context"

	"github.com/stratamq/stratamq/remoting"
)

// unregisterClient handles UNREGISTER_CLIENT (35), sent by Java clients on
// shutdown (client-go never sends it: its consumers leave by connection
// close or heartbeat expiry). It removes only registrations made on the
// same connection: another connection naming a client's id cannot cut it
// off its group.
func (b *Broker) unregisterClient(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.UnregisterClientRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	if h.ProducerGroup != "" {
		b.consumers.UnregisterProducer(h.ProducerGroup, h.ClientID, c)
	}
	if h.ConsumerGroup != "" {
		if notify := b.consumers.Unregister(h.ConsumerGroup, h.ClientID, c); len(notify) > 0 {
			go b.notifyConsumerIdsChanged(h.ConsumerGroup, notify)
		}
	}
	return remoting.NewResponse(req, remoting.Success, "")
}
