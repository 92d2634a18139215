package broker

import (
	"context"
	"encoding/json"

	"github.com/stratamq/stratamq/remoting"
)

// getAllTopicConfig handles GET_ALL_TOPIC_CONFIG (21).
func (b *Broker) getAllTopicConfig(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	body, err := json.Marshal(b.topics.Wrapper())
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}
