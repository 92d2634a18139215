package broker

import (
	"bytes"
	"compress/zlib"
	"context"
	"fmt"
	"io"

	"github.com/stratamq/stratamq/msgtrace"
	"github.com/stratamq/stratamq/store"
)

// consoleTraceBody bounds one trace message's inflated body (the clients
// write at most ~118 KiB).
const consoleTraceBody = 1 << 20

// ConsoleTrace is the trace of the message whose client msgId is msgID:
// the trace records of topic (the broker's STRATAMQ_MSG_TRACE_TOPIC_NAME
// when empty) whose KEYS hold it, found through the key index as
// QUERY_MESSAGE finds them (at most ConsoleMaxMessages trace messages),
// decoded into its legs (package msgtrace). It returns the trace topic
// read; records that do not decode are left out.
func (b *Broker) ConsoleTrace(ctx context.Context, msgID, topic string) ([]msgtrace.Leg, string, error) {
	if topic == "" {
		topic = b.cfg.MsgTraceTopicName
	}
	res, err := b.store.QueryByKey(ctx, store.KeyQuery{Topic: topic, Key: msgID, MaxNum: ConsoleMaxMessages, Begin: 0, End: 1<<63 - 1, MaxBytes: consoleKeyBytes})
	if err != nil {
		return nil, topic, err
	}
	var msgs []msgtrace.Message
	for i, raw := range res.Records {
		res.Records[i] = nil
		r, _, err := store.DecodeRecord(raw)
		if err != nil {
			return nil, topic, err
		}
		body := bytes.Clone(r.Body)
		if r.SysFlag&sysFlagCompressed != 0 {
			zr, err := zlib.NewReader(bytes.NewReader(r.Body))
			if err != nil {
				continue
			}
			if body, err = io.ReadAll(io.LimitReader(zr, consoleTraceBody)); err != nil {
				continue
			}
		}
		msgs = append(msgs, msgtrace.Message{Body: body, BornHost: r.BornHost.Addr().String()})
	}
	legs, _ := msgtrace.Trace(msgID, msgs)
	if err := ctx.Err(); err != nil {
		return nil, topic, fmt.Errorf("trace of %s: %w", msgID, err)
	}
	return legs, topic, nil
}
