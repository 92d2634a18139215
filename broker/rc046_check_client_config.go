package broker

import (
	"context"
	"encoding/json"

	"github.com/stratamq/stratamq/remoting"
)

// checkClientRequestBody is RocketMQ's CheckClientRequestBody.
type checkClientRequestBody struct {
	ClientID         string                     `json:"clientId"`
	Group            string                     `json:"group"`
	SubscriptionData *remoting.SubscriptionData `json:"subscriptionData"`
}

// checkClientConfig handles CHECK_CLIENT_CONFIG (46), which Java consumers
// send to every broker before they start with a non-TAG subscription
// (MQClientInstance.checkClientInBroker; the start fails unless every
// broker answers SUCCESS): a TAG subscription passes; an SQL92 one passes
// when STRATAMQ_SQL_FILTER is on and the expression compiles, else
// SYSTEM_ERROR (filtering off, as RocketMQ) or SUBSCRIPTION_PARSE_FAILED
// naming the error.
func (b *Broker) checkClientConfig(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	var body checkClientRequestBody
	if err := json.Unmarshal(req.Body, &body); err != nil {
		return errResponse(req, remoting.SystemError, "decode CHECK_CLIENT_CONFIG body: "+err.Error())
	}
	sd := body.SubscriptionData
	if sd == nil || isTagType(sd.ExpressionType) {
		return remoting.NewResponse(req, remoting.Success, "")
	}
	if sd.ExpressionType == exprSQL92 && !b.sqlFilterOn() {
		_, err := b.subscriptionFor(sd.Topic, sd.SubString, sd.ExpressionType)
		return errResponse(req, remoting.SystemError, err.Remark)
	}
	if _, err := b.subscriptionFor(sd.Topic, sd.SubString, sd.ExpressionType); err != nil {
		return errResponse(req, err.Code, err.Remark)
	}
	return remoting.NewResponse(req, remoting.Success, "")
}
