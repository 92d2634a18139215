package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/stratamq/stratamq/broker/msgprop"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// roundLimit bounds one round (RocketMQ's MAX_QUEUE_PROCESS_TIME).
const roundLimit = 60 * time.Second

// Round walks the half queue from HalfOffset, as
// TransactionalMessageServiceImpl.check does, and asks about every half in
// doubt it meets. A half with an op record, or below HalfOffset (resolved
// meanwhile: an END_TRANSACTION or the round's own check moved HalfOffset
// over it), is passed. One checked Config.CheckMax times is discarded
// (logged). Any other half older than Config.Timeout (or its
// CHECK_IMMUNITY_TIME_IN_SECONDS) is due: it is put back at the end of the
// half queue with TRANSACTION_CHECK_TIMES one higher, together with an op
// record for the old copy, and the producer group is asked about the new
// copy (CHECK_TRANSACTION_STATE). The walk passes over a half an
// END_TRANSACTION is resolving now and one still young by its own
// CHECK_IMMUNITY_TIME_IN_SECONDS, and goes on; it stops at a half stored
// during this round (a copy it put back: so the answer to the last check
// has one interval to arrive before its half is discarded) and at one
// younger than Config.Timeout (the halves after it are younger still).
// HalfOffset then moves to where the walk stopped, or to the first half it
// passed over unresolved. The check is idempotent: a round repeated after
// a restart from an older checkpoint finds the op records of the halves it
// put back.
func (t *Service) Round(ctx context.Context) error {
	s := t.deps.Store
	if s.MaxQueueOffset(HalfTopic, 0) == 0 {
		return nil
	}
	if err := t.syncOps(ctx); err != nil {
		return err
	}
	n := t.rounds.Add(1)
	t.mu.Lock()
	i := t.state.HalfOffset
	t.mu.Unlock()
	// held is the first half passed over unresolved (-1: none):
	// HalfOffset may not pass it.
	held := int64(-1)
	hold := func(q int64) {
		if held < 0 {
			held = q
		}
	}
	defer func() {
		if held >= 0 {
			i = min(i, held)
		}
		t.advance(i)
	}()
	start := time.Now()
	startMs := start.UnixMilli()
	if t.hooks.OnRound != nil {
		t.hooks.OnRound(n, startMs)
	}
	timeout := t.cfg.Timeout.Milliseconds()
	for time.Since(start) < roundLimit && ctx.Err() == nil && !t.closed.Load() {
		res, err := s.Get(ctx, store.GetRequest{Topic: HalfTopic, QueueID: 0, Offset: i, MaxMsgs: 32})
		if err != nil {
			return err
		}
		if res.Status != store.Found {
			if res.NextBeginOffset > i && res.Status != store.OffsetOverflowBadly {
				i = res.NextBeginOffset // expired by retention, or a hole
				continue
			}
			return nil
		}
		for _, raw := range res.Records {
			rec, _, err := store.DecodeRecord(raw)
			if err != nil {
				return err
			}
			q := rec.QueueOffset
			if q < i {
				continue
			}
			done, pending := t.status(q)
			if done {
				i = q + 1
				continue
			}
			if pending {
				hold(q) // an END_TRANSACTION is resolving it
				i = q + 1
				continue
			}
			if rec.StoreTimestamp >= startMs {
				return nil // put back by this round (or just sent): next round
			}
			props := msgprop.Parse(rec.Properties)
			checks, _ := strconv.Atoi(props[PropCheckTimes])
			if checks >= t.cfg.CheckMax {
				t.log.Warn("transaction discarded: its producer group did not commit or roll it back within the most checks (STRATAMQ_TRANSACTION_CHECK_MAX)",
					"producerGroup", props[msgprop.ProducerGroup], "topic", props[msgprop.RealTopic], "msgId", props[msgprop.UniqKey],
					"halfOffset", q, "checks", checks)
				t.discard(q)
				i = q + 1
				continue
			}
			immunity, own := timeout, false
			if v, ok := props[PropCheckImmunitySeconds]; ok {
				if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
					immunity, own = s*1000, true
				}
			}
			if age := time.Now().UnixMilli() - rec.BornTimestamp; age >= 0 && age < immunity {
				if !own {
					return nil // too young: the producer may still end it, and so the ones after it
				}
				hold(q) // young by its own immunity: the ones after it may be due
				i = q + 1
				continue
			}
			if t.resolvedWithoutOp(ctx, &rec, props, checks) {
				if err := t.repairOp(ctx, q); err != nil {
					return err
				}
				t.log.Info("transaction half resolved by a commit or check copy stored without its op record (a torn write, or a restore); its op record is written, it is not checked",
					"producerGroup", props[msgprop.ProducerGroup], "msgId", props[msgprop.UniqKey], "halfOffset", q)
				i = q + 1
				continue
			}
			if !t.Claim(q) {
				// Resolved meanwhile (passed), or an END_TRANSACTION holds it.
				if done, _ := t.status(q); !done {
					hold(q)
				}
				i = q + 1
				continue
			}
			if t.hooks.OnCheck != nil {
				t.hooks.OnCheck(n, q)
			}
			if err := t.checkBack(ctx, rec, props, checks+1); err != nil {
				t.Unclaim(q)
				return err
			}
			i = q + 1
		}
	}
	return nil
}

