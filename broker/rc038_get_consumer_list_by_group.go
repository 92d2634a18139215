package broker

import (
	"context"
	"encoding/json"

	"github.com/stratamq/stratamq/remoting"
)

// getConsumerListByGroup handles GET_CONSUMER_LIST_BY_GROUP (38): the live
// client ids of a group, from which clients compute their queue share.
func (b *Broker) getConsumerListByGroup(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.GetConsumerListByGroupRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	ids := b.consumers.ClientIDs(h.ConsumerGroup)
	if len(ids) == 0 {
		// As Java: an error code, but with a well-formed body for client-go,
		// which ignores the code and parses the body.
		resp := errResponse(req, remoting.SystemError, "no consumer for this group, "+h.ConsumerGroup)
		resp.Body = []byte(`{"consumerIdList":[]}`)
		return resp
	}
	body, err := json.Marshal(remoting.ConsumerListBody{ConsumerIDList: ids})
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}
