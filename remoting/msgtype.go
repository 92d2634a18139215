package remoting

import (
	"fmt"
	"strings"
)

// Topic message types (RocketMQ 5's TopicMessageType): a topic's
// message.type attribute says which kind of message its producers send.
// The gRPC endpoint refuses a send whose kind the topic does not take
// (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE) and names the kinds in its route
// answers (MessageQueue.accept_message_types); remoting sends are not
// checked, as RocketMQ's broker does not check them (its Proxy does).

// MessageTypeAttribute is the topic attribute that holds a topic's
// message type (set with UPDATE_AND_CREATE_TOPIC's "+message.type=FIFO").
const MessageTypeAttribute = "message.type"

// TopicMessageType is a topic's or a message's type, spelled as RocketMQ
// spells it. The zero value is a topic without the attribute.
type TopicMessageType string

// The values RocketMQ 5.3 accepts for message.type.
const (
	MessageTypeUnspecified TopicMessageType = "UNSPECIFIED"
	MessageTypeNormal      TopicMessageType = "NORMAL"
	MessageTypeFIFO        TopicMessageType = "FIFO"
	MessageTypeDelay       TopicMessageType = "DELAY"
	MessageTypeTransaction TopicMessageType = "TRANSACTION"
	// MessageTypeMixed takes every kind; creating a topic with it needs
	// the broker's STRATAMQ_ENABLE_MIXED_MESSAGE_TYPE (RocketMQ's
	// enableMixedMessageType).
	MessageTypeMixed TopicMessageType = "MIXED"
)

// messageTypes are the accepted values, in the order a refusal lists them.
var messageTypes = []TopicMessageType{MessageTypeNormal, MessageTypeFIFO, MessageTypeDelay,
	MessageTypeTransaction, MessageTypeMixed, MessageTypeUnspecified}

// ParseTopicMessageType checks a message.type value: one of RocketMQ's
// values, upper case as RocketMQ requires.
func ParseTopicMessageType(v string) (TopicMessageType, error) {
	for _, t := range messageTypes {
		if v == string(t) {
			return t, nil
		}
	}
	names := make([]string, len(messageTypes))
	for i, t := range messageTypes {
		names[i] = string(t)
	}
	return "", fmt.Errorf("%s=%q: want one of %s", MessageTypeAttribute, v, strings.Join(names, ", "))
}

// MessageType is the topic's message type; "" when the topic has no
// message.type attribute (or a value no broker of ours accepts).
func (t TopicConfig) MessageType() TopicMessageType {
	mt, err := ParseTopicMessageType(t.Attributes[MessageTypeAttribute])
	if err != nil {
		return ""
	}
	return mt
}

// Accepts reports whether a topic of type t takes a message of type m
// (NORMAL, FIFO, DELAY or TRANSACTION, as MessageTypeOf derives it).
//
// A topic without the attribute ("") takes every type, so topics made
// before message types (or by 4.x tools) keep taking what they took;
// RocketMQ 5 treats such a topic as NORMAL. MIXED takes every type;
// UNSPECIFIED none (as RocketMQ's Proxy decides).
func (t TopicMessageType) Accepts(m TopicMessageType) bool {
	switch t {
	case "", MessageTypeMixed:
		return true
	case MessageTypeUnspecified:
		return false
	}
	return t == m
}

// Accepted is what a topic of type t takes, for a route's
// accept_message_types: the four kinds for MIXED and for a topic without
// the attribute, its own kind else, UNSPECIFIED for UNSPECIFIED.
func (t TopicMessageType) Accepted() []TopicMessageType {
	switch t {
	case "", MessageTypeMixed:
		return []TopicMessageType{MessageTypeNormal, MessageTypeFIFO, MessageTypeDelay, MessageTypeTransaction}
	}
	return []TopicMessageType{t}
}

// Property names MessageTypeOf reads (RocketMQ's MessageConst).
const (
	propTranMsg        = "TRAN_MSG"
	propDelayLevel     = "DELAY"
	propTimerDeliverMs = "TIMER_DELIVER_MS"
	propTimerDelaySec  = "TIMER_DELAY_SEC"
	propTimerDelayMs   = "TIMER_DELAY_MS"
	propShardingKey    = "__SHARDINGKEY"
)

// MessageTypeOf is a message's type from its properties, as RocketMQ
// derives it: TRANSACTION when TRAN_MSG is "true" (a transactional
// prepare), else DELAY with a delay level or a timer property, else FIFO
// with a message group (__SHARDINGKEY), else NORMAL.
func MessageTypeOf(props map[string]string) TopicMessageType {
	if props[propTranMsg] == "true" {
		return MessageTypeTransaction
	}
	for _, k := range []string{propDelayLevel, propTimerDeliverMs, propTimerDelaySec, propTimerDelayMs} {
		if _, ok := props[k]; ok {
			return MessageTypeDelay
		}
	}
	if _, ok := props[propShardingKey]; ok {
		return MessageTypeFIFO
	}
	return MessageTypeNormal
}
