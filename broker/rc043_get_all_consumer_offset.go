package broker

import (
	"context"

	"github.com/stratamq/stratamq/remoting"
)

// getAllConsumerOffset handles GET_ALL_CONSUMER_OFFSET (43): the body is
// consumerOffset.json (slaves copy it from their master).
func (b *Broker) getAllConsumerOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	body, _, err := b.offsets.Encode()
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}
