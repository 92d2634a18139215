package broker

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// invokeBrokerToResetOffset handles INVOKE_BROKER_TO_RESET_OFFSET (222,
// mqadmin resetOffsetByTime and `stratamq admin resetOffsetByTime`), as
// RocketMQ's Broker2Client.resetOffset: for every queue of the topic, the
// offset of the message stored at the timestamp (-1: the queue's end),
// searched across the tiers; with isForce it replaces the group's offset,
// without it only one further back does. The table goes to every live
// consumer of the group as RESET_CONSUMER_CLIENT_OFFSET (220, oneway),
// which the clients apply, and back as the response body. A group with no
// live consumer is answered CONSUMER_NOT_ONLINE (206): the admin tools
// then commit the offsets themselves (UPDATE_CONSUMER_OFFSET), as
// mqadmin does.
func (b *Broker) invokeBrokerToResetOffset(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	topic, group := req.ExtFields["topic"], req.ExtFields["group"]
	ts, err := strconv.ParseInt(req.ExtFields["timestamp"], 10, 64)
	if topic == "" || group == "" || err != nil {
		return errResponse(req, remoting.SystemError, "INVOKE_BROKER_TO_RESET_OFFSET needs topic, group and a timestamp in milliseconds (-1: the end)")
	}
	force := req.ExtFields["isForce"] == "true"
	if b.cfg.Role == RoleSlave {
		return errResponse(req, remoting.NoPermission, "this broker is a slave: reset the offsets of "+group+" on its master")
	}
	n, ok := b.topics.QueueCounts()[topic]
	if !ok {
		return errResponse(req, remoting.TopicNotExist, "topic "+topic+" does not exist on "+b.cfg.BrokerName)
	}
	table := make(map[int32]int64, n)
	for q := int32(0); q < n; q++ {
		cur, known := b.offsets.Query(group, topic, q)
		off := b.store.MaxQueueOffset(topic, q)
		if ts >= 0 {
			if off, err = b.offsetAtOrAfter(ctx, topic, q, ts); err != nil {
				return errResponse(req, remoting.SystemError, fmt.Sprintf("find the offset of %s queue %d at %d: %v", topic, q, ts, err))
			}
		}
		if v := b.readBoundOf(topic); v > 0 { // sync_master or a bucket-durable topic: only what consumers may see
			end, err := b.store.VisibleMaxQueueOffset(ctx, topic, q, v)
			if err != nil {
				return errResponse(req, remoting.SystemError, fmt.Sprintf("reading the consumequeue of %s/%d: %v", topic, q, err))
			}
			off = min(off, end)
		}
		if known && !force && cur < off {
			off = cur
		}
		table[q] = off
	}
	body := resetOffsetBody(b.cfg.BrokerName, topic, table)
	conns := b.consumers.Conns(group)
	if len(conns) == 0 {
		return errResponse(req, remoting.ConsumerNotOnline, fmt.Sprintf("Consumer not online, so can not reset offset, Group: %s Topic: %s Timestamp: %d", group, topic, ts))
	}
	push := remoting.NewRequest(remoting.ResetConsumerClientOffset, map[string]string{
		"topic": topic, "group": group, "timestamp": strconv.FormatInt(ts, 10), "isForce": strconv.FormatBool(force),
	}, body)
	push.Flag |= remoting.FlagOneway
	for _, conn := range conns {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := conn.InvokeOneway(pctx, push); err != nil {
			b.log.Warn("reset offset: telling a consumer failed", "group", group, "conn", conn.String(), "err", err)
		}
		cancel()
	}
	b.log.Info("consumer offsets reset by time", "group", group, "topic", topic, "timestamp", ts, "force", force, "consumers", len(conns))
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}

// offsetAtOrAfter is the queue offset of the first message stored at or
// after ts (the queue's end when none is): a reset to a time redelivers
// what was stored from then on, and nothing stored before it (RocketMQ 5's
// lower boundary; SEARCH_OFFSET_BY_TIMESTAMP's nearest message may be the
// one just before).
func (b *Broker) offsetAtOrAfter(ctx context.Context, topic string, q int32, ts int64) (int64, error) {
	off, err := b.offsetByTime(ctx, topic, q, ts) // wire_compaction.go
	if err != nil {
		return 0, err
	}
	if point, ok, _ := b.compactPoint(ctx, topic, q); ok && off < point {
		return off, nil // a compacted generation's answer is exact
	}
	for mx := b.store.MaxQueueOffset(topic, q); off < mx; off++ {
		phys, _, _, ok, err := b.store.QueueEntryContext(ctx, topic, q, off)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue // a hole: no message there
		}
		st, err := b.store.StoreTimeAt(ctx, phys)
		if err != nil {
			return 0, err
		}
		if st >= ts {
			break
		}
	}
	return off, nil
}

// resetOffsetBody is RocketMQ's ResetOffsetBody as its brokers encode it
// (fastjson: the map's keys are MessageQueue objects, fields sorted):
//
//	{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5,...}}
//
// which rocketmq-client-go and the Java client parse.
func resetOffsetBody(brokerName, topic string, table map[int32]int64) []byte {
	qs := make([]int32, 0, len(table))
	for q := range table {
		qs = append(qs, q)
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i] < qs[j] })
	var sb strings.Builder
	sb.WriteString(`{"offsetTable":{`)
	for i, q := range qs {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"brokerName":%s,"queueId":%d,"topic":%s}:%d`, strconv.Quote(brokerName), q, strconv.Quote(topic), table[q])
	}
	sb.WriteString(`}}`)
	return []byte(sb.String())
}
