package pop

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Request is one receive.
type Request struct {
	Group, Topic string
	// QueueID < 0: any readable queue of the topic.
	QueueID int32
	// FilterType is "TAG" (or "") or "SQL92"; an empty expression or "*"
	// takes every message.
	FilterType, FilterExpression string
	// MaxMessages: at most this many (<= 0: 32; at most 1024).
	MaxMessages int
	// Invisible is how long the messages stay invisible (> 0, at most
	// MaxInvisible).
	Invisible time.Duration
	// FIFO: hold each queue while one of its messages is in flight.
	FIFO bool
	// MaxAttempts is how often a message is delivered before an expiry
	// dead-letters it; <= 0: the group's retryMaxTimes + 1.
	MaxAttempts int32
	// Wait: when nothing is there, wait up to this long for a message
	// (long polling; 0: answer at once).
	Wait time.Duration
	// Client is who receives (the gRPC client id), for the per-client
	// bound; empty: not counted per client.
	Client string
}

// Message is one delivered message.
type Message struct {
	Record store.Record // decoded from Raw (Body aliases it)
	Raw    []byte       // the whole stored record, byte-identical to the log
	Handle string       // receipt handle for Ack / ChangeInvisible
	// Attempt is the delivery attempt, 1 for the first delivery.
	Attempt int32
	// InvisibleUntil is when it becomes visible again unless acked.
	InvisibleUntil time.Time
}

// Receive delivers up to req.MaxMessages messages of req.Topic to
// req.Group and makes them invisible for req.Invisible. With req.Wait it
// waits that long for one (or ctx).
func (e *Engine) Receive(ctx context.Context, req Request) ([]Message, error) {
	if e.cfg.Slave {
		return nil, ErrNotMaster
	}
	if err := remoting.ValidateTopic(req.Topic); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTopic, err)
	}
	if err := remoting.ValidateGroup(req.Group); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGroup, err)
	}
	cat := e.deps.Catalog
	tc, ok := cat.Topic(req.Topic)
	if !ok {
		return nil, fmt.Errorf("%w: topic %s does not exist", ErrTopic, req.Topic)
	}
	if !tc.Readable {
		return nil, fmt.Errorf("%w: topic %s may not be read", ErrTopic, req.Topic)
	}
	if req.QueueID >= tc.ReadQueues {
		return nil, fmt.Errorf("%w: queue %d of topic %s (it has %d read queues)", ErrTopic, req.QueueID, req.Topic, tc.ReadQueues)
	}
	g := cat.Group(req.Group)
	if !g.ConsumeEnable {
		return nil, fmt.Errorf("%w: %s", ErrGroup, req.Group)
	}
	if req.Invisible <= 0 || req.Invisible > MaxInvisible {
		return nil, fmt.Errorf("%w: %s: want more than 0 and at most %s", ErrInvisible, req.Invisible, MaxInvisible)
	}
	f, ferr := cat.Filter(req.Topic, req.FilterType, req.FilterExpression)
	if ferr != nil {
		return nil, fmt.Errorf("%w: %s", ErrFilter, ferr)
	}
	if req.MaxMessages <= 0 {
		req.MaxMessages = defaultBatch
	}
	req.MaxMessages = min(req.MaxMessages, maxBatch)
	if req.MaxAttempts <= 0 {
		req.MaxAttempts = max(g.RetryMaxTimes, 0) + 1
	}
	queues := tc.Queues
	if tc.ReadQueues > 0 {
		queues = tc.ReadQueues
	}
	var timer *time.Timer
	for {
		wake := e.waitChan()
		msgs, err := e.receiveOnce(ctx, req, &f, queues)
		if err != nil || len(msgs) > 0 || req.Wait <= 0 || e.deps.Stopping.Stopping() {
			if timer != nil {
				timer.Stop()
			}
			return msgs, err
		}
		if timer == nil {
			timer = time.NewTimer(req.Wait)
		}
		e.waiters.Add(1)
		select {
		case <-wake:
			e.waiters.Add(-1)
		case <-timer.C:
			e.waiters.Add(-1)
			return nil, nil
		case <-ctx.Done():
			e.waiters.Add(-1)
			timer.Stop()
			return nil, ctx.Err()
		}
	}
}

// pick is an entry delivered by one receive, copied under the lock.
type pick struct {
	ent                          *entry
	offset, phys                 int64
	attempts                     int32
	popMs, invisibleMs, deadline int64
	nonce                        uint64
	raw                          []byte // when read with the log scan
}

