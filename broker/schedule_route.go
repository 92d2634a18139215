package broker

import (
	"context"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Topics of scheduled messages (issue 11 item 1).
const (
	// ScheduleTopic holds DELAY-level messages, queue n-1 for level n, as
	// RocketMQ 4.x's ScheduleMessageService does.
	ScheduleTopic = "SCHEDULE_TOPIC_XXXX"
	// TimerTopic holds timer messages (TIMER_DELIVER_MS, TIMER_DELAY_SEC,
	// TIMER_DELAY_MS), named as RocketMQ 5's timer topic. Queue 0 holds
	// messages due within a second (read ahead and delivered at their
	// time); queue k >= 1 is a hop of 2^(k-1) seconds (schedule.go).
	TimerTopic = "rmq_sys_wheel_timer"
)

// Timer property keys (RocketMQ 5 MessageConst).
const (
	PropTimerDeliverMs = "TIMER_DELIVER_MS"
	PropTimerDelaySec  = "TIMER_DELAY_SEC"
	PropTimerDelayMs   = "TIMER_DELAY_MS"
)

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

// scheduleRoute turns a message with DELAY=n (n > 0) or a TIMER_*
// property into its schedule record, as RocketMQ does: REAL_TOPIC and
// REAL_QID keep where it goes, the record goes to SCHEDULE_TOPIC_XXXX
// queue n-1 (n capped at the number of levels) or to the timer topic.
// TIMER_DELAY_SEC and TIMER_DELAY_MS become TIMER_DELIVER_MS. A timer due
// now or in the past, and transaction half messages, are stored as they
// are. It returns a response to send instead when the message is refused
// (MESSAGE_ILLEGAL, with RocketMQ's remark for a timer past the maximum).
func (b *Broker) scheduleRoute(req *remoting.Command, m *store.Message, now int64) *remoting.Command {
	if m.Topic == TransHalfTopic {
		return b.halfFits(req, m) // transaction.go
	}
	if m.SysFlag&sysFlagTransMask == sysFlagTransPrep || m.Topic == ScheduleTopic || m.Topic == TimerTopic {
		return nil
	}
	if strings.HasPrefix(m.Topic, DLQGroupTopicPrefix) {
		m.Properties = removeProps(m.Properties, PropDelay) // no delay into the DLQ (RocketMQ)
		return nil
	}
	props := m.Properties
	delay, hasDelay := propValue(props, PropDelay)
	deliverMs, isTimer, err := timerDeliverMs(props, now)
	if err != nil {
		return errResponse(req, remoting.MessageIllegal, err.Error())
	}
	level := 0
	if hasDelay && delay != "" {
		if level, err = strconv.Atoi(delay); err != nil {
			return errResponse(req, remoting.MessageIllegal, fmt.Sprintf("the DELAY property %q is not a delay level number", delay))
		}
	}
	if strings.HasPrefix(m.Topic, RetryGroupTopicPrefix) {
		isTimer = false // a retry's copied TIMER_* properties are history: its DELAY counts
	}
	if isTimer && level > 0 {
		return errResponse(req, remoting.MessageIllegal, "timer message illegal: a message sets both a delay level (DELAY) and a timer (TIMER_DELIVER_MS, TIMER_DELAY_SEC or TIMER_DELAY_MS)")
	}
	switch {
	case level > 0:
		level = min(level, len(b.delayLevels))
		props = setProp(props, PropDelay, strconv.Itoa(level))
		props = setProp(props, PropDelayDueMs, strconv.FormatInt(now+b.levelDelay(level).Milliseconds(), 10)) // schedule.go
		m.Properties = setProp(setProp(props, PropRealTopic, m.Topic), PropRealQueueID, strconv.Itoa(int(m.QueueID)))
		m.Topic, m.QueueID = ScheduleTopic, int32(level-1)
		b.ensureScheduleTopic(ScheduleTopic, int32(len(b.delayLevels)))
	case isTimer:
		r := deliverMs - now
		if r <= 0 {
			return nil // due: an ordinary message
		}
		if maxMs := b.cfg.TimerMaxDelay.Milliseconds(); r > maxMs {
			return errResponse(req, remoting.MessageIllegal, fmt.Sprintf("timer message illegal, the delay time should not be bigger than the max delay %dms (STRATAMQ_TIMER_MAX_DELAY=%s); this one is due in %dms", maxMs, b.cfg.TimerMaxDelay, r))
		}
		props = removeProps(props, PropTimerDelaySec, PropTimerDelayMs)
		props = setProp(props, PropTimerDeliverMs, strconv.FormatInt(deliverMs, 10))
		m.Properties = setProp(setProp(props, PropRealTopic, m.Topic), PropRealQueueID, strconv.Itoa(int(m.QueueID)))
		n := b.timerQueues()
		m.Topic, m.QueueID = TimerTopic, timerQueueFor(r, b.timerTop(n)+1)
		b.ensureScheduleTopic(TimerTopic, n)
		if m.QueueID == 0 {
			b.sched.wake()
		}
	}
	return nil
}

// scheduleSend is scheduleRoute for a send: a message it reroutes passes
// the send gates of its schedule queue too.
func (b *Broker) scheduleSend(ctx context.Context, req *remoting.Command, m *store.Message) *remoting.Command {
	topic, q := m.Topic, m.QueueID
	if topic == TimerTopic {
		return errResponse(req, remoting.NoPermission, fmt.Sprintf("Sending message to topic[%s] is forbidden.", topic))
	}
	if r := b.scheduleRoute(req, m, time.Now().UnixMilli()); r != nil {
		return r
	}
	if m.Topic != topic || m.QueueID != q {
		if err := b.writeGate(ctx, m.Topic, m.QueueID); err != nil {
			return b.putError(req, err)
		}
	}
	return nil
}

// timerDeliverMs reads a message's timer: TIMER_DELIVER_MS (absolute), else
// TIMER_DELAY_SEC or TIMER_DELAY_MS from now.
func timerDeliverMs(props string, now int64) (int64, bool, error) {
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

// ensureScheduleTopic creates a system topic with n queues (registered
// like the retry topics; a checkpoint lists it before its first record). A
// schedule topic with fewer queues grows to n (more delay levels, a longer
// STRATAMQ_TIMER_MAX_DELAY); it never shrinks, so nothing stored is left
// behind.
func (b *Broker) ensureScheduleTopic(topic string, n int32) {
	tc, changed := b.topics.CreateSystemTopic(topic, n, PermRead|PermWrite)
	if !changed && queueCount(tc) < n && (topic == ScheduleTopic || topic == TimerTopic) {
		tc.ReadQueueNums, tc.WriteQueueNums = n, n
		changed = b.topics.Put(tc)
	}
	if changed {
		b.requestRegister()
	}
}

// timerTop is the highest timer queue a message is put in: the last of n,
// or with STRATAMQ_RETENTION the largest hop within a quarter of it. Bucket
// retention waits for the oldest undelivered scheduled record, so hops kept
// short of retention keep it from holding back much more than retention
// (a 90-day timer under 7-day retention is stored again every ~1.5 days).
func (b *Broker) timerTop(n int32) int32 {
	top := n - 1
	if r := b.cfg.Retention; r > 0 {
		top = min(top, int32(bits.Len64(uint64(max(r/4/time.Second, 1)))))
	}
	return top
}

// timerQueues is the number of timer queues the maximum delay needs.
func (b *Broker) timerQueues() int32 { return timerQueuesFor(b.cfg.TimerMaxDelay) }

// setProp returns props with key set to v (an existing pair removed).
func setProp(props, key, v string) string {
	props = removeProps(props, key)
	if props != "" && props[len(props)-1] != propertySep {
		props += string(propertySep)
	}
	return props + key + string(nameValueSep) + v + string(propertySep)
}

// removeProps returns props without the pairs of keys, order kept.
func removeProps(props string, keys ...string) string {
	found := false
	for _, k := range keys {
		if _, ok := propValue(props, k); ok {
			found = true
		}
	}
	if !found {
		return props
	}
	var sb strings.Builder
	for _, pair := range strings.Split(props, string(propertySep)) {
		if pair == "" {
			continue
		}
		k, _, _ := strings.Cut(pair, string(nameValueSep))
		drop := false
		for _, d := range keys {
			if k == d {
				drop = true
			}
		}
		if !drop {
			sb.WriteString(pair)
			sb.WriteByte(propertySep)
		}
	}
	return sb.String()
}
