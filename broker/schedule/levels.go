package schedule

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Topics of scheduled messages.
const (
	// DelayTopic holds DELAY-level messages, queue n-1 for level n, as
	// RocketMQ 4.x's ScheduleMessageService does.
	DelayTopic = "SCHEDULE_TOPIC_XXXX"
	// TimerTopic holds timer messages (TIMER_DELIVER_MS, TIMER_DELAY_SEC,
	// TIMER_DELAY_MS), named as RocketMQ 5's timer topic. Queue 0 holds
	// messages due within a second (read ahead and delivered at their
	// time); queue k >= 1 is a hop of 2^(k-1) seconds.
	TimerTopic = "rmq_sys_wheel_timer"
)

// Timer property keys (RocketMQ 5 MessageConst).
const (
	PropTimerDeliverMs = "TIMER_DELIVER_MS"
	PropTimerDelaySec  = "TIMER_DELAY_SEC"
	PropTimerDelayMs   = "TIMER_DELAY_MS"
)

// PropDelayDueMs is when a DELAY-level schedule record is due (unix ms),
// set as it is stored (Route) and removed at delivery: a change of
// STRATAMQ_DELAY_LEVELS applies to messages sent after it, never to those
// already waiting. A record stored without it is due at its store time
// plus its level's delay now.
const PropDelayDueMs = "__STRATAMQ_DELAY_DUE_MS"

// DefaultDelayLevels is RocketMQ's messageDelayLevel default.
const DefaultDelayLevels = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

// DefaultTimerMaxDelay is how far ahead a timer message may be scheduled
// (STRATAMQ_TIMER_MAX_DELAY; RocketMQ 5's timerMaxDelaySec is 3 days).
const DefaultTimerMaxDelay = 90 * 24 * time.Hour

// ParseDelayLevels parses a messageDelayLevel string: space-separated
// levels, each a positive whole number followed by s, m, h or d (RocketMQ's
// units), level 1 first.
func ParseDelayLevels(s string) ([]time.Duration, error) {
	units := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour}
	var out []time.Duration
	for i, f := range strings.Fields(s) {
		u, ok := units[f[len(f)-1]]
		n, err := strconv.ParseInt(f[:len(f)-1], 10, 32)
		if !ok || err != nil || n <= 0 {
			return nil, fmt.Errorf("STRATAMQ_DELAY_LEVELS: level %d is %q: want a positive whole number followed by s, m, h or d (e.g. \"1s 5s 10s 1m 2h\")", i+1, f)
		}
		out = append(out, time.Duration(n)*u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("STRATAMQ_DELAY_LEVELS=%q: want at least one level (e.g. %q)", s, DefaultDelayLevels)
	}
	if len(out) > 255 {
		return nil, fmt.Errorf("STRATAMQ_DELAY_LEVELS: %d levels: want at most 255", len(out))
	}
	return out, nil
}

// timerQueuesFor is the number of timer queues for a maximum delay: queue
// 0 plus one hop queue per bit of the delay in seconds.
func timerQueuesFor(maxDelay time.Duration) int32 {
	return int32(bits.Len64(uint64(maxDelay/time.Second))) + 1
}

// timerQueueFor picks the timer queue for a message due in r ms: 0 when
// less than a second, else the largest hop 2^(k-1) s that is not past it
// (k capped at the last queue).
func timerQueueFor(r int64, queues int32) int32 {
	if r < 1000 {
		return 0
	}
	return min(int32(bits.Len64(uint64(r/1000))), queues-1)
}

// timerHop is how long a message waits in timer queue k >= 1.
func timerHop(k int32) time.Duration { return time.Duration(1<<(k-1)) * time.Second }

// timerTop is the highest timer queue a message is put in: the last of n,
// or with a retention the largest hop within a quarter of it. Bucket
// retention waits for the oldest undelivered scheduled record, so hops kept
// short of retention keep it from holding back much more than retention
// (a 90-day timer under 7-day retention is stored again every ~1.5 days).
func timerTop(n int32, retention time.Duration) int32 {
	top := n - 1
	if retention > 0 {
		top = min(top, int32(bits.Len64(uint64(max(retention/4/time.Second, 1)))))
	}
	return top
}

// TimerDeliverMs reads a message's timer: TIMER_DELIVER_MS (absolute), else
// TIMER_DELAY_SEC or TIMER_DELAY_MS from now. ok is false for a message
// without a timer; err names a property that is not a non-negative whole
// number.
func TimerDeliverMs(props string, now int64) (due int64, ok bool, err error) {
	for _, k := range []struct {
		key   string
		scale int64
		base  int64
	}{{PropTimerDeliverMs, 1, 0}, {PropTimerDelaySec, 1000, now}, {PropTimerDelayMs, 1, now}} {
		v, ok := propValue(props, k.key)
		if !ok || v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > (1<<62)/k.scale {
			return 0, false, fmt.Errorf("timer message illegal: the %s property %q is not a non-negative whole number", k.key, v)
		}
		return k.base + n*k.scale, true, nil
	}
	return 0, false, nil
}
