package broker

import (
	"context"

	"github.com/stratamq/stratamq/remoting"
)

// getBrokerHAStatus answers GET_BROKER_HA_STATUS (907, RocketMQ 5's
// AdminBrokerProcessor.getBrokerHaStatus): no header; the body is the JSON
// of HAStatusJSON (HAStatus plus RocketMQ's HARuntimeInfo fields).
func (b *Broker) getBrokerHAStatus(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = b.HAStatusJSON()
	return resp
}
