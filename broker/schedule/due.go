package schedule

import (
	"errors"
	"strconv"

	"github.com/stratamq/stratamq/store"
)

// dueMessage is what a due schedule record becomes: for a timer still a
// second or more away, the record again in the timer queue of the hop that
// fits; otherwise the message in its real topic and queue, DELAY removed,
// everything else (UNIQ_KEY, so the client's msgId; REAL_TOPIC and
// REAL_QID, as RocketMQ keeps them; born host and time; reconsume times)
// as stored. ok is false for a recalled timer and for a message whose real
// topic no longer exists (deleted meanwhile; logged and dropped).
func (s *Service) dueMessage(rec *store.Record, now int64) (store.Message, bool) {
	if s.recalls.Recalled(rec) {
		return store.Message{}, false
	}
	props := rec.Properties
	tags, _ := propValue(props, propTags)
	m := store.Message{
		Flag: rec.Flag, SysFlag: rec.SysFlag, BornTimestamp: rec.BornTimestamp, BornHost: rec.BornHost,
		ReconsumeTimes: rec.ReconsumeTimes, Body: rec.Body, TagsCode: tagsCode(tags),
	}
	if rec.Topic == TimerTopic {
		if due, ok, _ := TimerDeliverMs(props, rec.StoreTimestamp); ok && due-now > 0 {
			n := s.timerQueues()
			if q, ok := s.topics.Queues(TimerTopic); ok {
				n = q
			}
			m.Topic, m.QueueID, m.Properties = TimerTopic, timerQueueFor(due-now, timerTop(n, s.cfg.Retention)+1), props
			return m, true
		}
	}
	topic, _ := propValue(props, propRealTopic)
	qs, _ := propValue(props, propRealQueueID)
	qid, _ := strconv.Atoi(qs)
	n, ok := s.topics.Target(topic)
	if !ok || n <= 0 {
		s.log.Warn("schedule service: the real topic of a due message does not exist; message dropped",
			"topic", topic, "scheduleTopic", rec.Topic, "physOffset", rec.PhysOffset)
		return m, false
	}
	if n := int(n); qid < 0 || qid >= n {
		qid = max(qid%n, 0)
	}
	m.Topic, m.QueueID, m.Properties = topic, int32(qid), removeProps(props, propDelay, PropDelayDueMs)
	return s.fitDue(m, rec)
}

// fitDue returns the due message m as it fits the store's record limit.
// A delivered record is larger than its schedule record by how much its
// real topic's name is longer than the schedule topic's (19 bytes), so a
// message accepted close to STRATAMQ_MAX_MESSAGE_SIZE may not fit as it
// is due: it is delivered without REAL_TOPIC and REAL_QID, which are
// longer than that growth, rather than refused for ever with every later
// message of its queue waiting behind it. A record that fits in neither
// form (accepted under a larger limit) is dropped, logged.
func (s *Service) fitDue(m store.Message, rec *store.Record) (store.Message, bool) {
	// The due record is the schedule record with another topic and
	// properties: its size moves by theirs (a margin covers the store
	// host's form). Clearly under the limit, it needs no check (and m
	// does not escape through the Store interface: no allocation).
	grow := len(m.Topic) - len(rec.Topic) + len(m.Properties) - len(rec.Properties)
	if s.cfg.MaxMessageSize > 0 && rec.Size > 0 && int(rec.Size)+grow+dueSizeMargin <= s.cfg.MaxMessageSize &&
		len(m.Topic) <= store.MaxTopicLen && len(m.Properties) <= store.MaxPropertiesLen {
		return m, true
	}
	return s.fitChecked(m, rec)
}

// dueSizeMargin is what fitDue's bound leaves for what else may differ
// between a schedule record and its due record (an IPv6 store host).
const dueSizeMargin = 64

// fitChecked is fitDue checked against the store's rules.
func (s *Service) fitChecked(m store.Message, rec *store.Record) (store.Message, bool) {
	err := s.st.Validate(&m)
	if !errors.Is(err, store.ErrMessageTooLarge) {
		return m, true // an invalid topic fails the put, as before
	}
	if m.Topic == TimerTopic {
		// A hop's copy is its record again: it did not fit only when the
		// limit shrank. Delivered now instead (early) if that fits.
		topic, _ := propValue(m.Properties, propRealTopic)
		qs, _ := propValue(m.Properties, propRealQueueID)
		qid, _ := strconv.Atoi(qs)
		n, ok := s.topics.Queues(topic)
		if !ok || n <= 0 {
			s.log.Error("schedule service: a timer message exceeds the record limit and its real topic does not exist; message dropped",
				"topic", topic, "physOffset", rec.PhysOffset, "err", err)
			return m, false
		}
		if n := int(n); qid < 0 || qid >= n {
			qid = max(qid%n, 0)
		}
		m.Topic, m.QueueID = topic, int32(qid)
		s.log.Warn("schedule service: a timer message no longer fits the record limit (STRATAMQ_MAX_MESSAGE_SIZE) in the timer wheel; delivered before its time",
			"topic", topic, "physOffset", rec.PhysOffset)
	}
	m.Properties = removeProps(m.Properties, propRealTopic, propRealQueueID)
	if err := s.st.Validate(&m); err != nil {
		s.log.Error("schedule service: a due message exceeds the record limit (STRATAMQ_MAX_MESSAGE_SIZE, lowered since it was accepted?); message dropped",
			"topic", m.Topic, "scheduleTopic", rec.Topic, "physOffset", rec.PhysOffset, "err", err)
		return m, false
	}
	return m, true
}
