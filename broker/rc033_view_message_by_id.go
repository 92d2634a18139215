package broker

import (
	"context"
	"fmt"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// viewMessageByID handles VIEW_MESSAGE_BY_ID (33): the client decodes the
// commitlog offset from an offsetMsgId and asks for the record there.
func (b *Broker) viewMessageByID(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.ViewMessageRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	rec, err := b.readRecord(ctx, h.Offset)
	if err != nil {
		return errResponse(req, remoting.SystemError, fmt.Sprintf("can not find message by the offset, %d: %v", h.Offset, err))
	}
	if b.cfg.ACL != nil || b.auth2On() {
		// With an ACL, reading a message needs SUB on its own topic, and on
		// the topic it is for when it waits in a system topic (a half
		// message, a delayed or timer one). Bytes that do not decode as a
		// record (an offset inside one) are not answered.
		m, _, err := store.DecodeRecord(rec)
		if err != nil {
			return errResponse(req, remoting.SystemError, fmt.Sprintf("can not find message by the offset, %d", h.Offset))
		}
		if r := b.checkStored(c, req, m.Topic, acl.Sub); r != nil {
			return r
		}
		if real, ok := propValue(m.Properties, PropRealTopic); ok && real != "" && real != m.Topic {
			if r := b.checkStored(c, req, real, acl.Sub); r != nil {
				return r
			}
		}
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = rec
	return resp
}
