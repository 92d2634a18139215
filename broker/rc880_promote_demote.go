package broker

import (
	"context"

	"github.com/stratamq/stratamq/remoting"
)

// promoteBroker answers STRATAMQ_PROMOTE_BROKER (880001, a StrataMQ code:
// `stratamq admin promote`): no header, no body; SUCCESS once Promote has
// the change under way, else SYSTEM_ERROR with Promote's error as the
// remark.
func (b *Broker) promoteBroker(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	if err := b.Promote(ctx); err != nil {
		return errResponse(req, remoting.SystemError, "promote "+b.cfg.BrokerName+" at "+b.advertise+": "+err.Error())
	}
	return remoting.NewResponse(req, remoting.Success, "")
}

// demoteBroker answers STRATAMQ_DEMOTE_BROKER (880002: `stratamq admin
// demote`) the same way with Demote.
func (b *Broker) demoteBroker(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	if err := b.Demote(ctx); err != nil {
		return errResponse(req, remoting.SystemError, "demote "+b.cfg.BrokerName+" at "+b.advertise+": "+err.Error())
	}
	return remoting.NewResponse(req, remoting.Success, "")
}
