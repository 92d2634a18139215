package proxy

import (
	"strings"

	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
)

// Topic message types (remoting.TopicMessageType): a send whose messages
// are not of a type the topic takes is refused whole, before anything is
// stored, with MESSAGE_PROPERTY_CONFLICT_WITH_TYPE and the remark
// RocketMQ's Proxy gives; a recall needs a topic that takes DELAY. A
// topic without the message.type attribute takes every type.

// checkMessageTypes refuses out (the messages of one send to r's topic)
// when the topic does not take one of them. A message's type is derived
// from its properties (remoting.MessageTypeOf), not from the type the
// client named, as the Proxy derives it. Retry and DLQ topics are not
// checked (nor are they by the Proxy).
func checkMessageTypes(r Route, out []Message) error {
	if strings.HasPrefix(r.Topic, "%RETRY%") || strings.HasPrefix(r.Topic, "%DLQ%") {
		return nil
	}
	for i := range out {
		if err := checkMessageType(r.MessageType, remoting.MessageTypeOf(parseProps(out[i].Properties))); err != nil {
			return err
		}
	}
	return nil
}

// checkMessageType refuses a message of type m to a topic of type t.
func checkMessageType(t, m remoting.TopicMessageType) error {
	if t.Accepts(m) {
		return nil
	}
	return bad(apiv2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
		"TopicMessageType validate failed, the expected type is %s, but actual type is %s", t, m)
}

// acceptTypes is a route's accept_message_types for a topic of type t.
func acceptTypes(t remoting.TopicMessageType) []apiv2.MessageType {
	ts := t.Accepted()
	out := make([]apiv2.MessageType, 0, len(ts))
	for _, a := range ts {
		v, ok := apiv2.MessageType_value[string(a)]
		if !ok || a == remoting.MessageTypeUnspecified {
			v = int32(apiv2.MessageType_MESSAGE_TYPE_UNSPECIFIED)
		}
		out = append(out, apiv2.MessageType(v))
	}
	return out
}
