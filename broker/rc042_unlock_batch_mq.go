package broker

import (
	"context"
	"encoding/json"

	"github.com/stratamq/stratamq/remoting"
)

// unlockBatchMQ handles UNLOCK_BATCH_MQ (42).
func (b *Broker) unlockBatchMQ(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var body remoting.LockBatchRequestBody
	if err := json.Unmarshal(req.Body, &body); err != nil {
		return errResponse(req, remoting.SystemError, "decode unlock body: "+err.Error())
	}
	if r := badMQSet(req, body); r != nil {
		return r
	}
	b.locks.unlock(body.ConsumerGroup, body.ClientID, body.MQSet)
	return remoting.NewResponse(req, remoting.Success, "")
}
