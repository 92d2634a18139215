package remoting

import (
	"strings"
	"testing"
)

// TestNamesRocketMQ49Rules: ValidateTopic and ValidateGroup accept what
// RocketMQ 4.9's TopicValidator and Validators accept, and nothing else.
func TestNamesRocketMQ49Rules(t *testing.T) {
	for _, ok := range []string{"T", "%RETRY%g", "a|b", "A-z_0-9", "ns%topic", strings.Repeat("t", TopicMaxLen)} {
		if err := ValidateTopic(ok); err != nil {
			t.Errorf("ValidateTopic(%q) = %v", ok, err)
		}
	}
	for name, rule := range map[string]string{
		"": "is blank", "  ": "is blank", "..": "illegal characters", "a/b": "illegal characters",
		"a.b": "illegal characters", "é": "illegal characters", "a\x00": "illegal characters",
		strings.Repeat("t", TopicMaxLen+1): "longer than topic max length 127",
	} {
		err := ValidateTopic(name)
		if err == nil || !strings.Contains(err.Error(), rule) || !strings.Contains(err.Error(), QuoteName(name)) {
			t.Errorf("ValidateTopic(%.20q) = %v, want %q naming it", name, err, rule)
		}
	}
	if err := ValidateGroup(strings.Repeat("g", GroupMaxLen)); err != nil {
		t.Error(err)
	}
	if err := ValidateGroup(strings.Repeat("g", GroupMaxLen+1)); err == nil || !strings.Contains(err.Error(), "255") {
		t.Errorf("256-byte group: %v", err)
	}
	if q := QuoteName(strings.Repeat("x", 100)); len(q) > 90 || !strings.Contains(q, "(100 bytes)") {
		t.Errorf("QuoteName of 100 bytes: %s", q)
	}
	for _, sys := range []string{"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRACE_TOPIC", "rmq_sys_x", "OFFSET_MOVED_EVENT"} {
		if !IsSystemTopic(sys) {
			t.Errorf("IsSystemTopic(%s) = false", sys)
		}
	}
	if IsSystemTopic("%RETRY%g") || IsSystemTopic("RMQ_SYS_other") {
		t.Error("not system topics in 4.9")
	}
	if IsNotAllowedSendTopic("RMQ_SYS_TRACE_TOPIC") || IsNotAllowedSendTopic("TBW102") || IsNotAllowedSendTopic("BenchmarkTest") {
		t.Error("IsNotAllowedSendTopic refuses a topic clients send to (traces, benchmarks) or the template the broker refuses itself")
	}
	// Every other system topic is written by the broker alone.
	for _, sys := range []string{"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "OFFSET_MOVED_EVENT",
		"rmq_sys_stratamq_recall", "rmq_sys_wheel_timer", "rmq_sys_x"} {
		if !IsNotAllowedSendTopic(sys) {
			t.Errorf("IsNotAllowedSendTopic(%s) = false: clients may send to a system topic", sys)
		}
	}
}