func (p *pick) set(ent *entry) {
	p.ent, p.offset, p.phys, p.attempts = ent, ent.offset, ent.phys, ent.attempts
	p.popMs, p.invisibleMs, p.deadline, p.nonce = ent.popMs, ent.invisibleMs, ent.deadline, ent.nonce
}

// deliverLocked makes ent invisible for a new delivery.
func (e *Engine) deliverLocked(ent *entry, nowMs, invMs int64) {
	ent.attempts++
	ent.popMs, ent.invisibleMs, ent.nonce = nowMs, invMs, newNonce()
	e.setDeadlineLocked(ent, nowMs+invMs)
}

func newNonce() uint64 {
	for {
		if n := rand.Uint64(); n != 0 {
			return n
		}
	}
}

// receiveOnce is one receive without waiting.
func (e *Engine) receiveOnce(ctx context.Context, req Request, f *Filter, queues int32) ([]Message, error) {
	now := e.now()
	nowMs, invMs := now.UnixMilli(), max(req.Invisible.Milliseconds(), 1)
	var picks []pick
	budget := req.MaxMessages
	bytesLeft := e.maxBytes
	limited, limitBy := false, ""

	e.mu.Lock()
	if e.expireLocked(nowMs) {
		defer e.notify()
	}
	g := e.groupLocked(req.Group)
	ids := make([]int32, 0, queues)
	if req.QueueID >= 0 {
		ids = append(ids, req.QueueID)
	} else {
		start := int32(e.rr % uint32(queues))
		e.rr++
		for i := range queues {
			ids = append(ids, (start+i)%queues)
		}
	}
	// A FIFO queue is held if an entry is invisible before this receive.
	free := make([]bool, len(ids))
	for i, id := range ids {
		q := g.queue(req.Topic, id)
		free[i] = !req.FIFO || !q.held()
	}
	// Visible-again entries first, oldest first per queue; they are in
	// flight already, but count for the client that receives them now.
	clientRoom := budget
	if req.Client != "" {
		clientRoom = max(e.maxPerClient-e.clients[req.Client], 0)
	}
	for i, id := range ids {
		q := g.queue(req.Topic, id)
		if !free[i] || q.ready == 0 {
			continue
		}
		for _, off := range slices.Clone(q.order) {
			if budget == 0 {
				break
			}
			ent := q.inflight[off]
			if ent == nil || ent.deadline != 0 || ent.dlq {
				continue
			}
			if ent.client != req.Client && clientRoom <= 0 {
				limited, limitBy = true, "client"
				break
			}
			if ent.client != req.Client {
				clientRoom--
			}
			e.setClientLocked(ent, req.Client)
			e.deliverLocked(ent, nowMs, invMs)
			var p pick
			p.set(ent)
			picks = append(picks, p)
			budget--
		}
	}
	// Then new messages from the log.
	for i, id := range ids {
		if budget == 0 || bytesLeft <= 0 {
			break
		}
		q := g.queue(req.Topic, id)
		if !free[i] || q.reading {
			continue
		}
		room, by := e.roomLocked(g, req.Client)
		room = min(budget, room)
		if room <= 0 {
			limited, limitBy = true, by
			break
		}
		q.reading = true
		from := q.next
		e.mu.Unlock()
		got, next, err := e.readNew(ctx, req, f, q, from, room, bytesLeft)
		e.mu.Lock()
		q.reading = false
		if err != nil {
			e.mu.Unlock()
			e.log.Warn("pop: reading the log failed", "topic", req.Topic, "queue", id, "offset", from, "err", err)
			e.mu.Lock()
			continue
		}
		if next >= 0 && (q.next < 0 || next > q.next) {
			q.next = next
		}
		for _, p := range got {
			if _, dup := q.inflight[p.offset]; dup || p.offset < q.base() && len(q.inflight) > 0 && p.offset < q.order[0] {
				continue
			}
			ent := &entry{offset: p.offset, phys: p.phys, maxAttempts: req.MaxAttempts}
			e.addLocked(g, q, ent)
			e.setClientLocked(ent, req.Client)
			e.deliverLocked(ent, nowMs, invMs)
			p.set(ent)
			picks = append(picks, p)
			bytesLeft -= len(p.raw)
			budget--
		}
		e.commitLocked(g, q)
	}
	e.version++
	e.mu.Unlock()

	out := make([]Message, 0, len(picks))
	for _, p := range picks {
		raw := p.raw
		if raw == nil {
			var err error
			if raw, err = e.deps.Store.ReadRecordContext(ctx, p.phys); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					// Gone by retention: done.
					e.mu.Lock()
					if p.ent.q.inflight[p.offset] == p.ent && p.ent.nonce == p.nonce {
						e.removeLocked(p.ent)
					}
					e.mu.Unlock()
					continue
				}
				// It stays in flight: delivered again after its deadline.
				e.log.Warn("pop: reading a message to deliver again failed", "topic", req.Topic, "offset", p.phys, "err", err)
				continue
			}
		}
		rec, _, err := store.DecodeRecord(raw)
		if err != nil {
			e.log.Warn("pop: undecodable record", "topic", req.Topic, "offset", p.phys, "err", err)
			continue
		}
		h := Handle{Topic: req.Topic, QueueID: rec.QueueID, Offset: p.offset, PopMs: p.popMs,
			InvisibleMs: p.invisibleMs, Nonce: p.nonce}
		out = append(out, Message{Record: rec, Raw: raw, Handle: h.String(), Attempt: p.attempts,
			InvisibleUntil: time.UnixMilli(p.deadline)})
	}
	if len(out) == 0 && limited {
		e.mu.Lock()
		defer e.mu.Unlock()
		switch limitBy {
		case "client":
			return nil, fmt.Errorf("%w: client %s has %d (at most %d per client, STRATAMQ_POP_MAX_INFLIGHT_PER_CLIENT); ack or let some expire",
				ErrInflightLimit, req.Client, e.clients[req.Client], e.maxPerClient)
		case "share":
			return nil, fmt.Errorf("%w: group %s has %d; the broker has %d of its %d (STRATAMQ_POP_MAX_INFLIGHT) in flight and keeps %d free for other groups (%d groups have messages in flight); ack or let some expire",
				ErrInflightLimit, req.Group, g.count, e.total, e.maxTotal, e.reserveLocked(g), e.activeGroups)
		}
		return nil, fmt.Errorf("%w: group %s has %d (at most %d per group, STRATAMQ_POP_MAX_INFLIGHT_PER_GROUP), the broker %d (at most %d, STRATAMQ_POP_MAX_INFLIGHT); ack or let some expire",
			ErrInflightLimit, req.Group, g.count, e.maxPerGroup, e.total, e.maxTotal)
	}
	return out, nil
}