// resolvedWithoutOp reports whether the half rec, with no op record, was
// resolved by records stored without the op record stored in the same
// call (a torn write at a power loss; a segment boundary between them and
// a restore from the bucket): its commit (PREPARED offset its commitlog
// offset, in its real topic or, delayed, a delay topic) or its copy put
// back for check checks+1. They are found through the key index by
// UNIQ_KEY; one not found (lost too) leaves the half in doubt, checked.
func (t *Service) resolvedWithoutOp(ctx context.Context, rec *store.Record, props map[string]string, checks int) bool {
	uniq := props[msgprop.UniqKey]
	if uniq == "" {
		return false
	}
	topics := make([]string, 0, 2+len(t.cfg.DelayTopics))
	topics = append(topics, props[msgprop.RealTopic])
	topics = append(topics, t.cfg.DelayTopics...)
	topics = append(topics, HalfTopic)
	for _, topic := range topics {
		if topic == "" {
			continue
		}
		if !t.deps.Topics.Exists(topic) {
			continue
		}
		res, err := t.deps.Store.QueryByKey(ctx, store.KeyQuery{Topic: topic, Key: uniq, UniqueKey: true, MaxNum: 32,
			Begin: rec.StoreTimestamp, End: math.MaxInt64})
		if err != nil {
			t.log.Warn("transaction check: could not look for a commit stored without its op record", "err", err, "halfOffset", rec.QueueOffset)
			return false
		}
		for _, raw := range res.Records {
			r, _, err := store.DecodeRecord(raw)
			if err != nil || r.PhysOffset <= rec.PhysOffset || r.BornTimestamp != rec.BornTimestamp {
				continue
			}
			if topic != HalfTopic {
				if r.PreparedTransactionOffset == rec.PhysOffset && r.SysFlag&SysFlagMask == SysFlagCommit {
					return true
				}
				continue
			}
			if n, _ := msgprop.Value(r.Properties, PropCheckTimes); n == strconv.Itoa(checks+1) {
				return true
			}
		}
	}
	return false
}

