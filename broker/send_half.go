package broker

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/stratamq/stratamq/broker/msgprop"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// The send side of transactional messages (issue 11 item 3), as RocketMQ
// 4.9 keeps them (TransactionalMessageBridge): a prepared message is
// stored as a "half" message in RMQ_SYS_TRANS_HALF_TOPIC queue 0 with its
// real topic and queue in REAL_TOPIC/REAL_QID. END_TRANSACTION
// (rc037_end_transaction.go) commits or rolls it back; broker/txn owns
// which halves are resolved and the check service that asks producers
// about the rest (wire_txn.go builds it).

// ensureTransTopics creates the half and op topics (one queue each, as RocketMQ
// does on first use) and registers them.
func (b *Broker) ensureTransTopics() {
	_, c1 := b.topics.CreateSystemTopic(TransHalfTopic, 1, PermRead|PermWrite)
	_, c2 := b.topics.CreateSystemTopic(TransOpHalfTopic, 1, PermRead|PermWrite)
	if c1 || c2 {
		b.requestRegister()
	}
}

// halfMessage rewrites a prepared send (sysFlag TRANSACTION_PREPARED_TYPE,
// TRAN_MSG=true) into its half message, as TransactionalMessageBridge
// .parseHalfMessageInner does: the real topic and queue go into REAL_TOPIC
// and REAL_QID, the message into RMQ_SYS_TRANS_HALF_TOPIC queue 0, and the
// transaction bits of sysFlag are cleared (the half is an ordinary record
// of the half topic, so it is indexed, tiered and restored like any). The
// send response's msgId and queueOffset then name the half record, which
// END_TRANSACTION refers to.
func (b *Broker) halfMessage(topic string, queueID int32, props string, sysFlag int32) (string, int32, string, int32) {
	b.ensureTransTopics()
	var sb strings.Builder
	sb.Grow(len(props) + 64 + len(topic))
	sb.WriteString(props)
	if props != "" && props[len(props)-1] != propertySep {
		sb.WriteByte(propertySep)
	}
	for _, kv := range [][2]string{{PropRealTopic, topic}, {PropRealQueueID, strconv.Itoa(int(queueID))}} {
		sb.WriteString(kv[0])
		sb.WriteByte(nameValueSep)
		sb.WriteString(kv[1])
		sb.WriteByte(propertySep)
	}
	return TransHalfTopic, 0, sb.String(), sysFlag &^ sysFlagTransMask
}

// halfFits refuses (MESSAGE_ILLEGAL, naming the limit) a half message m
// whose later records would not fit the store's record limit, so none is
// accepted that could not be checked back or committed: each check stores
// it again with TRANSACTION_CHECK_TIMES (room is kept for ten digits), and
// a commit of one with a DELAY or a timer is stored as a schedule record
// (its real topic in REAL_TOPIC, when due at PropDelayDueMs or
// TIMER_DELIVER_MS; room is kept for 19 digits). The delivered message
// fits as the schedule service delivers it (fitDue). A record with no
// REAL_TOPIC (a send straight to the half topic) is left alone.
func (b *Broker) halfFits(req *remoting.Command, m *store.Message) *remoting.Command {
	// Far below the limit (nearly every half message) no later record can
	// exceed it: they add at most two properties, each a key of under 32
	// bytes with 19 digits, and change the topic.
	const halfGrowth = 128
	if b.store.Fits(m, halfGrowth) {
		return nil
	}
	real, ok := propValue(m.Properties, PropRealTopic)
	if !ok {
		return nil
	}
	const maxDigits = "9999999999999999999"
	cp := *m
	cp.Properties = msgprop.With(m.Properties, PropTransactionCheckTimes, maxDigits[:10])
	err := b.store.Validate(&cp)
	if err == nil {
		props := msgprop.Without(cp.Properties, PropRealTopic, PropRealQueueID)
		level, _ := strconv.Atoi(parseProps(props)[PropDelay])
		_, timer, _ := timerDeliverMs(props, 0)
		if level > 0 || timer {
			sched := cp
			sched.Topic = ScheduleTopic
			props = msgprop.With(props, PropDelayDueMs, maxDigits)
			if timer {
				sched.Topic = TimerTopic
				props = msgprop.With(msgprop.Without(props, PropTimerDelaySec, PropTimerDelayMs, PropDelayDueMs), PropTimerDeliverMs, maxDigits)
			}
			sched.Properties = msgprop.With(msgprop.With(props, PropRealTopic, real), PropRealQueueID, parseProps(m.Properties)[PropRealQueueID])
			err = b.store.Validate(&sched)
		}
	}
	if err != nil {
		return errResponse(req, remoting.MessageIllegal, fmt.Sprintf(
			"the transactional message is too large: as it is checked back or committed it would be stored as %v (STRATAMQ_MAX_MESSAGE_SIZE; a half message keeps room for TRANSACTION_CHECK_TIMES and its real topic)", err))
	}
	return nil
}

// transErr names a refused END_TRANSACTION in the log and the response.
func (b *Broker) transErr(req *remoting.Command, code remoting.ResponseCode, remark string, h *remoting.EndTransactionRequestHeader) *remoting.Command {
	b.log.Warn("END_TRANSACTION refused", "reason", remark, "producerGroup", h.ProducerGroup,
		"commitLogOffset", h.CommitLogOffset, "tranStateTableOffset", h.TranStateTableOffset, "msgId", h.MsgID)
	return errResponse(req, code, remark)
}
