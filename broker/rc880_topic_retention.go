package broker

import (
	"context"
	"encoding/json"

	"github.com/stratamq/stratamq/remoting"
)

// topicRetentionStatus handles STRATAMQ_TOPIC_RETENTION (880005, admin
// topicRetention): the body is a TopicRetentionReport (package retention), each
// topic's retention, its oldest retained message and the bucket bytes kept
// only because of it.
func (b *Broker) topicRetentionStatus(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	r, err := b.ret.Report(ctx)
	if err != nil {
		return errResponse(req, remoting.SystemError, "topic retention: "+err.Error())
	}
	body, err := json.Marshal(r)
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}
