package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/stratamq/stratamq/broker/compaction"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// sendBatchMessage handles SEND_BATCH_MESSAGE (320): the body is a run of
// encoded messages (§3.2), each stored as its own record with consecutive
// queue offsets, all in one store append.
func (b *Broker) sendBatchMessage(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.SendMessageRequestHeader
	if err := h.DecodeCommand(req); err != nil {
		return errResponse(req, remoting.MessageIllegal, err.Error())
	}
	tc, resp := b.prepareSend(req, &h)
	if resp != nil {
		return resp
	}
	if strings.HasPrefix(tc.TopicName, RetryGroupTopicPrefix) {
		return errResponse(req, remoting.MessageIllegal, "batch messages cannot be sent to a retry topic")
	}
	if h.SysFlag&sysFlagTransMask != 0 { // as RocketMQ's CommitLog.putMessages
		return errResponse(req, remoting.MessageIllegal, "batch messages cannot be transactional (sysFlag has transaction type bits)")
	}
	if len(req.Body) > int(b.cfg.MaxMessageSize) {
		return errResponse(req, remoting.MessageIllegal, fmt.Sprintf("the batch body size %d exceeds the limit %d bytes", len(req.Body), b.cfg.MaxMessageSize))
	}
	born := peerAddr(c)
	msgs, err := decodeBatch(req.Body, compaction.IsCompacted(tc.Attributes), func(flag int32, body []byte, props string) store.Message {
		tags, _ := propValue(props, PropTags)
		return store.Message{Topic: tc.TopicName, QueueID: h.QueueID, Flag: flag, SysFlag: h.SysFlag &^ sysFlagCompressed,
			BornTimestamp: h.BornTimestamp, BornHost: born, ReconsumeTimes: h.ReconsumeTimes,
			Body: body, Properties: props, TagsCode: tagsCode(tags)}
	})
	if err != nil {
		return errResponse(req, remoting.MessageIllegal, err.Error())
	}
	for i := range msgs { // DELAY, TIMER_* per message (wire_schedule.go)
		if r := b.scheduleSend(ctx, req, &msgs[i]); r != nil {
			return r
		}
	}
	return b.storeAndAck(ctx, c, msgs, b.judgeDurability(sendAck{req: req, topic: tc.TopicName, queueID: h.QueueID, n: len(msgs),
		bodyLen: len(req.Body), batch: true}, tc.TopicName))
}

// decodeBatch splits a batch body: entries of
// [totalSize i32][magic i32][bodyCRC i32][flag i32][bodyLen i32][body][propsLen i16][props].
// An empty body is refused unless tombstones (a compacted topic's).
func decodeBatch(body []byte, tombstones bool, mk func(flag int32, body []byte, props string) store.Message) ([]store.Message, error) {
	var out []store.Message
	for off := 0; off < len(body); {
		if len(body)-off < 22 {
			return nil, fmt.Errorf("batch entry at byte %d is truncated", off)
		}
		total := int(int32(binary.BigEndian.Uint32(body[off:])))
		if total < 22 || total > len(body)-off {
			return nil, fmt.Errorf("batch entry at byte %d has illegal size %d", off, total)
		}
		e := body[off : off+total]
		flag := int32(binary.BigEndian.Uint32(e[12:]))
		bodyLen := int(int32(binary.BigEndian.Uint32(e[16:])))
		if bodyLen < 0 || 20+bodyLen+2 > total {
			return nil, fmt.Errorf("batch entry at byte %d has illegal body length %d", off, bodyLen)
		}
		mb := e[20 : 20+bodyLen]
		propsLen := int(binary.BigEndian.Uint16(e[20+bodyLen:]))
		if 22+bodyLen+propsLen > total {
			return nil, fmt.Errorf("batch entry at byte %d has illegal properties length %d", off, propsLen)
		}
		props := string(e[22+bodyLen : 22+bodyLen+propsLen])
		if len(mb) == 0 && !tombstones {
			return nil, fmt.Errorf("batch entry at byte %d has an empty body", off)
		}
		out = append(out, mk(flag, mb, props))
		off += total
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the batch is empty")
	}
	return out, nil
}