// checkBack puts the half rec (claimed by the caller) back at the end of the
// half queue as its check number n, with the op record that resolves rec,
// and asks one live producer of its group about the new copy.
func (t *Service) checkBack(ctx context.Context, rec store.Record, props map[string]string, n int) error {
	cp := store.Message{
		Topic: HalfTopic, QueueID: 0, Flag: rec.Flag, SysFlag: rec.SysFlag,
		BornTimestamp: rec.BornTimestamp, BornHost: rec.BornHost, ReconsumeTimes: rec.ReconsumeTimes,
		Body:       rec.Body,
		Properties: msgprop.With(rec.Properties, PropCheckTimes, strconv.Itoa(n)),
		TagsCode:   tagsCode(props[msgprop.Tags]),
	}
	if err := t.deps.Store.Validate(&cp); errors.Is(err, store.ErrMessageTooLarge) {
		// Accepted before halves kept room for their check copies (or
		// under a larger limit): it can never be put back, so it is
		// discarded rather than stop every round here.
		res, err := t.deps.Writer.WriteTrans(ctx, []store.Message{t.OpMessage(rec.QueueOffset)})
		if err != nil {
			return err
		}
		t.Resolved(rec.QueueOffset, res[0].QueueOffset)
		t.log.Warn("transaction discarded: its half message is too large to be put back for a check (STRATAMQ_MAX_MESSAGE_SIZE)",
			"producerGroup", props[msgprop.ProducerGroup], "topic", props[msgprop.RealTopic], "msgId", props[msgprop.UniqKey],
			"halfOffset", rec.QueueOffset, "err", err)
		return nil
	}
	res, err := t.deps.Writer.WriteTrans(ctx, []store.Message{cp, t.OpMessage(rec.QueueOffset)})
	if err != nil {
		return err
	}
	t.Resolved(rec.QueueOffset, res[1].QueueOffset)
	group := props[msgprop.ProducerGroup]
	conn := t.deps.Producers.Conn(group)
	if conn == nil && t.deps.Producers.CheckGRPC(ctx, group, props, res[0]) {
		return nil
	}
	if conn == nil {
		t.log.Info("transaction check not sent: no live producer of the group; asked again next interval",
			"producerGroup", group, "msgId", props[msgprop.UniqKey], "halfOffset", res[0].QueueOffset, "check", n)
		return nil
	}
	raw, err := t.deps.Store.ReadRecordContext(ctx, res[0].PhysOffset)
	if err != nil {
		return err
	}
	sent, _, err := store.DecodeRecord(raw)
	if err != nil {
		return err
	}
	qid, _ := strconv.Atoi(props[msgprop.RealQueueID])
	uniq := props[msgprop.UniqKey]
	hdr := remoting.CheckTransactionStateRequestHeader{
		TranStateTableOffset: res[0].QueueOffset, CommitLogOffset: res[0].PhysOffset,
		MsgID: uniq, TransactionID: uniq, OffsetMsgID: store.EncodeMessageID(t.cfg.StoreHost, res[0].PhysOffset),
	}
	req := remoting.NewRequest(remoting.CheckTransactionState, hdr.Encode(), withTopic(raw, len(sent.Topic), len(sent.Properties), props[msgprop.RealTopic], int32(qid)))
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := conn.InvokeOneway(cctx, req); err != nil {
		t.log.Info("transaction check not sent; asked again next interval", "producerGroup", group, "err", err)
		return nil
	}
	t.log.Debug("transaction checked back", "producerGroup", group, "msgId", uniq, "halfOffset", res[0].QueueOffset,
		"commitLogOffset", res[0].PhysOffset, "check", n)
	return nil
}

// withTopic returns a copy of the V1 record raw (topic of topicLen bytes,
// properties of propsLen bytes) with its topic and queue id replaced, as
// Broker2Client.checkProducerTransactionState sends the half: under its
// real topic and queue.
func withTopic(raw []byte, topicLen, propsLen int, topic string, queueID int32) []byte {
	at := len(raw) - (1 + topicLen + 2 + propsLen)
	out := make([]byte, 0, len(raw)-topicLen+len(topic))
	out = append(out, raw[:at]...)
	out = append(out, byte(len(topic)))
	out = append(out, topic...)
	out = append(out, raw[at+1+topicLen:]...)
	binary.BigEndian.PutUint32(out[0:], uint32(len(out)))
	binary.BigEndian.PutUint32(out[12:], uint32(queueID))
	return out
}
