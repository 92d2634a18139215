package pop

import (
	"container/heap"
	"context"
	"fmt"
	"time"
)

// What a consumer does with a delivered message's receipt handle: ack it,
// extend its invisible time, or dead-letter it at once.

// findLocked returns the entry h names, checked against the group and
// topic of the request.
func (e *Engine) findLocked(group, topic string, h Handle) (*entry, error) {
	if topic != "" && h.Topic != topic {
		return nil, fmt.Errorf("%w: it is of topic %s, not %s", ErrHandle, h.Topic, topic)
	}
	g := e.groups[group]
	if g == nil {
		return nil, fmt.Errorf("%w: group %s has nothing in flight", ErrHandleExpired, group)
	}
	q := g.queues[queueKey{h.Topic, h.QueueID}]
	if q == nil {
		return nil, fmt.Errorf("%w: group %s has nothing in flight in queue %d of %s", ErrHandleExpired, group, h.QueueID, h.Topic)
	}
	ent := q.inflight[h.Offset]
	if ent == nil || ent.nonce != h.Nonce || ent.dlq {
		return nil, fmt.Errorf("%w: the message at offset %d of queue %d of %s was acked, delivered again or extended since (group %s)",
			ErrHandleExpired, h.Offset, h.QueueID, h.Topic, group)
	}
	return ent, nil
}

// Ack acknowledges the message handle names: it is done for group.
// topic, when not empty, must be the handle's.
func (e *Engine) Ack(group, topic, handle string) error {
	h, err := ParseHandle(handle)
	if err != nil {
		return err
	}
	e.mu.Lock()
	ent, err := e.findLocked(group, topic, h)
	if err == nil {
		e.removeLocked(ent)
	}
	e.mu.Unlock()
	if err == nil {
		e.notify()
	}
	return err
}

// ChangeInvisible makes the message handle names invisible for d from
// now and returns its new handle and deadline; the old handle is no
// longer valid.
func (e *Engine) ChangeInvisible(group, topic, handle string, d time.Duration) (string, time.Time, error) {
	h, err := ParseHandle(handle)
	if err != nil {
		return "", time.Time{}, err
	}
	if d <= 0 || d > MaxInvisible {
		return "", time.Time{}, fmt.Errorf("%w: %s: want more than 0 and at most %s", ErrInvisible, d, MaxInvisible)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ent, err := e.findLocked(group, topic, h)
	if err != nil {
		return "", time.Time{}, err
	}
	nowMs := e.now().UnixMilli()
	ent.popMs, ent.invisibleMs, ent.nonce = nowMs, max(d.Milliseconds(), 1), newNonce()
	e.setDeadlineLocked(ent, nowMs+ent.invisibleMs)
	e.version++
	nh := Handle{Topic: h.Topic, QueueID: h.QueueID, Offset: h.Offset, PopMs: ent.popMs, InvisibleMs: ent.invisibleMs, Nonce: ent.nonce}
	return nh.String(), time.UnixMilli(ent.deadline), nil
}

// ForwardToDLQ dead-letters the message handle names at once (a consumer
// gave up on it) and takes it out of flight once the DLQ copy is durable.
func (e *Engine) ForwardToDLQ(ctx context.Context, group, topic, handle string) error {
	h, err := ParseHandle(handle)
	if err != nil {
		return err
	}
	e.mu.Lock()
	ent, err := e.findLocked(group, topic, h)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	// Out of reach of receives and expiry while it is stored.
	if ent.hi >= 0 {
		heap.Remove(&e.heap, ent.hi)
	}
	if ent.deadline == 0 {
		ent.q.ready--
	}
	ent.dlq = true
	phys, attempts, maxAttempts := ent.phys, ent.attempts, ent.maxAttempts
	e.mu.Unlock()
	err = e.deps.DLQ.DeadLetter(ctx, group, phys, attempts, maxAttempts)
	e.mu.Lock()
	if err != nil {
		ent.dlq = false
		ent.deadline = 0
		ent.q.ready++
		e.setDeadlineLocked(ent, h.PopMs+h.InvisibleMs)
	} else {
		e.storedLocked(ent, e.deps.Store.MaxPhysOffset())
	}
	e.mu.Unlock()
	if err == nil {
		e.notify()
	}
	return err
}