// readNew reads up to n matching messages of q from offset from (-1: the
// group's start) without the engine's lock. It returns them and the
// queue's next offset (-1: unchanged).
func (e *Engine) readNew(ctx context.Context, req Request, f *Filter, q *queue, from int64, n, maxBytes int) ([]pick, int64, error) {
	if from < 0 {
		from = e.start(ctx, req.Group, req.Topic, q.id)
	}
	res, err := e.deps.Store.Get(ctx, store.GetRequest{Topic: req.Topic, QueueID: q.id, Offset: from, MaxMsgs: n,
		MaxBytes: maxBytes, Filter: f.TagCode, Match: f.Props})
	if err != nil {
		return nil, from, err
	}
	next := from
	switch res.Status {
	case store.Found, store.NoMatchedMessage, store.OffsetTooSmall, store.OffsetOverflowBadly, store.OffsetFoundNull:
		next = res.NextBeginOffset
	}
	var picks []pick
	for _, raw := range res.Records {
		rec, _, err := store.DecodeRecord(raw)
		if err != nil {
			return nil, from, err
		}
		if f.Tags != nil && !f.Tags(rec.Properties) {
			continue // a tag hash collision: not this receive's
		}
		picks = append(picks, pick{offset: rec.QueueOffset, phys: rec.PhysOffset, raw: raw})
	}
	return picks, next, nil
}

// start is where a group that never consumed a queue starts: its
// committed offset if it has one (a remoting consumer's, or an admin
// reset); else, as RocketMQ's POP does, the queue's end, or its start
// while its first message is still in the local log (a new topic read
// from its beginning). The choice is committed, so it holds.
func (e *Engine) start(ctx context.Context, group, topic string, id int32) int64 {
	if off, ok := e.deps.Offsets.Query(group, topic, id); ok && off >= 0 {
		return off
	}
	st := e.deps.Store
	mn, mx := st.MinQueueOffset(topic, id), st.MaxQueueOffset(topic, id)
	if mn == 0 && mx > 0 {
		if phys, _, _, ok, err := st.QueueEntryContext(ctx, topic, id, 0); err == nil && ok && phys >= st.LocalMinPhysOffset() {
			return 0
		}
	}
	return mx
}
