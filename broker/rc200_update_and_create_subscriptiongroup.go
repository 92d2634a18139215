package broker

import (
	"context"
	"encoding/json"

	"github.com/stratamq/stratamq/remoting"
)

// updateAndCreateSubscriptionGroup handles UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
// (200): the body is one SubscriptionGroupConfig.
func (b *Broker) updateAndCreateSubscriptionGroup(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	g := DefaultSubscriptionGroup("")
	if err := json.Unmarshal(req.Body, &g); err != nil {
		return errResponse(req, remoting.SystemError, "decode subscription group: "+err.Error())
	}
	if r := badGroup(req, g.GroupName); r != nil {
		return r
	}
	b.groups.Put(g)
	if err := b.groups.Save(); err != nil {
		return errResponse(req, remoting.SystemError, "persist subscription groups: "+err.Error())
	}
	b.log.Info("subscription group created or updated", "group", g.GroupName)
	return remoting.NewResponse(req, remoting.Success, "")
}
