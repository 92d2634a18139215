package broker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// PULL_MESSAGE sysFlag bits.
const (
	pullFlagCommitOffset = 0x1
	pullFlagSuspend      = 0x2
	pullFlagSubscription = 0x4
)

// maxPullBytes caps a pull response body well under the 16 MiB frame limit
// of Java clients; one message larger than this is still sent alone.
const maxPullBytes = 4 << 20

// pullMessage handles PULL_MESSAGE (11). When nothing is there and the
// client allows suspension, the request is parked in pullHold and answered
// later (nil is returned now).
func (b *Broker) pullMessage(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	return b.doPull(ctx, c, req, nil)
}

// doPull runs a pull as it arrives (held nil) or again, once woken from
// pullHold (held is its hold).
func (b *Broker) doPull(ctx context.Context, c *remoting.Conn, req *remoting.Command, held *heldPull) *remoting.Command {
	allowHold := held == nil
	var h remoting.PullMessageRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	if r := badTopicAndGroup(req, h.Topic, h.ConsumerGroup); r != nil {
		return r
	}
	tc, ok := b.topics.Get(h.Topic)
	if !ok {
		return errResponse(req, remoting.TopicNotExist, fmt.Sprintf("topic[%s] not exist, apply first please!", h.Topic))
	}
	if tc.Perm&PermRead == 0 {
		return errResponse(req, remoting.NoPermission, fmt.Sprintf("the topic[%s] pulling message is forbidden", h.Topic))
	}
	if h.QueueID < 0 || h.QueueID >= tc.ReadQueueNums {
		return errResponse(req, remoting.SystemError, fmt.Sprintf("queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d]", h.QueueID, h.Topic, tc.ReadQueueNums))
	}
	g := b.groups.GetOrCreate(h.ConsumerGroup)
	if !g.ConsumeEnable {
		return errResponse(req, remoting.NoPermission, "subscription group no permission, "+h.ConsumerGroup)
	}
	sub, r := b.pullSubscription(req, &h) // sql_filter.go
	if r != nil {
		return r
	}
	// The offset a pull carries is committed when the pull arrives, never
	// when a held pull is run again (allowHold false): by then the client
	// may have committed past it, and the old value would move the group
	// back (RocketMQ commits only when the broker may still suspend).
	if allowHold && h.SysFlag&pullFlagCommitOffset != 0 && b.cfg.BrokerID == 0 && h.CommitOffset >= 0 {
		b.offsets.Commit(h.ConsumerGroup, h.Topic, h.QueueID, h.CommitOffset)
	}
	maxMsgs := int(h.MaxMsgNums)
	if maxMsgs <= 0 {
		maxMsgs = 32
	}
	var filter func(int64) bool
	if !sub.MatchAll() {
		filter = sub.Match
	}
	// A sync_master's consumers read only what a slave holds (readBound):
	// the queue ends, for them, at the first record past the bound.
	res, err := b.getQueue(ctx, store.GetRequest{Topic: h.Topic, QueueID: h.QueueID, Offset: h.QueueOffset,
		MaxMsgs: maxMsgs, MaxBytes: maxPullBytes, Filter: filter, Match: sub.RecordMatch(), MaxPhys: b.readBoundOf(h.Topic)})
	if err != nil {
		b.log.Error("store get failed", "topic", h.Topic, "queue", h.QueueID, "offset", h.QueueOffset, "err", err)
		return errResponse(req, remoting.SystemError, "store get failed: "+err.Error())
	}
	code := pullCode(res.Status, h.QueueOffset)
	// Park only at the end of the queue: a hole in it (OffsetFoundNull,
	// e.g. queue offsets reserved across an unclean restore) will not fill
	// up, so the client is sent past it at once.
	// A held pull woken by a dispatch that stops at a hidden record waits
	// on for the bound, within its hold (see pullHold.rerun).
	atEnd := res.Status == store.OffsetOverflowOne || res.Status == store.NoMessageInQueue
	if code == remoting.PullNotFound && atEnd && h.SysFlag&pullFlagSuspend != 0 && !b.stopping() {
		switch {
		case allowHold:
			hold := time.Duration(h.SuspendTimeoutMillis) * time.Millisecond
			if hold <= 0 || hold > b.cfg.MaxHold {
				hold = b.cfg.MaxHold
			}
			if b.hold.park(c, req, h.Topic, h.QueueID, h.QueueOffset, sub, time.Now().Add(hold), res.HeldBack) {
				return nil
			}
		case res.HeldBack > 0 && time.Now().Before(held.deadline):
			if b.hold.park(c, req, h.Topic, h.QueueID, h.QueueOffset, sub, held.deadline, res.HeldBack) {
				return nil
			}
		}
	}
	if b.sqlRepark(c, req, &h, sub, res, held) { // sql_filter.go
		return nil
	}
	resp := remoting.NewResponse(req, code, "")
	resp.ExtFields = map[string]string{
		"nextBeginOffset":      strconv.FormatInt(res.NextBeginOffset, 10),
		"minOffset":            strconv.FormatInt(res.MinOffset, 10),
		"maxOffset":            strconv.FormatInt(res.MaxOffset, 10),
		"suggestWhichBrokerId": strconv.FormatInt(b.suggestBroker(g, res), 10), // read_suggest.go
	}
	if code == remoting.Success {
		resp.BodyParts = res.Records
		if res.Chunks != nil {
			resp.BodyParts = res.Chunks // the same bytes in fewer parts: fewer iovecs
		}
		b.metrics.messagesOut(h.Topic, len(res.Records), res.Bytes)
	}
	return resp
}

// pullCode maps a store status to the response code (§4.3).
func pullCode(s store.GetStatus, offset int64) remoting.ResponseCode {
	switch s {
	case store.Found:
		return remoting.Success
	case store.NoMatchedMessage, store.MessageWasRemoving:
		return remoting.PullRetryImmediately
	case store.NoMessageInQueue:
		if offset != 0 {
			return remoting.PullOffsetMoved
		}
		return remoting.PullNotFound
	case store.OffsetTooSmall, store.OffsetOverflowBadly:
		return remoting.PullOffsetMoved
	case store.OffsetOverflowOne, store.OffsetFoundNull:
		return remoting.PullNotFound
	}
	return remoting.SystemError
}
