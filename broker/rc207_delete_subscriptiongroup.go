package broker

import (
	"context"

	"github.com/stratamq/stratamq/remoting"
)

// deleteSubscriptionGroup handles DELETE_SUBSCRIPTIONGROUP (207) (mqadmin
// deleteSubGroup): the group's config goes; with removeOffset (cleanOffset
// in RocketMQ 5) its committed offsets too.
func (b *Broker) deleteSubscriptionGroup(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	group := req.ExtFields["groupName"]
	if r := badGroup(req, group); r != nil {
		return r
	}
	existed := b.groups.Delete(group)
	if err := b.groups.Save(); err != nil {
		return errResponse(req, remoting.SystemError, "persist subscription groups: "+err.Error())
	}
	clean := req.ExtFields["removeOffset"] == "true" || req.ExtFields["cleanOffset"] == "true"
	if clean {
		b.offsets.DeleteGroup(group)
		b.pop.DeleteGroup(group) // package pop
	}
	b.log.Info("subscription group deleted", "group", group, "existed", existed, "offsetsRemoved", clean)
	return remoting.NewResponse(req, remoting.Success, "")
}
