package broker

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/stratamq/stratamq/remoting"
)

// ConsumerConnection is GET_CONSUMER_CONNECTION_LIST's body, RocketMQ's
// ConsumerConnection: the group's live clients and subscriptions.
type ConsumerConnection struct {
	ConnectionSet     []ClientConnection          `json:"connectionSet"`
	SubscriptionTable map[string]SubscriptionData `json:"subscriptionTable"`
	ConsumeType       string                      `json:"consumeType"`
	MessageModel      string                      `json:"messageModel"`
	ConsumeFromWhere  string                      `json:"consumeFromWhere"`
}

// ClientConnection is one client of a ConsumerConnection.
type ClientConnection struct {
	ClientID   string `json:"clientId"`
	ClientAddr string `json:"clientAddr"`
	// LastHeartbeat (unix ms) is StrataMQ's addition.
	LastHeartbeat int64 `json:"lastHeartbeat"`
}

// SubscriptionData is one subscription of a ConsumerConnection.
type SubscriptionData struct {
	Topic          string   `json:"topic"`
	SubString      string   `json:"subString"`
	TagsSet        []string `json:"tagsSet"`
	SubVersion     int64    `json:"subVersion"`
	ExpressionType string   `json:"expressionType"`
}

// getConsumerConnectionList handles GET_CONSUMER_CONNECTION_LIST (203)
// (mqadmin consumerConnection): CONSUMER_NOT_ONLINE when the group has no
// live client, as RocketMQ answers.
func (b *Broker) getConsumerConnectionList(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	group := req.ExtFields["consumerGroup"]
	if r := badGroup(req, group); r != nil {
		return r
	}
	gc, ok := b.consumers.Connection(group)
	if !ok {
		return errResponse(req, remoting.ConsumerNotOnline, fmt.Sprintf("the consumer group[%s] not online", group))
	}
	cc := ConsumerConnection{SubscriptionTable: map[string]SubscriptionData{}, ConsumeType: gc.ConsumeType,
		MessageModel: gc.MessageModel, ConsumeFromWhere: gc.ConsumeFromWhere}
	for _, cl := range gc.Clients {
		cc.ConnectionSet = append(cc.ConnectionSet, ClientConnection{ClientID: cl.ClientID, ClientAddr: cl.Addr, LastHeartbeat: cl.LastHeartbeat.UnixMilli()})
	}
	for _, s := range gc.Subscriptions {
		cc.SubscriptionTable[s.Topic] = SubscriptionData{Topic: s.Topic, SubString: s.SubString, TagsSet: s.Tags,
			SubVersion: s.SubVersion, ExpressionType: s.ExpressionType}
	}
	body, err := json.Marshal(cc)
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}
