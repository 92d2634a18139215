package broker

import (
	"context"
	"fmt"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/broker/txn"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// endTransaction handles END_TRANSACTION (37), which clients send oneway:
// commit (8) or roll back (12) the half message at commitLogOffset, as
// EndTransactionProcessor does. The half is looked up through the store, so
// one whose segment left the local disk is read from the bucket. It must be
// a half message of producerGroup at half queue offset tranStateTableOffset
// (else SYSTEM_ERROR with RocketMQ's remark). A commit stores the real
// message and the op record in one store call; a rollback the op record
// only. State 0 (unknown) is ignored: the check service asks later. A half
// already resolved, or being resolved, is left alone (answered SUCCESS):
// each half is committed at most once.
func (b *Broker) endTransaction(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.EndTransactionRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, "END_TRANSACTION: "+err.Error())
	}
	if b.cfg.Role == RoleSlave || b.cfg.BrokerID != 0 {
		return errResponse(req, remoting.SlaveNotAvailable, fmt.Sprintf("the broker[%s] is a slave: end transaction is forbidden", b.advertise))
	}
	commit := false
	switch h.CommitOrRollback {
	case sysFlagTransCommit:
		commit = true
	case sysFlagTransRollback:
	default:
		// TRANSACTION_NOT_TYPE (unknown) and anything else: Java answers
		// nothing; the check service asks the producer again.
		b.log.Debug("END_TRANSACTION with state unknown: left to the check service", "producerGroup", h.ProducerGroup,
			"commitLogOffset", h.CommitLogOffset, "fromTransactionCheck", h.FromTransactionCheck, "remark", req.Remark)
		return nil
	}
	if err := b.trans.CatchUp(ctx); err != nil {
		return b.transErr(req, remoting.SystemError, "read the transaction op log: "+err.Error(), &h)
	}
	_, rec, err := b.trans.ReadHalf(ctx, h.CommitLogOffset)
	if err != nil {
		return b.transErr(req, remoting.SystemError, fmt.Sprintf("Find prepared transaction message failed: commitlog offset %d: %v", h.CommitLogOffset, err), &h)
	}
	if rec.Topic != TransHalfTopic {
		// Not naming what is there: the caller chose the offset.
		return b.transErr(req, remoting.SystemError, fmt.Sprintf("Find prepared transaction message failed: the record at commitlog offset %d is not a half message", h.CommitLogOffset), &h)
	}
	if b.cfg.ACL != nil || b.auth2On() {
		// Committing or rolling back a half message needs PUB on the topic
		// it is for (the header names none); checked before any remark
		// says more of the half.
		if real, _ := propValue(rec.Properties, PropRealTopic); real != "" {
			if r := b.checkStored(c, req, real, acl.Pub); r != nil {
				return r
			}
		}
	}
	if pg, _ := propValue(rec.Properties, PropProducerGroup); pg != h.ProducerGroup {
		return b.transErr(req, remoting.SystemError, fmt.Sprintf("The producer group wrong: the half message is of group %q", pg), &h)
	}
	if rec.QueueOffset != h.TranStateTableOffset {
		return b.transErr(req, remoting.SystemError, fmt.Sprintf("The transaction state table offset wrong: the half message is at %d", rec.QueueOffset), &h)
	}
	half := rec.QueueOffset
	if !b.trans.Claim(half) {
		b.log.Debug("END_TRANSACTION for a half message already resolved or being resolved: ignored",
			"producerGroup", h.ProducerGroup, "halfOffset", half, "commit", commit)
		return remoting.NewResponse(req, remoting.Success, "")
	}
	msgs := make([]store.Message, 0, 2)
	if commit {
		m, err := txn.Committed(rec, h.CommitLogOffset)
		if err != nil {
			b.trans.Unclaim(half)
			return b.transErr(req, remoting.SystemError, err.Error(), &h)
		}
		// A committed message's DELAY or timer applies now, as RocketMQ's
		// CommitLog.putMessage does for TRANSACTION_COMMIT_TYPE.
		if r := b.scheduleRoute(req, &m); r != nil {
			b.trans.Unclaim(half)
			return r
		}
		msgs = append(msgs, m)
	}
	msgs = append(msgs, b.trans.OpMessage(half))
	return b.storeEnd(ctx, c, req, msgs, half)
}

// storeEnd stores an END_TRANSACTION's records (the committed message and
// the op record, or the op record alone), ends the claim on half and
// answers. With flush=sync the answer goes out from the store's group
// commit callback (PutNotify), so no worker waits for the fdatasync; a
// sync_master does not wait for a slave (RocketMQ counts FLUSH_SLAVE_TIMEOUT
// as stored here too).
func (b *Broker) storeEnd(ctx context.Context, c *remoting.Conn, req *remoting.Command, msgs []store.Message, half int64) *remoting.Command {
	done := func(res []store.PutResult, err error) *remoting.Command {
		if err != nil {
			b.trans.Unclaim(half)
			b.log.Warn("END_TRANSACTION not stored", "err", err, "halfOffset", half, "commit", len(msgs) == 2)
			return b.putError(req, err)
		}
		b.trans.Resolved(half, res[len(res)-1].QueueOffset)
		if len(msgs) == 2 {
			b.metrics.messagesIn(msgs[0].Topic, 1, len(msgs[0].Body))
		}
		return remoting.NewResponse(req, remoting.Success, "")
	}
	if b.cfg.Flush != "sync" || c == nil {
		res, err := b.putTrans(ctx, msgs)
		return done(res, err)
	}
	for _, m := range msgs {
		if err := b.writeGate(ctx, m.Topic, m.QueueID); err != nil {
			return done(nil, err)
		}
	}
	// The callback runs either before PutNotify returns (an early error)
	// or later on the flusher's goroutine.
	ans := &laterReply{c: c, req: req}
	b.store.PutNotify(msgs, func(res []store.PutResult, err error) {
		if err == nil {
			err = b.ackGate()
		}
		if err == nil && len(res) != len(msgs) {
			err = fmt.Errorf("broker: the store stored %d of %d transaction records", len(res), len(msgs))
		}
		ans.finish(done(res, err))
	})
	return ans.returned()
}
