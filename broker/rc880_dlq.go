package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// DLQMessage is one dead-letter message as STRATAMQ_DLQ_LIST (880003)
// describes it.
type DLQMessage struct {
	QueueID        int32  `json:"queueId"`
	QueueOffset    int64  `json:"queueOffset"`
	MsgID          string `json:"msgId"`       // the client's id (UNIQ_KEY), else the offset id
	OffsetMsgID    string `json:"offsetMsgId"` // store host + commitlog offset of the DLQ record
	OriginTopic    string `json:"originTopic"` // RETRY_TOPIC: the topic it was first sent to
	OriginMsgID    string `json:"originMsgId,omitempty"`
	ReconsumeTimes int32  `json:"reconsumeTimes"`
	StoreTimestamp int64  `json:"storeTimestamp"`
	BornTimestamp  int64  `json:"bornTimestamp"`
	Tags           string `json:"tags,omitempty"`
	Keys           string `json:"keys,omitempty"`
	BodySize       int    `json:"bodySize"`
}

// DLQListing is STRATAMQ_DLQ_LIST's body.
type DLQListing struct {
	Topic    string       `json:"topic"`
	Total    int64        `json:"total"` // messages in the DLQ's queues (retained)
	Messages []DLQMessage `json:"messages"`
}

// dlqMaxList bounds one listing (the request's "max", default 1000).
const dlqMaxList = 10000

// forEachDLQ calls fn for every retained message of group's DLQ, oldest
// first per queue, until fn returns false (from the bucket too).
func (b *Broker) forEachDLQ(ctx context.Context, group string, fn func(rec *store.Record, q int32, off int64) (bool, error)) (string, int64, error) {
	topic := DLQGroupTopicPrefix + group
	tc, ok := b.topics.Get(topic)
	if !ok {
		return topic, 0, fmt.Errorf("group %s has no dead-letter queue (topic %s does not exist)", group, topic)
	}
	var total int64
	for q := int32(0); q < queueCount(tc); q++ {
		total += b.store.MaxQueueOffset(topic, q) - b.store.MinQueueOffset(topic, q)
	}
	for q := int32(0); q < queueCount(tc); q++ {
		for i := b.store.MinQueueOffset(topic, q); i < b.store.MaxQueueOffset(topic, q); i++ {
			phys, _, _, ok, err := b.store.QueueEntryContext(ctx, topic, q, i)
			if err != nil {
				return topic, total, err
			}
			if !ok {
				continue
			}
			raw, err := b.store.ReadRecordContext(ctx, phys)
			if err != nil {
				return topic, total, err
			}
			rec, _, err := store.DecodeRecord(raw)
			if err != nil {
				return topic, total, err
			}
			more, err := fn(&rec, q, i)
			if err != nil || !more {
				return topic, total, err
			}
		}
	}
	return topic, total, nil
}

func (b *Broker) dlqDescribe(rec *store.Record, q int32, off int64) DLQMessage {
	p := rec.Properties
	d := DLQMessage{QueueID: q, QueueOffset: off, OffsetMsgID: store.EncodeMessageID(rec.StoreHost, rec.PhysOffset),
		ReconsumeTimes: rec.ReconsumeTimes, StoreTimestamp: rec.StoreTimestamp, BornTimestamp: rec.BornTimestamp,
		BodySize: len(rec.Body)}
	d.MsgID, _ = propValue(p, PropUniqKey)
	if d.MsgID == "" {
		d.MsgID = d.OffsetMsgID
	}
	d.OriginTopic, _ = propValue(p, PropRetryTopic)
	d.OriginMsgID, _ = propValue(p, PropOriginMessageID)
	d.Tags, _ = propValue(p, PropTags)
	d.Keys, _ = propValue(p, PropKeys)
	return d
}

// dlqList answers STRATAMQ_DLQ_LIST (880003; `stratamq admin dlqList`):
// ext fields group and max; body DLQListing JSON.
func (b *Broker) dlqList(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	group := req.ExtFields["group"]
	if r := badGroup(req, group); r != nil {
		return r
	}
	limit := 1000
	if v := req.ExtFields["max"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return errResponse(req, remoting.SystemError, fmt.Sprintf("max=%q: want a positive number", v))
		}
		limit = min(n, dlqMaxList)
	}
	out := DLQListing{Messages: []DLQMessage{}}
	topic, total, err := b.forEachDLQ(ctx, group, func(rec *store.Record, q int32, off int64) (bool, error) {
		out.Messages = append(out.Messages, b.dlqDescribe(rec, q, off))
		return len(out.Messages) < limit, nil
	})
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	out.Topic, out.Total = topic, total
	body, err := json.Marshal(out)
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}

// dlqResend answers STRATAMQ_DLQ_RESEND (880004; `stratamq admin
// dlqResend`): ext fields group and msgId (comma-separated UNIQ_KEYs or
// offset ids; empty: every message). Each chosen dead-letter message is
// stored again in %RETRY%<group>, so only that group consumes it again,
// with its reconsume times back at 0, and RETRY_TOPIC, UNIQ_KEY and
// ORIGIN_MESSAGE_ID kept: the client sees its original topic and msgId.
// The DLQ keeps its copy. Body: the DLQMessages resent, as JSON (an id
// this broker's DLQ lacks is not an error: another brokerName may hold it).
func (b *Broker) dlqResend(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	group := req.ExtFields["group"]
	if r := badGroup(req, group); r != nil {
		return r
	}
	want := map[string]bool{}
	for _, id := range strings.Split(req.ExtFields["msgId"], ",") {
		if id = strings.TrimSpace(id); id != "" {
			want[strings.ToUpper(id)] = true
		}
	}
	retryTopic, err := retryTopicFor(group)
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	g := b.groups.GetOrCreate(group)
	nq := max(int32(g.RetryQueueNums), 1)
	b.ensureScheduleTopic(retryTopic, nq)
	var msgs []store.Message
	resent := []DLQMessage{}
	_, _, err = b.forEachDLQ(ctx, group, func(rec *store.Record, q int32, off int64) (bool, error) {
		d := b.dlqDescribe(rec, q, off)
		if len(want) > 0 && !want[strings.ToUpper(d.MsgID)] && !want[d.OffsetMsgID] {
			return true, nil
		}
		props := removeProps(rec.Properties, PropDelay, PropRealTopic, PropRealQueueID)
		tags, _ := propValue(props, PropTags)
		msgs = append(msgs, store.Message{Topic: retryTopic, QueueID: rand.Int32N(nq), Flag: rec.Flag,
			SysFlag: rec.SysFlag, BornTimestamp: rec.BornTimestamp, BornHost: rec.BornHost,
			Body: append([]byte(nil), rec.Body...), Properties: props, TagsCode: tagsCode(tags)})
		resent = append(resent, d)
		return len(msgs) < dlqMaxList, nil
	})
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	for q := int32(0); q < nq; q++ {
		if err := b.writeGate(ctx, retryTopic, q); err != nil {
			return b.putError(req, err)
		}
	}
	if len(msgs) > 0 {
		if _, err := b.store.Put(ctx, msgs); err != nil {
			return b.putError(req, err)
		}
		if err := b.ackGate(); err != nil {
			return b.putError(req, err)
		}
	}
	body, err := json.Marshal(resent)
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}
