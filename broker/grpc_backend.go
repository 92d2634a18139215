package broker

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/broker/txn"
	"github.com/stratamq/stratamq/ha"
	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// The broker is the gRPC endpoint's backend (package proxy): its RPCs
// run the same checks and store paths as the remoting handlers. A
// refusal is a *proxy.Error carrying the remoting code and remark the
// same request gets over remoting.
var _ proxy.Backend = (*Broker)(nil)

// GRPCDeps is what the broker calls back into the gRPC endpoint for
// (Deps.GRPC).
type GRPCDeps struct {
	// CheckTransaction hands a transaction check to a gRPC producer of the
	// half's topic; false when none is connected (the remoting producers of
	// the group were asked first).
	CheckTransaction func(proxy.OrphanedTransaction) bool
}

// BrokerName implements proxy.Backend.
func (b *Broker) BrokerName() string { return b.cfg.BrokerName }

// MaxMessageSize implements proxy.Backend.
func (b *Broker) MaxMessageSize() int { return int(b.cfg.MaxMessageSize) }

// ACL implements proxy.Backend.
func (b *Broker) ACL() *acl.ACL { return b.cfg.ACL }

// grpcRefusal turns a refusing remoting response into its error.
func grpcRefusal(resp *remoting.Command) error {
	return &proxy.Error{Code: remoting.ResponseCode(resp.Code), Remark: resp.Remark}
}

// Route implements proxy.Backend: the topic's queues, created when create
// says the caller may, as a first send would create it
// (STRATAMQ_AUTO_CREATE_TOPIC, from TBW102).
func (b *Broker) Route(ctx context.Context, topic string, create bool) (proxy.Route, error) {
	req := remoting.NewRequest(remoting.GetRouteinfoByTopic, nil, nil)
	if r := badTopic(req, topic); r != nil {
		return proxy.Route{}, grpcRefusal(r)
	}
	tc, ok := b.topics.Get(topic)
	if !ok {
		if !create || !b.cfg.AutoCreateTopic || b.cfg.BrokerID != 0 || remoting.IsNotAllowedSendTopic(topic) || topic == DefaultTopic {
			return proxy.Route{}, proxy.Errorf(remoting.TopicNotExist, "topic[%s] not exist, apply first please!", topic)
		}
		var created bool
		var err error
		tc, created, err = b.topics.CreateOnSend(topic, DefaultTopic, 0)
		if errors.Is(err, ErrConfigNotSaved) {
			return proxy.Route{}, proxy.Errorf(remoting.SystemError, "%s", err.Error())
		}
		if err != nil {
			return proxy.Route{}, proxy.Errorf(remoting.TopicNotExist, "%s", err.Error())
		}
		if created {
			b.log.Info("topic auto-created", "topic", topic, "queues", tc.WriteQueueNums, "by", "grpc route")
			b.requestRegister()
		}
	}
	return proxy.Route{Topic: topic, ReadQueues: tc.ReadQueueNums, WriteQueues: tc.WriteQueueNums, Perm: int32(tc.Perm),
		MessageType: tc.MessageType()}, nil
}

