package broker

import "github.com/stratamq/stratamq/msgtrace"

// Message traces, as RocketMQ's broker has them: with traceTopicEnable
// (STRATAMQ_TRACE_TOPIC_ENABLE) a master creates its trace topic
// (msgTraceTopicName, STRATAMQ_MSG_TRACE_TOPIC_NAME, RMQ_SYS_TRACE_TOPIC by
// default) with one queue, so it is in the routes it registers and the
// clients' trace dispatchers, which look the topic's route up and send to
// it without auto-creating it, find a queue. A client naming another trace
// topic sends to it as to any topic (auto-create as for any topic).
//
// Trace records are ordinary messages: stored, indexed by their KEYS (the
// traced messages' msgIds and keys, which the clients set), uploaded,
// retained and expired as any topic's (RMQ_SYS_TRACE_TOPIC's own
// retention.time included: updateTopic may change the trace topic though
// it is a system topic). The broker never decodes them: package msgtrace
// does, for `stratamq admin queryMsgTraceById` and the console.

// ensureTraceTopic creates the trace topic when STRATAMQ_TRACE_TOPIC_ENABLE
// is on and this is a master; an existing one is kept as it is (its queues
// and attributes may have been changed since). A slave copies its master's
// topics.
func (b *Broker) ensureTraceTopic() {
	if !b.cfg.TraceTopicEnable || b.cfg.BrokerID != 0 {
		return
	}
	if _, created := b.topics.CreateSystemTopic(b.cfg.MsgTraceTopicName, 1, PermRead|PermWrite); created {
		b.log.Info("message-trace topic created", "topic", b.cfg.MsgTraceTopicName)
	}
}

// traceTopicUpdate reports whether UPDATE_AND_CREATE_TOPIC may create or
// change topic although it is a system topic: RMQ_SYS_TRACE_TOPIC, the one
// system topic clients send to, so that its attributes (its retention.time)
// can be set as any topic's. Only a request that carries attributes: one
// without is refused as RocketMQ refuses every system topic.
func traceTopicUpdate(topic string) bool { return topic == msgtrace.DefaultTopic }
