package remoting

import (
	"fmt"
	"strings"
)

// RocketMQ 4.9's rules for topic and group names (TopicValidator on the
// broker, Validators in the clients). The broker and the name server apply
// them at every request that takes a name to a file path, a table key or a
// config table; a refused name is answered SYSTEM_ERROR with the error's
// text as the remark, as 4.9 does.
const (
	// NamePattern is the charset of topics and groups.
	NamePattern = "^[%|a-zA-Z0-9_-]+$"
	// TopicMaxLen is the longest topic, in bytes (the stored record keeps
	// its length in one byte).
	TopicMaxLen = 127
	// GroupMaxLen is the longest consumer group.
	GroupMaxLen = 255
)

// NameError is a refused topic or group name; its text names the name
// (quoted, cut to 64 bytes) and the rule.
type NameError struct {
	Kind string // "topic" or "group"
	Name string
	Rule string // what is wrong, e.g. "contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
}

func (e *NameError) Error() string {
	return fmt.Sprintf("The specified %s %s %s", e.Kind, QuoteName(e.Name), e.Rule)
}

// QuoteName quotes a name for a remark or a log line: Go syntax, at most 64
// bytes of it, and its length when it was cut.
func QuoteName(s string) string {
	const limit = 64
	if len(s) <= limit {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:limit], len(s))
}

// ValidateTopic checks a topic against RocketMQ 4.9's TopicValidator:
// not blank, only ^[%|a-zA-Z0-9_-]+$, at most 127 bytes.
func ValidateTopic(topic string) error {
	return validateName("topic", topic, TopicMaxLen)
}

// ValidateGroup checks a consumer group against RocketMQ 4.9's
// Validators.checkGroup: not blank, only ^[%|a-zA-Z0-9_-]+$, at most 255
// bytes.
func ValidateGroup(group string) error {
	return validateName("group", group, GroupMaxLen)
}

func validateName(kind, name string, maxLen int) error {
	if strings.TrimSpace(name) == "" {
		return &NameError{Kind: kind, Name: name, Rule: "is blank"}
	}
	for i := 0; i < len(name); i++ {
		if !nameChar(name[i]) {
			return &NameError{Kind: kind, Name: name, Rule: "contains illegal characters, allowing only " + NamePattern}
		}
	}
	if len(name) > maxLen {
		return &NameError{Kind: kind, Name: name, Rule: fmt.Sprintf("is longer than %s max length %d", kind, maxLen)}
	}
	return nil
}

func nameChar(c byte) bool {
	return c == '%' || c == '|' || c == '_' || c == '-' ||
		c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// IsSystemTopic reports RocketMQ 4.9's system topics
// (TopicValidator.isSystemTopic): TBW102, SCHEDULE_TOPIC_XXXX,
// BenchmarkTest, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRACE_TOPIC,
// RMQ_SYS_TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC,
// OFFSET_MOVED_EVENT and every topic starting with rmq_sys_. 4.9 refuses
// to create or delete them through the admin codes (SYSTEM_ERROR "The
// topic[...] is conflict with system topic.").
func IsSystemTopic(topic string) bool {
	switch topic {
	case "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
		"RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT":
		return true
	}
	return strings.HasPrefix(topic, "rmq_sys_")
}

// IsNotAllowedSendTopic reports the topics clients may not send to
// (NO_PERMISSION "Sending message to topic[...] is forbidden."): every
// system topic (IsSystemTopic: the ones RocketMQ 4.9 refuses and every
// rmq_sys_ topic: the timer wheel, StrataMQ's recall markers, ...), whose
// records the broker writes itself and acts on, but RMQ_SYS_TRACE_TOPIC
// (the clients' message traces), BenchmarkTest (the benchmark tools'
// topic) and TBW102 (the broker refuses sends to its auto-create
// template with a remark of its own).
func IsNotAllowedSendTopic(topic string) bool {
	switch topic {
	case "RMQ_SYS_TRACE_TOPIC", "BenchmarkTest", "TBW102":
		return false
	}
	return IsSystemTopic(topic)
}
