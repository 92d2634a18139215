package broker

import (
	"context"

	"github.com/stratamq/stratamq/remoting"
)

// getAllSubscriptionGroupConfig handles GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201).
func (b *Broker) getAllSubscriptionGroupConfig(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	body, _, err := b.groups.Encode()
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}
