package retention

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/broker/compaction"
	"github.com/stratamq/stratamq/msgtrace"
	"github.com/stratamq/stratamq/remoting"
)

// Attribute is the topic attribute that overrides STRATAMQ_RETENTION for
// one topic.
const Attribute = "retention.time"

// Forever is a retention that never expires.
const Forever time.Duration = -1

// Parse parses a retention.time value: "" or "0" (the broker default: 0),
// "-1"/"forever" (Forever), a number of milliseconds, or a Go duration
// with an optional "d" (days) suffix.
func Parse(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	switch strings.ToLower(v) {
	case "", "0":
		return 0, nil
	case "-1", "forever", "infinite":
		return Forever, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("%s=%q: a negative retention other than -1 (forever)", Attribute, v)
		}
		return time.Duration(n) * time.Millisecond, nil
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(v, "d"); ok {
		var n float64
		if n, err = strconv.ParseFloat(days, 64); err == nil {
			d = time.Duration(n * float64(24*time.Hour))
		}
	} else {
		d, err = time.ParseDuration(v)
	}
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration (90s, 720h, 30d), milliseconds, 0 (the broker default) or -1 (forever)", Attribute, v)
	}
	return d, nil
}

// ApplyAttributes applies RocketMQ 5's attribute modifications
// ("+k=v,-k2") to cur (not changed) and returns the new map; a
// retention.time value is checked.
func ApplyAttributes(cur map[string]string, mods string) (map[string]string, error) {
	out := make(map[string]string, len(cur))
	for k, v := range cur {
		out[k] = v
	}
	for _, m := range strings.Split(mods, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		switch m[0] {
		case '+':
			k, v, ok := strings.Cut(m[1:], "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("attribute %q: want +key=value", m)
			}
			if k == Attribute {
				if _, err := Parse(v); err != nil {
					return nil, err
				}
			}
			out[k] = v
		case '-':
			if strings.Contains(m, "=") || len(m) == 1 {
				return nil, fmt.Errorf("attribute %q: want -key", m)
			}
			delete(out, m[1:])
		default:
			return nil, fmt.Errorf("attribute %q: want +key=value or -key", m)
		}
	}
	return out, nil
}

// Of is topic tc's retention: its override (override true; may be
// Forever), else the broker default (STRATAMQ_RETENTION, 0: unlimited).
// System topics never take an override, but the message-trace topic,
// which holds the clients' trace records, not the broker's state.
func (s *Service) Of(tc remoting.TopicConfig) (d time.Duration, override bool) {
	if v, ok := tc.Attributes[Attribute]; ok && (!remoting.IsSystemTopic(tc.TopicName) || tc.TopicName == msgtrace.DefaultTopic) {
		if d, err := Parse(v); err == nil && d != 0 {
			return d, true
		}
	}
	return s.cfg.Default, false
}

// HasOverride reports whether some topic overrides the retention, or is
// compacted (its segments go once its generation covers them: the
// per-topic deletion decision).
func (s *Service) HasOverride() bool {
	for _, tc := range s.topics.Configs() {
		if _, ok := s.Of(tc); ok || compaction.IsCompacted(tc.Attributes) {
			return true
		}
	}
	return false
}

// queueCount is a topic's queue count (the broker's: the larger of its
// read and write queues).
func queueCount(tc remoting.TopicConfig) int32 { return max(tc.ReadQueueNums, tc.WriteQueueNums) }