// Send implements proxy.Backend: each message as SEND_MESSAGE stores it
// (sendMessage): the topic checks and auto-create, a transactional half
// into the half topic, a delay or timer into the schedule topics, then
// one store call, acknowledged per the flush mode (store.Put returns
// after the fdatasync with flush=sync) and, on a sync_master, once a
// slave holds it; the lease is checked last, right before the answer.
func (b *Broker) Send(ctx context.Context, msgs []proxy.Message) []proxy.SendResult {
	out := make([]proxy.SendResult, len(msgs))
	ready := make([]store.Message, 0, len(msgs))
	at := make([]int, 0, len(msgs)) // ready[k] is msgs[at[k]]
	for i := range msgs {
		m, err := b.grpcPrepare(ctx, &msgs[i])
		if err != nil {
			out[i].Err = err
			continue
		}
		ready = append(ready, m)
		at = append(at, i)
	}
	if len(ready) == 0 {
		return out
	}
	req := remoting.NewRequest(remoting.SendMessage, nil, nil)
	gen := b.durabilityGen() // before the rule is read (fromBucket)
	bucket := slices.ContainsFunc(at, func(i int) bool { return b.bucketTopic(msgs[i].Topic) })
	res, err := b.grpcPut(ready) // grpc_put.go: stored with the other sends of the moment
	var slaveErr error
	if err == nil && b.answerFromBucket(bucket, gen) {
		// Bucket-durable (one topic per request): once the WAL holds
		// them, instead of a slave (wire_wal.go).
		ch := make(chan error, 1)
		b.awaitWAL(res, func(e error) { ch <- e })
		if err = <-ch; err == nil {
			err = b.ackGate()
		}
	} else if err == nil {
		slaveErr = b.slaveAck(res)
		// Right before answering, after the slave's ack, as answerBatch
		// checks it: the lease may have lapsed during the store or the wait.
		err = b.ackGate()
	}
	for k, i := range at {
		m := &ready[k]
		if err != nil {
			out[i].Err = grpcRefusal(b.putError(req, err))
			continue
		}
		b.metrics.messagesIn(grpcCountedTopic(m), 1, len(m.Body))
		r := proxy.SendResult{Topic: m.Topic, QueueID: m.QueueID, QueueOffset: res[k].QueueOffset, PhysOffset: res[k].PhysOffset,
			MsgID: propOr(m.Properties, PropUniqKey)}
		if m.Topic == TimerTopic {
			if v, ok := propValue(m.Properties, PropTimerDeliverMs); ok {
				r.DeliverMs, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if slaveErr != nil {
			code := remoting.SlaveNotAvailable
			if errors.Is(slaveErr, ha.ErrSlaveTimeout) {
				code = remoting.FlushSlaveTimeout
			}
			r.Err = proxy.Errorf(code, "the message is stored but no slave acknowledged it: %v", slaveErr)
		}
		out[i] = r
	}
	return out
}

// grpcCountedTopic is the topic a stored message counts under in
// rocketmq_messages_in_total: its real topic for a timer or delay record
// (as the remoting send counts it), the half topic for a half.
func grpcCountedTopic(m *store.Message) string {
	if m.Topic == TimerTopic || m.Topic == ScheduleTopic {
		if t, ok := propValue(m.Properties, PropRealTopic); ok {
			return t
		}
	}
	return m.Topic
}

// grpcPrepare runs SEND_MESSAGE's checks and routing on one message and
// returns the record to store, or the refusal.
func (b *Broker) grpcPrepare(ctx context.Context, m *proxy.Message) (store.Message, error) {
	req := remoting.NewRequest(remoting.SendMessage, nil, m.Body)
	h := remoting.SendMessageRequestHeader{Topic: m.Topic, DefaultTopic: DefaultTopic, QueueID: m.QueueID,
		SysFlag: m.SysFlag, BornTimestamp: m.BornTimestamp, Flag: m.Flag, Properties: m.Properties}
	tc, resp := b.prepareSend(req, &h)
	if resp != nil {
		return store.Message{}, grpcRefusal(resp)
	}
	if len(m.Body) == 0 {
		return store.Message{}, proxy.Errorf(remoting.MessageIllegal, "the message body is empty")
	}
	if len(m.Body) > int(b.cfg.MaxMessageSize) {
		return store.Message{}, proxy.Errorf(remoting.MessageIllegal, "the message body size %d exceeds the limit %d bytes (STRATAMQ_MAX_MESSAGE_SIZE)", len(m.Body), b.cfg.MaxMessageSize)
	}
	props := h.Properties
	if uniq, ok := propValue(props, PropUniqKey); !ok || uniq == "" {
		props, _ = b.uniq.appendNextProp(props)
	}
	topic, queueID := tc.TopicName, h.QueueID
	if strings.HasPrefix(topic, RetryGroupTopicPrefix) {
		var r *remoting.Command
		if topic, queueID, r = b.retryOrDLQ(req, topic, queueID, 0, 0); r != nil {
			return store.Message{}, grpcRefusal(r)
		}
	}
	sysFlag := h.SysFlag
	if sysFlag&sysFlagTransMask == sysFlagTransPrep {
		topic, queueID, props, sysFlag = b.halfMessage(topic, queueID, props, sysFlag)
	}
	tags, _ := propValue(props, PropTags)
	msg := store.Message{
		Topic: topic, QueueID: queueID, Flag: h.Flag, SysFlag: sysFlag,
		BornTimestamp: h.BornTimestamp, BornHost: m.BornHost, Body: m.Body, Properties: props,
		TagsCode: tagsCode(tags),
	}
	if r := b.scheduleSend(ctx, req, &msg); r != nil {
		return store.Message{}, grpcRefusal(r)
	}
	if err := b.writeGate(ctx, msg.Topic, msg.QueueID); err != nil {
		return store.Message{}, grpcRefusal(b.putError(req, err))
	}
	if err := b.store.Validate(&msg); err != nil {
		return store.Message{}, grpcRefusal(b.putError(req, err))
	}
	return msg, nil
}

// EndTransaction implements proxy.Backend as END_TRANSACTION does
// (endTransaction): the half is read through the store (local or bucket),
// must be a half of the producer group at that half queue offset, and is
// committed (re-stored in its real topic, its delay or timer applied now)
// or rolled back, with its op record, at most once.
func (b *Broker) EndTransaction(ctx context.Context, e proxy.EndTransaction, allow func(topic string) error) error {
	if b.cfg.Role == RoleSlave || b.cfg.BrokerID != 0 {
		return proxy.Errorf(remoting.SlaveNotAvailable, "the broker[%s] is a slave: end transaction is forbidden", b.advertise)
	}
	if err := b.trans.CatchUp(ctx); err != nil {
		return proxy.Errorf(remoting.SystemError, "read the transaction op log: %v", err)
	}
	_, rec, err := b.trans.ReadHalf(ctx, e.PhysOffset)
	if err != nil {
		return proxy.Errorf(remoting.SystemError, "Find prepared transaction message failed: commitlog offset %d: %v", e.PhysOffset, err)
	}
	if rec.Topic != TransHalfTopic {
		// Not naming what is there: the caller chose the offset.
		return proxy.Errorf(remoting.SystemError, "Find prepared transaction message failed: the record at commitlog offset %d is not a half message", e.PhysOffset)
	}
	// The caller's permission on the half's topic first: the remarks
	// below say more of the half.
	if real, _ := propValue(rec.Properties, PropRealTopic); allow != nil {
		if err := allow(real); err != nil {
			return err
		}
	}
	if pg, _ := propValue(rec.Properties, PropProducerGroup); pg != e.ProducerGroup {
		return proxy.Errorf(remoting.SystemError, "The producer group wrong: the half message is of group %q", pg)
	}
	if uniq, _ := propValue(rec.Properties, PropUniqKey); e.MsgID != "" && uniq != e.MsgID {
		return proxy.Errorf(remoting.SystemError, "the half message at commitlog offset %d is message %s, not %s", e.PhysOffset, uniq, e.MsgID)
	}
	if rec.QueueOffset != e.HalfOffset {
		return proxy.Errorf(remoting.SystemError, "The transaction state table offset wrong: the half message is at %d", rec.QueueOffset)
	}
	half := rec.QueueOffset
	if !b.trans.Claim(half) {
		b.log.Debug("gRPC EndTransaction for a half message already resolved or being resolved: ignored",
			"producerGroup", e.ProducerGroup, "halfOffset", half, "commit", e.Commit)
		return nil
	}
	req := remoting.NewRequest(remoting.EndTransaction, nil, nil)
	msgs := make([]store.Message, 0, 2)
	if e.Commit {
		m, err := txn.Committed(rec, e.PhysOffset)
		if err != nil {
			b.trans.Unclaim(half)
			return proxy.Errorf(remoting.SystemError, "%s", err.Error())
		}
		if r := b.scheduleRoute(req, &m); r != nil {
			b.trans.Unclaim(half)
			return grpcRefusal(r)
		}
		msgs = append(msgs, m)
	}
	msgs = append(msgs, b.trans.OpMessage(half))
	if resp := b.storeEnd(ctx, nil, req, msgs, half); resp != nil && resp.Code != int32(remoting.Success) {
		return grpcRefusal(resp)
	}
	return nil
}

// grpcCheck hands the check of the half put back at res (props are its
// properties) to a gRPC producer of its real topic, when the gRPC endpoint
// runs and has one; true when handed over.
func (b *Broker) grpcCheck(ctx context.Context, group string, props map[string]string, res store.PutResult) bool {
	if b.grpc.CheckTransaction == nil {
		return false
	}
	raw, err := b.readRecord(ctx, res.PhysOffset)
	if err != nil {
		return false
	}
	rec, _, err := store.DecodeRecord(raw)
	if err != nil {
		return false
	}
	qid, _ := strconv.Atoi(props[PropRealQueueID])
	ok := b.grpc.CheckTransaction(proxy.OrphanedTransaction{
		ProducerGroup: group, Topic: props[PropRealTopic], QueueID: int32(qid),
		Record: rec, PhysOffset: res.PhysOffset, HalfOffset: res.QueueOffset,
	})
	if ok {
		b.log.Debug("transaction checked back over gRPC", "producerGroup", group, "msgId", props[PropUniqKey],
			"halfOffset", res.QueueOffset)
	}
	return ok
}
