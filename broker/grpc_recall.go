package broker

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Recalling a timer message (RocketMQ 5's RecallMessage, issue 16).
//
// A recall is a marker record in RecallTopic queue 0: body the recalled
// message's UNIQ_KEY, property RECALL_TOPIC its real topic,
// TIMER_DELIVER_MS its due time. The scheduler asks recalled (schedWire.Recalled)
// before it moves a timer record on, a hop or the delivery, and drops a
// recalled one: a marker matches a message of its topic with its id only
// (the clients choose message ids: one account's recall of its own
// message cannot drop another's of the same id on another topic). A
// marker written before markers named their topic (no RECALL_TOPIC)
// matches the id on any topic, as it did. Clients cannot send to
// RecallTopic (nor to any system topic: remoting.IsNotAllowedSendTopic);
// only Recall writes markers, after RecallMessage checked PUB on the
// message's topic. The markers are the
// durable state: a restarted broker, a restored one or a promoted slave
// reads them from the log (they are replicated and tiered like any
// record), so no other state is checkpointed. Markers of messages due more
// than recallKeep ago are forgotten.
const (
	RecallTopic = "rmq_sys_stratamq_recall"
	// recallMargin: a message due sooner than this is not recalled (the
	// scheduler may be delivering it now).
	recallMargin = 500 * time.Millisecond
	recallKeep   = time.Hour
	propRecalled = "RECALL_UNIQ_KEY"
	// propRecallTopic is a marker's real topic.
	propRecallTopic = "RECALL_TOPIC"
)

// recallKey is the recalls key of message uniq of topic ("" topic: a
// marker that names none).
func recallKey(topic, uniq string) string { return topic + "\x00" + uniq }

// recalls is the set of recalled messages (recallKey → due time), read
// from the recall topic up to scanned.
type recalls struct {
	mu      sync.Mutex
	keys    map[string]int64
	scanned int64
}

// recalls is b's recall set (the field recall; its map made on first use).
func (b *Broker) recalls() *recalls { return &b.recall }

// syncRecalls reads markers stored since the last sync (O(1) when none).
func (b *Broker) syncRecalls(ctx context.Context) error {
	r := b.recalls()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[string]int64{}
	}
	mx := b.store.MaxQueueOffset(RecallTopic, 0)
	if r.scanned < b.store.MinQueueOffset(RecallTopic, 0) {
		r.scanned = b.store.MinQueueOffset(RecallTopic, 0)
	}
	for r.scanned < mx {
		res, err := b.store.Get(ctx, store.GetRequest{Topic: RecallTopic, QueueID: 0, Offset: r.scanned, MaxMsgs: store.MaxGetMsgs})
		if err != nil {
			return err
		}
		for _, raw := range res.Records {
			rec, _, err := store.DecodeRecord(raw)
			if err != nil {
				return err
			}
			due, _ := strconv.ParseInt(propOr(rec.Properties, PropTimerDeliverMs), 10, 64)
			r.keys[recallKey(propOr(rec.Properties, propRecallTopic), string(rec.Body))] = due
		}
		if res.NextBeginOffset <= r.scanned {
			break
		}
		r.scanned = res.NextBeginOffset
	}
	old := time.Now().Add(-recallKeep).UnixMilli()
	for k, due := range r.keys {
		if due < old {
			delete(r.keys, k)
		}
	}
	return nil
}

func propOr(props, key string) string {
	v, _ := propValue(props, key)
	return v
}

// recalled reports whether the timer record rec was recalled (the
// scheduler drops it). A failure to read the markers keeps the record.
func (b *Broker) recalled(rec *store.Record) bool {
	if rec.Topic != TimerTopic {
		return false
	}
	uniq, ok := propValue(rec.Properties, PropUniqKey)
	if !ok || uniq == "" {
		return false
	}
	if b.store.MaxQueueOffset(RecallTopic, 0) == 0 {
		return false
	}
	if err := b.syncRecalls(context.Background()); err != nil {
		b.log.Warn("recall markers unreadable; the timer message is delivered", "err", err, "msgId", uniq)
		return false
	}
	topic := propOr(rec.Properties, PropRealTopic)
	r := b.recalls()
	r.mu.Lock()
	_, gone := r.keys[recallKey(topic, uniq)]
	if !gone {
		_, gone = r.keys[recallKey("", uniq)] // a marker of before RECALL_TOPIC
	}
	r.mu.Unlock()
	if gone {
		b.log.Info("recalled timer message dropped", "msgId", uniq, "topic", topic)
	}
	return gone
}

// Recall implements proxy.Backend: the timer record r names (read at its
// commitlog offset, local or from the bucket) must be a timer message of
// r.RealTopic with UNIQ_KEY r.MsgID, due later than recallMargin from now;
// its marker is stored (acknowledged as a send is) before Recall returns.
func (b *Broker) Recall(ctx context.Context, r proxy.Recall) error {
	if b.cfg.Role == RoleSlave || b.cfg.BrokerID != 0 {
		return proxy.Errorf(remoting.NoPermission, "the broker[%s] is a slave and refuses writes", b.advertise)
	}
	raw, err := b.store.ReadRecordContext(ctx, r.PhysOffset)
	if err != nil {
		return proxy.Errorf(remoting.QueryNotFound, "no timer message at the recall handle's offset: %v", err)
	}
	rec, _, err := store.DecodeRecord(raw)
	if err != nil {
		return proxy.Errorf(remoting.SystemError, "read the timer message: %v", err)
	}
	if rec.Topic != TimerTopic || propOr(rec.Properties, PropUniqKey) != r.MsgID || propOr(rec.Properties, PropRealTopic) != r.RealTopic {
		return proxy.Errorf(remoting.QueryNotFound, "the recall handle names no timer message %s of topic %s", r.MsgID, r.RealTopic)
	}
	due, _ := strconv.ParseInt(propOr(rec.Properties, PropTimerDeliverMs), 10, 64)
	if due-time.Now().UnixMilli() < recallMargin.Milliseconds() {
		return proxy.Errorf(remoting.QueryNotFound, "message %s is due (or delivered) already: it can no longer be recalled", r.MsgID)
	}
	if _, created := b.topics.CreateSystemTopic(RecallTopic, 1, PermRead|PermWrite); created {
		b.requestRegister()
	}
	m := store.Message{Topic: RecallTopic, QueueID: 0, BornTimestamp: time.Now().UnixMilli(), BornHost: b.storeHost,
		Body: []byte(r.MsgID),
		Properties: PropTimerDeliverMs + string(nameValueSep) + strconv.FormatInt(due, 10) + string(propertySep) +
			propRecalled + string(nameValueSep) + r.MsgID + string(propertySep) +
			propRecallTopic + string(nameValueSep) + r.RealTopic + string(propertySep)}
	if err := b.writeGate(ctx, RecallTopic, 0); err != nil {
		return grpcRefusal(b.putError(remoting.NewRequest(remoting.SendMessage, nil, nil), err))
	}
	res, err := b.store.Put(ctx, []store.Message{m})
	if err == nil {
		err = b.slaveAck(res)
	}
	if err == nil {
		err = b.ackGate() // after the slave's ack: right before answering
	}
	if err != nil {
		return grpcRefusal(b.putError(remoting.NewRequest(remoting.SendMessage, nil, nil), err))
	}
	return b.syncRecalls(ctx)
}
