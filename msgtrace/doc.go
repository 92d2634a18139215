// Package msgtrace reads RocketMQ message traces: the records clients with
// tracing on write to the trace topic (RMQ_SYS_TRACE_TOPIC by default) and
// the per-message view mqadmin's queryMsgTraceById prints.
//
// A trace message's body holds records separated by FieldSep (0x02); a
// record's fields are separated by ContentSep (0x01) and its first field
// names its type:
//
//	Pub             time, region, producer group, topic, msgId, tags, keys,
//	                store host, body length, cost ms, message type,
//	                offsetMsgId, success, client host (the last three are
//	                missing from older clients)
//	SubBefore       time, region, consumer group, request id, msgId,
//	                retry times, keys, client host (Go client, 5.x Java)
//	SubAfter        request id, msgId, cost ms, success, keys, context
//	                code, time, consumer group (the last three are missing
//	                from older clients)
//	EndTransaction  time, region, producer group, topic, msgId, tags, keys,
//	                store host, message type, transaction id, transaction
//	                state, from a transaction check
//
// The client sets the trace message's KEYS to the msgIds (and keys) of the
// messages it traces, so a broker's key index finds a message's trace by
// its msgId (QUERY_MESSAGE on the trace topic). The broker stores trace
// messages like any other; it never decodes them. Decode is used by
// `stratamq admin queryMsgTraceById` and the console.
package msgtrace
