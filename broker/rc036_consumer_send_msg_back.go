package broker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/ha"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// consumerSendMsgBack handles CONSUMER_SEND_MSG_BACK (36): a message the
// consumer failed to process, found by its commitlog offset (in the
// bucket too), goes to %RETRY%<group> after a backoff: delay level
// header.delayLevel, or 3 + its reconsume times when that is 0 (10 s, 30 s,
// 1 m, ..., capped at the last level), through the schedule service
// (package schedule). Past the group's retryMaxTimes (or the header's
// maxReconsumeTimes, version >= 121), or with delayLevel < 0 (client-go's
// orderly consumer past its local retries), it goes to %DLQ%<group> at
// once, as RocketMQ does.
//
// It is answered like a send: on a sync_master only once a slave holds the
// retry copy (else SYSTEM_ERROR naming FLUSH_SLAVE_TIMEOUT or
// SLAVE_NOT_AVAILABLE, as RocketMQ answers a send-back whose put was not
// PUT_OK; the consumer then retries the message itself: at least once);
// a retry of a bucket-durable topic only once the bucket WAL holds it.
func (b *Broker) consumerSendMsgBack(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.ConsumerSendMsgBackRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	if r := badGroup(req, h.Group); r != nil {
		return r
	}
	if _, err := retryTopicFor(h.Group); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	g := b.groups.GetOrCreate(h.Group)
	if g.RetryQueueNums <= 0 {
		return remoting.NewResponse(req, remoting.Success, "")
	}
	raw, err := b.readRecord(ctx, h.Offset)
	if err != nil {
		return errResponse(req, remoting.SystemError, fmt.Sprintf("look message by offset failed, %d: %v", h.Offset, err))
	}
	rec, _, err := store.DecodeRecord(raw)
	if err != nil {
		return errResponse(req, remoting.SystemError, fmt.Sprintf("decode message at offset %d: %v", h.Offset, err))
	}
	props := parseProps(rec.Properties)
	// With an ACL the account must be able to read the message it sends
	// back: SUB on the stored message's topic (a retry message's
	// original topic), not only on the originTopic it names, or any
	// message could be copied into a group's retry topic and read there.
	if real := props[PropRetryTopic]; b.cfg.ACL != nil || b.auth2On() {
		if real == "" {
			real = rec.Topic
		}
		if r := b.checkStored(c, req, real, acl.Sub); r != nil {
			return r
		}
	}
	maxTimes := int32(g.RetryMaxTimes)
	if req.Version >= 121 && h.MaxReconsumeTimes > 0 {
		maxTimes = h.MaxReconsumeTimes
	}
	msg := b.sendBackMessage(h.Group, g, &rec, props, h.Offset, h.OriginMsgID, maxTimes, h.DelayLevel,
		rec.ReconsumeTimes >= maxTimes || h.DelayLevel < 0)
	// A retry of a bucket-durable topic (by its RETRY_TOPIC, as a
	// returning data dir judges its unshipped records: bucketOnlyOf) is
	// answered once the bucket WAL holds it, as a send to that topic is.
	gen := b.durabilityGen()                                            // before the rule is read (fromBucket)
	bucket := b.bucketTopic(durabilityTopic(msg.Topic, msg.Properties)) // before scheduleRoute reroutes msg
	if r := b.scheduleRoute(req, &msg); r != nil {
		return r
	}
	res, err := b.storeSendBack(ctx, msg)
	if err != nil {
		return b.putError(req, err)
	}
	if b.answerFromBucket(bucket, gen) {
		ch := make(chan error, 1)
		b.awaitWAL(res, func(e error) { ch <- e })
		if err := <-ch; err != nil {
			return b.putError(req, err)
		}
		if err := b.ackGate(); err != nil {
			return b.putError(req, err)
		}
		return remoting.NewResponse(req, remoting.Success, "")
	}
	if err := b.slaveAck(res); err != nil {
		status := "SLAVE_NOT_AVAILABLE"
		if errors.Is(err, ha.ErrSlaveTimeout) {
			status = "FLUSH_SLAVE_TIMEOUT"
		}
		return errResponse(req, remoting.SystemError, status+": the retry message is stored but no slave holds it: "+err.Error())
	}
	if err := b.ackGate(); err != nil { // the lease may have lapsed during the wait
		return b.putError(req, err)
	}
	return remoting.NewResponse(req, remoting.Success, "")
}

