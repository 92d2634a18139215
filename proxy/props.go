package proxy

import "strings"

// RocketMQ's encoded properties: name \x01 value \x02, repeated.
const (
	nameValueSep = '\x01'
	propertySep  = '\x02'
)

// RocketMQ property names the mapping uses (MessageConst).
const (
	propTags           = "TAGS"
	propKeys           = "KEYS"
	propUniqKey        = "UNIQ_KEY"
	propShardingKey    = "__SHARDINGKEY"
	propGoShardingKey  = "SHARDING_KEY"
	propTimerDeliverMs = "TIMER_DELIVER_MS"
	propDelay          = "DELAY"
	propTraceContext   = "TRACE_CONTEXT"
	propBornHost       = "__BORNHOST"
	propTranMsg        = "TRAN_MSG"
	propProducerGroup  = "PGROUP"
	propCheckImmunity  = "CHECK_IMMUNITY_TIME_IN_SECONDS"
	propRealTopic      = "REAL_TOPIC"
	propRealQueueID    = "REAL_QID"
	propReconsumeTime  = "RECONSUME_TIME"
	propTransCheckTime = "TRANSACTION_CHECK_TIMES"
	propMsgRegion      = "MSG_REGION"
	propTraceOn        = "TRACE_ON"

	keySeparator = " " // KEYS holds several keys joined by one space
)

// systemProps are the property names RocketMQ reserves (MessageConst's
// system set, plus the timer's and the POP's): a user property may not
// use one, and a stored one is not handed back as a user property.
var systemProps = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range []string{
		propTags, propKeys, propUniqKey, propShardingKey, propTimerDeliverMs, propDelay, propTraceContext,
		propBornHost, propTranMsg, propProducerGroup, propCheckImmunity, propRealTopic, propRealQueueID,
		propReconsumeTime, propTransCheckTime, propMsgRegion, propTraceOn,
		"WAIT", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "MAX_RECONSUME_TIMES", "MIN_OFFSET", "MAX_OFFSET",
		"BUYER_ID", "CLUSTER", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
		"PUSH_REPLY_TIME", "MSG_TYPE", "INNER_NUM", "INNER_BASE", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET",
		"TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
		"TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME",
		"DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__STARTDELIVERTIME", "FORWARD_TS", "SHARDING_KEY",
		"CHECK_IMMUNITY_TIME_IN_SECONDS", "UNIQ_KEY", "__TRANSACTIONID__", "TRANSFER_FLAG", "CORRECTION_FLAG",
		"MSG_PRIORITY", "__lmq.", "INNER_NUM",
	} {
		m[k] = true
	}
	return m
}()

// propsBuilder appends encoded properties.
type propsBuilder struct{ sb strings.Builder }

func (p *propsBuilder) add(k, v string) {
	p.sb.WriteString(k)
	p.sb.WriteByte(nameValueSep)
	p.sb.WriteString(v)
	p.sb.WriteByte(propertySep)
}

func (p *propsBuilder) String() string { return p.sb.String() }

// parseProps decodes encoded properties into a map (a pair without a
// separator is skipped, as RocketMQ's string2messageProperties does).
func parseProps(s string) map[string]string {
	m := make(map[string]string, 8)
	for s != "" {
		pair, rest, _ := strings.Cut(s, string(propertySep))
		s = rest
		k, v, ok := strings.Cut(pair, string(nameValueSep))
		if ok && k != "" {
			m[k] = v
		}
	}
	return m
}

// hasSeparator reports whether s holds a byte of the properties encoding.
func hasSeparator(s string) bool {
	return strings.ContainsAny(s, "\x01\x02")
}
