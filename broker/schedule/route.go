package schedule

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/stratamq/stratamq/store"
)

// Route turns a message with DELAY=n (n > 0) or a TIMER_* property into
// its schedule record, as RocketMQ does: REAL_TOPIC and REAL_QID keep
// where it goes, the record goes to DelayTopic queue n-1 (n capped at the
// number of levels) with its due time (PropDelayDueMs), or to the timer
// queue of the hop that fits. TIMER_DELAY_SEC and TIMER_DELAY_MS become
// TIMER_DELIVER_MS. A message without either, and a timer due now or in
// the past, are left as they are; a retry's TIMER_* properties (copied
// from the message it retries) do not count. It creates or grows the
// schedule topic it routes to.
//
// The error, when the message is refused, is the remark to answer it with
// (MESSAGE_ILLEGAL; RocketMQ's remark for a timer past the maximum). The
// caller decides which messages are routed at all: transaction half
// messages, dead letters and records of the schedule topics themselves
// are not.
func (s *Service) Route(m *store.Message, now int64) error {
	props := m.Properties
	if !MayRoute(props) {
		return nil
	}
	delay, hasDelay := propValue(props, propDelay)
	deliverMs, isTimer, err := TimerDeliverMs(props, now)
	if err != nil {
		return err
	}
	level := 0
	if hasDelay && delay != "" {
		if level, err = strconv.Atoi(delay); err != nil {
			return fmt.Errorf("the DELAY property %q is not a delay level number", delay)
		}
	}
	if strings.HasPrefix(m.Topic, retryTopicPrefix) {
		isTimer = false // a retry's copied TIMER_* properties are history: its DELAY counts
	}
	if isTimer && level > 0 {
		return errors.New("timer message illegal: a message sets both a delay level (DELAY) and a timer (TIMER_DELIVER_MS, TIMER_DELAY_SEC or TIMER_DELAY_MS)")
	}
	switch {
	case level > 0:
		level = min(level, len(s.cfg.Levels))
		props = setProp(props, propDelay, strconv.Itoa(level))
		props = setIntProp(props, PropDelayDueMs, now+s.levelDelay(level).Milliseconds())
		m.Properties = setProp(setProp(props, propRealTopic, m.Topic), propRealQueueID, strconv.Itoa(int(m.QueueID)))
		m.Topic, m.QueueID = DelayTopic, int32(level-1)
		s.topics.EnsureSystem(DelayTopic, int32(len(s.cfg.Levels)))
	case isTimer:
		r := deliverMs - now
		if r <= 0 {
			return nil // due: an ordinary message
		}
		if maxMs := s.cfg.TimerMaxDelay.Milliseconds(); r > maxMs {
			return fmt.Errorf("timer message illegal, the delay time should not be bigger than the max delay %dms (STRATAMQ_TIMER_MAX_DELAY=%s); this one is due in %dms", maxMs, s.cfg.TimerMaxDelay, r)
		}
		props = removeProps(props, PropTimerDelaySec, PropTimerDelayMs)
		props = setIntProp(props, PropTimerDeliverMs, deliverMs)
		m.Properties = setProp(setProp(props, propRealTopic, m.Topic), propRealQueueID, strconv.Itoa(int(m.QueueID)))
		n := s.timerQueues()
		m.Topic, m.QueueID = TimerTopic, timerQueueFor(r, timerTop(n, s.cfg.Retention)+1)
		s.topics.EnsureSystem(TimerTopic, n)
		if m.QueueID == 0 {
			s.Wake()
		}
	}
	return nil
}

// MayRoute reports whether props may hold what Route acts on: a DELAY or
// a TIMER_* property (all of whose names contain "DELAY" or "TIMER_").
// Route leaves a message for which it is false as it is, so a caller can
// skip it, and reading the clock, for most sends.
func MayRoute(props string) bool {
	return strings.Contains(props, propDelay) || strings.Contains(props, "TIMER_")
}
