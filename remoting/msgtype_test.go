package remoting

import "testing"

// TestMessageTypeOf: a message's type from its properties, in RocketMQ's
// order (a transactional prepare first, then a delay, then a group), and
// what each topic type takes.
func TestMessageTypeOf(t *testing.T) {
	for _, c := range []struct {
		props map[string]string
		want  TopicMessageType
	}{
		{nil, MessageTypeNormal},
		{map[string]string{"KEYS": "k", "TRAN_MSG": "false"}, MessageTypeNormal},
		{map[string]string{"__SHARDINGKEY": "g"}, MessageTypeFIFO},
		{map[string]string{"DELAY": "3"}, MessageTypeDelay},
		{map[string]string{"TIMER_DELIVER_MS": "1"}, MessageTypeDelay},
		{map[string]string{"TIMER_DELAY_SEC": "1", "__SHARDINGKEY": "g"}, MessageTypeDelay},
		{map[string]string{"TIMER_DELAY_MS": "1"}, MessageTypeDelay},
		{map[string]string{"TRAN_MSG": "true", "DELAY": "1", "__SHARDINGKEY": "g"}, MessageTypeTransaction},
	} {
		if got := MessageTypeOf(c.props); got != c.want {
			t.Errorf("%v: %s, want %s", c.props, got, c.want)
		}
	}
	kinds := []TopicMessageType{MessageTypeNormal, MessageTypeFIFO, MessageTypeDelay, MessageTypeTransaction}
	for _, topic := range append(kinds, "", MessageTypeMixed, MessageTypeUnspecified) {
		for _, m := range kinds {
			want := topic == "" || topic == MessageTypeMixed || topic == m
			if got := topic.Accepts(m); got != want {
				t.Errorf("topic %q takes %s: %v, want %v", topic, m, got, want)
			}
		}
	}
	if tc := (TopicConfig{Attributes: map[string]string{MessageTypeAttribute: "fifo"}}); tc.MessageType() != "" {
		t.Errorf("a value RocketMQ refuses reads as %q, want unset", tc.MessageType())
	}
}
