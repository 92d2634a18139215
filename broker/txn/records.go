package txn

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/stratamq/stratamq/broker/msgprop"
	"github.com/stratamq/stratamq/store"
)

// OpMessage is the op record of the half at queue offset half: its body
// the offset in decimal, tag "d".
func (t *Service) OpMessage(half int64) store.Message {
	return store.Message{
		Topic: OpHalfTopic, QueueID: 0, BornTimestamp: time.Now().UnixMilli(), BornHost: t.cfg.StoreHost,
		Body:       []byte(strconv.FormatInt(half, 10)),
		Properties: msgprop.Tags + string(msgprop.NameValueSep) + opTag + string(msgprop.PropertySep),
		TagsCode:   tagsCode(opTag),
	}
}

// ReadHalf reads and decodes the half record at a commitlog offset (from
// local disk or, for a dropped segment, the bucket).
func (t *Service) ReadHalf(ctx context.Context, phys int64) ([]byte, store.Record, error) {
	raw, err := t.deps.Store.ReadRecordContext(ctx, phys)
	if err != nil {
		return nil, store.Record{}, err
	}
	rec, _, err := store.DecodeRecord(raw)
	if err != nil {
		return nil, store.Record{}, err
	}
	return raw, rec, nil
}

// Committed is the message END_TRANSACTION commits for the half rec (at
// commitlog offset phys), as EndTransactionProcessor.endMessageTransaction
// builds it: the real topic and queue, the half's properties without
// REAL_TOPIC and REAL_QID (so UNIQ_KEY, the msgId the producer and
// consumers see, is kept), sysFlag of type COMMIT and the half's commitlog
// offset as PREPARED TRANSACTION OFFSET.
func Committed(rec store.Record, phys int64) (store.Message, error) {
	props := msgprop.Parse(rec.Properties)
	topic := props[msgprop.RealTopic]
	qid, err := strconv.Atoi(props[msgprop.RealQueueID])
	if topic == "" || err != nil || qid < 0 {
		return store.Message{}, fmt.Errorf("the half message at commitlog offset %d has no valid REAL_TOPIC/REAL_QID (%q, %q)", phys, topic, props[msgprop.RealQueueID])
	}
	return store.Message{
		Topic: topic, QueueID: int32(qid), Flag: rec.Flag,
		SysFlag:       rec.SysFlag&^SysFlagMask | SysFlagCommit,
		BornTimestamp: rec.BornTimestamp, BornHost: rec.BornHost, ReconsumeTimes: rec.ReconsumeTimes,
		PreparedTransactionOffset: phys,
		Body:                      rec.Body,
		Properties:                msgprop.Without(rec.Properties, msgprop.RealTopic, msgprop.RealQueueID),
		TagsCode:                  tagsCode(props[msgprop.Tags]),
	}, nil
}

// tagsCode is the consumequeue tag hash of a TAGS property (0 = no tag).
func tagsCode(tags string) int64 {
	if tags == "" {
		return 0
	}
	return store.TagsHash(tags)
}