// sendBackMessage builds the message a send-back stores for rec, read at
// commitlog offset phys with its properties props (changed in place):
// RETRY_TOPIC and ORIGIN_MESSAGE_ID kept or set, MAX_RECONSUME_TIMES set,
// reconsume times plus one; in %RETRY%<group> with DELAY delayLevel (0:
// 3 + reconsume times), or, dlq, in %DLQ%<group> queue 0 without a delay.
// The retry or DLQ topic is created when missing. CONSUMER_SEND_MSG_BACK
// and POP's dead-lettering (package pop, through wire_pop.go) both store through it.
func (b *Broker) sendBackMessage(group string, g remoting.SubscriptionGroupConfig, rec *store.Record, props map[string]string,
	phys int64, originMsgID string, maxTimes, delayLevel int32, dlq bool) store.Message {
	if _, ok := props[PropRetryTopic]; !ok {
		props[PropRetryTopic] = rec.Topic
	}
	if originMsgID != "" {
		props[PropOriginMessageID] = originMsgID
	} else if _, ok := props[PropOriginMessageID]; !ok {
		if u, ok := props[PropUniqKey]; ok {
			props[PropOriginMessageID] = u
		} else {
			props[PropOriginMessageID] = store.EncodeMessageID(b.storeHost, phys)
		}
	}
	retryTopic := RetryGroupTopicPrefix + group
	topic := retryTopic
	queueID := rand.Int32N(max(int32(g.RetryQueueNums), 1))
	if dlq {
		topic, queueID = DLQGroupTopicPrefix+group, 0
		if _, created := b.topics.CreateSystemTopic(topic, 1, PermWrite); created {
			b.requestRegister()
		}
	} else if _, created := b.topics.CreateSystemTopic(topic, int32(g.RetryQueueNums), PermRead|PermWrite); created {
		b.requestRegister()
	}
	props[PropMaxReconsumeTimes] = strconv.Itoa(int(maxTimes))
	delete(props, PropDelay)
	if topic == retryTopic {
		level := delayLevel
		if level == 0 {
			level = 3 + rec.ReconsumeTimes
		}
		props[PropDelay] = strconv.Itoa(int(level))
	}
	return store.Message{
		Topic: topic, QueueID: queueID, Flag: rec.Flag, SysFlag: rec.SysFlag,
		BornTimestamp: rec.BornTimestamp, BornHost: rec.BornHost, ReconsumeTimes: rec.ReconsumeTimes + 1,
		Body: rec.Body, Properties: encodeProps(props), TagsCode: tagsCode(props[PropTags]),
	}
}

// putSendBack stores a message sendBackMessage built (and scheduleRoute
// routed): the send gates, then the store. It does not wait for a slave
// (POP's dead-lettering keeps its entry in flight until the copy is
// durable instead).
func (b *Broker) putSendBack(ctx context.Context, msg store.Message) error {
	_, err := b.storeSendBack(ctx, msg)
	return err
}

// storeSendBack is putSendBack returning where the message was stored.
func (b *Broker) storeSendBack(ctx context.Context, msg store.Message) ([]store.PutResult, error) {
	if err := b.writeGate(ctx, msg.Topic, msg.QueueID); err != nil {
		return nil, err
	}
	res, err := b.store.Put(ctx, []store.Message{msg})
	if err != nil {
		return nil, err
	}
	return res, b.ackGate()
}
