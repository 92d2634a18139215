package broker

import (
	"context"
	"slices"
	"sync"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// sendAck is what the response to a send needs once its messages are
// stored: it waits with them for the end of the read batch (EndBatch) and,
// with flush=sync, for the fdatasync.
type sendAck struct {
	req     *remoting.Command
	topic   string
	queueID int32
	n       int // messages of the request
	bodyLen int
	txID    string // single sends: the transactionId (the message's UNIQ_KEY)
	batch   bool   // SEND_BATCH_MESSAGE: msgId lists every message
	// bucket: answered once the bucket WAL holds it (bucketTopic of the
	// topic the producer named, not of a half, retry or schedule topic it
	// is stored in: wire_wal.go durabilityTopic).
	bucket bool
	// durTopic is the topic bucket was judged for, durGen the durability
	// rule's generation read before (fromBucket).
	durTopic string
	durGen   uint64
}

// response builds the success response for a's messages, stored as res.
func (b *Broker) ackResponse(a *sendAck, res []store.PutResult) *remoting.Command {
	return b.fillAck(newSendResponse(a.req), a, res)
}

// fillAck makes r the success response for a's messages, stored as res.
func (b *Broker) fillAck(r *sendResponse, a *sendAck, res []store.PutResult) *remoting.Command {
	b.metrics.messagesIn(a.topic, a.n, a.bodyLen)
	r.hdr = sendResponseHeader{storeHost: b.storeHost, phys: res[0].PhysOffset, queueID: a.queueID,
		queueOffset: res[0].QueueOffset}
	if a.batch {
		r.hdr.batch = res
	} else {
		r.hdr.txID, r.hdr.hasTxID = a.txID, true
	}
	r.cmd.Version = Version
	return &r.cmd
}

// storeAndAck stores msgs and acknowledges them per the flush mode.
//
// Served inline within a connection's read batch (the usual case), the
// messages only join the batch and nil is returned: EndBatch stores every
// send that arrived together with one store call (one pwrite, one
// dispatch pass) and answers each. Otherwise, with flush=async the
// response is returned once the records are written; with flush=sync the
// store calls back after the group commit's fdatasync covers them and the
// response is written then (nil is returned now), so no goroutine is
// parked per request.
//
// msgs may alias req.Body: the store copies them into the log before the
// request's frame is recycled (after EndBatch, or when the handler
// returns), and the response never refers to the body.
func (b *Broker) storeAndAck(ctx context.Context, c *remoting.Conn, msgs []store.Message, a sendAck) *remoting.Command {
	if err := b.writeGate(ctx, a.topic, a.queueID); err != nil {
		return b.putError(a.req, err)
	}
	if err := b.walGateFor(ctx, &a); err != nil {
		return b.putError(a.req, err)
	}
	if rb := remoting.ReadBatchFrom(ctx); rb != nil {
		return b.joinBatch(rb, a, msgs...)
	}
	if b.cfg.Flush != "sync" {
		hm := b.holdHANotify()
		res, err := b.store.Put(ctx, msgs)
		b.pushHA(hm)
		if err == nil && b.fromBucket(&a) {
			return b.ackAfterWAL(c, &a, res)
		}
		var slaveErr error
		if err == nil {
			slaveErr = b.slaveAck(res)
			err = b.ackGate() // after the slave's ack: right before answering
		}
		if err != nil {
			return b.putError(a.req, err)
		}
		return b.slaveResult(b.ackResponse(&a, res), slaveErr)
	}
	// The callback runs either before PutNotify returns (on this goroutine:
	// an early error, or already durable) or later on the flusher's.
	ans := &laterReply{c: c, req: a.req}
	b.store.PutNotify(msgs, func(res []store.PutResult, err error) {
		if err == nil && b.fromBucket(&a) {
			b.awaitWAL(res, func(err error) {
				if err == nil {
					err = b.ackGate()
				}
				if err != nil {
					ans.finish(b.putError(a.req, err))
					return
				}
				ans.finish(b.ackResponse(&a, res))
			})
			return
		}
		if err == nil {
			err = b.ackGate()
		}
		switch {
		case err != nil:
			ans.finish(b.putError(a.req, err))
		case b.cfg.Role == RoleSyncMaster:
			// Settled on the flusher's goroutine or the HA report
			// reader's; finish queues the answer without blocking.
			b.awaitSlave(res, func(slaveErr error) {
				if err := b.ackGate(); err != nil { // the lease may have lapsed during the wait
					ans.finish(b.putError(a.req, err))
					return
				}
				ans.finish(b.slaveResult(b.ackResponse(&a, res), slaveErr))
			})
		default:
			ans.finish(b.ackResponse(&a, res))
		}
	})
	return ans.returned()
}

// laterReply answers a request whose result may come before its handler
// returns (then the handler returns it) or after (then it is written to
// the connection): a store callback that ran at once, or one the flusher
// runs after the group commit.
type laterReply struct {
	c         *remoting.Conn // nil: an in-process call, only the immediate answer counts
	req       *remoting.Command
	mu        sync.Mutex
	done      bool // the handler returned
	immediate *remoting.Command
}

// finish delivers resp: to the handler if it has not returned yet, else
// to the connection.
func (r *laterReply) finish(resp *remoting.Command) {
	r.mu.Lock()
	if !r.done {
		r.immediate = resp
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	if r.c != nil {
		_ = r.c.Reply(r.req, resp)
	}
}

// returned is what the handler returns: the answer if finish already ran,
// else nil (it comes later).
func (r *laterReply) returned() *remoting.Command {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	return r.immediate
}

// sendBatch is a connection's sends of one read batch, waiting for
// EndBatch; it lives in the batch's Value and its slices are reused.
type sendBatch struct {
	msgs []store.Message
	acks []sendAck
	resp sendResponse // async answers are built here one at a time (queuing encodes them)
}

// storeOne is storeAndAck for one message; within a read batch it joins
// the batch without a slice of its own.
func (b *Broker) storeOne(ctx context.Context, c *remoting.Conn, msg *store.Message, a sendAck) *remoting.Command {
	if rb := remoting.ReadBatchFrom(ctx); rb != nil {
		if err := b.writeGate(ctx, a.topic, a.queueID); err != nil {
			return b.putError(a.req, err)
		}
		if err := b.walGateFor(ctx, &a); err != nil {
			return b.putError(a.req, err)
		}
		return b.joinBatch(rb, a, *msg)
	}
	return b.storeAndAck(ctx, c, []store.Message{*msg}, a)
}

// joinBatch adds a send to its connection's read batch (stored and
// answered by EndBatch), or answers at once when the store would refuse
// one of its messages.
func (b *Broker) joinBatch(rb *remoting.ReadBatch, a sendAck, msgs ...store.Message) *remoting.Command {
	for i := range msgs {
		if err := b.store.Validate(&msgs[i]); err != nil {
			return b.putError(a.req, err)
		}
	}
	sb := batchOf(rb)
	sb.msgs = append(sb.msgs, msgs...)
	sb.acks = append(sb.acks, a)
	return nil
}

func batchOf(rb *remoting.ReadBatch) *sendBatch {
	sb, _ := rb.Value.(*sendBatch)
	if sb == nil {
		sb = &sendBatch{}
		rb.Value = sb
	}
	return sb
}

// EndBatch implements remoting.BatchHandler: the sends served from one read
// batch are stored together, in arrival order, and each is answered (with
// flush=sync after the fdatasync that covers them all). The store call is
// not canceled with the connection: the requests arrived whole.
func (b *Broker) EndBatch(rb *remoting.ReadBatch) {
	sb, _ := rb.Value.(*sendBatch)
	if sb == nil || len(sb.acks) == 0 {
		return
	}
	c := rb.Conn
	// Cleared however this ends: a panic below must not leave the next
	// batch of this connection the requests (recycled after this batch)
	// and messages of this one.
	defer func() {
		clear(sb.msgs)
		clear(sb.acks)
		sb.msgs, sb.acks = sb.msgs[:0], sb.acks[:0]
		if cap(sb.msgs) > 4*maxBatchSends {
			sb.msgs = nil
		}
	}()
	if b.cfg.Flush != "sync" {
		hm := b.holdHANotify()
		res, err := b.store.Put(context.Background(), sb.msgs)
		b.pushHA(hm)
		if err == nil && b.hasBucketAck(sb.acks) {
			b.answerSplit(c, slices.Clone(sb.acks), res, rb.KeepInFlight())
		} else if err != nil || b.cfg.Role != RoleSyncMaster {
			b.answerBatch(c, sb.acks, res, err, nil, &sb.resp, false)
		} else {
			// The slave's ack answers the batch on the HA report reader
			// (or here, when it is known at once): the reader goes on
			// reading meanwhile, and no goroutine waits.
			b.answerOnSlaveAck(c, slices.Clone(sb.acks), res, new(sendResponse), rb.KeepInFlight())
		}
	} else {
		// Answered later, on the flusher's goroutine (or a slave's report
		// reader); Shutdown waits for the answers.
		acks, scratch, done := slices.Clone(sb.acks), new(sendResponse), rb.KeepInFlight()
		b.store.PutNotify(sb.msgs, func(res []store.PutResult, err error) {
			if err == nil && b.hasBucketAck(acks) {
				b.answerSplit(c, acks, res, done)
				return
			}
			if err != nil || b.cfg.Role != RoleSyncMaster {
				b.answerBatch(c, acks, res, err, nil, scratch, false)
				done()
				return
			}
			b.answerOnSlaveAck(c, acks, res, scratch, done)
		})
	}
}

// answerOnSlaveAck answers a stored batch once awaitSlave settles (on the
// HA report reader, its deadline timer, or at once here), without blocking
// on the client, then ends the batch's in-flight count (done).
func (b *Broker) answerOnSlaveAck(c *remoting.Conn, acks []sendAck, res []store.PutResult, scratch *sendResponse, done func()) {
	b.awaitSlave(res, func(slaveErr error) {
		b.answerBatch(c, acks, res, nil, slaveErr, scratch, true)
		done()
	})
}

// maxBatchSends is a send batch's usual size bound (remoting ends a read
// batch after 256 requests); larger message slices are not kept.
const maxBatchSends = 256

// answerBatch answers every send of a batch stored as res (or failed with
// err). With scratch, every success response is built in it in turn (the
// conn encodes a response when it is queued, so it can be reused at once);
// otherwise each gets its own. nowait: the caller must not block on the
// client (the HA report reader): the answers go out with one non-blocking
// write, the rest through the conn's writer.
func (b *Broker) answerBatch(c *remoting.Conn, acks []sendAck, res []store.PutResult, err, slaveErr error, scratch *sendResponse, nowait bool) {
	c.HoldWrites()
	if nowait {
		defer c.ReleaseWritesNoWait()
	} else {
		defer c.ReleaseWrites()
	}
	if err == nil {
		err = b.ackGate() // the lease may have lapsed while the batch was stored
	}
	var failed *remoting.Command
	i := 0
	for k := range acks {
		a := &acks[k]
		var resp *remoting.Command
		if err != nil {
			if failed == nil {
				failed = b.putError(a.req, err) // logs once per batch
			}
			resp = remoting.NewResponse(a.req, remoting.ResponseCode(failed.Code), failed.Remark)
			resp.Version = Version
		} else if scratch != nil {
			*scratch = sendResponse{cmd: sendResponseCmd(a.req)}
			scratch.cmd.Header = &scratch.hdr
			resp = b.fillAck(scratch, a, res[i:i+a.n])
		} else {
			resp = b.ackResponse(a, res[i:i+a.n])
		}
		if err == nil {
			resp = b.slaveResult(resp, slaveErr)
		}
		i += a.n
		_ = c.Reply(a.req, resp)
	}
}
