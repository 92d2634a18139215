package broker

import (
	"fmt"
	"strings"

	"github.com/stratamq/stratamq/remoting"
)

// Topic message types (remoting.MessageTypeAttribute, RocketMQ 5's
// message.type): set with UPDATE_AND_CREATE_TOPIC's attributes, kept with
// the topic's other attributes (topics.json, the bucket checkpoint, a
// slave's copy), read by the gRPC endpoint (Route's MessageType), which
// refuses a send of another type; remoting sends are not checked, as in
// RocketMQ, whose broker leaves the check to its Proxy.

// checkMessageType refuses an UPDATE_AND_CREATE_TOPIC whose attribute
// modifications (mods) set message.type to a value RocketMQ refuses, or
// to MIXED without STRATAMQ_ENABLE_MIXED_MESSAGE_TYPE; attrs are the
// topic's attributes once mods apply.
func (b *Broker) checkMessageType(req *remoting.Command, topic, mods string, attrs map[string]string) *remoting.Command {
	if !b.cfg.EnableMixedMessageType && addsAttribute(mods, remoting.MessageTypeAttribute, string(remoting.MessageTypeMixed)) {
		// RocketMQ's code and remark (enableMixedMessageType false).
		return errResponse(req, remoting.InvalidParameter,
			"MIXED message type is not supported. (the broker's STRATAMQ_ENABLE_MIXED_MESSAGE_TYPE allows it)")
	}
	if v, ok := attrs[remoting.MessageTypeAttribute]; ok {
		if _, err := remoting.ParseTopicMessageType(v); err != nil {
			return errResponse(req, remoting.SystemError, fmt.Sprintf("topic %s: %v", topic, err))
		}
	}
	return nil
}

// addsAttribute reports whether the modifications mods ("+k=v,-k2") set
// key to v.
func addsAttribute(mods, key, v string) bool {
	for _, m := range strings.Split(mods, ",") {
		if k, val, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(m), "+"), "="); ok && k == key && val == v {
			return true
		}
	}
	return false
}
