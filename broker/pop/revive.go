package pop

import (
	"container/heap"
	"context"
)

// Expiry: entries past their deadline become visible again, or, past
// their attempts, are dead-lettered (DeadLetterer) and done once the DLQ
// copy is durable (persist.go, releaseStored).

// expireLocked makes every entry past its deadline visible again, or,
// past its attempts, queues it for the dead-letter queue (Revive stores
// it there). It reports whether any entry became receivable.
func (e *Engine) expireLocked(nowMs int64) bool {
	woke := false
	for len(e.heap) > 0 && e.heap[0].deadline <= nowMs {
		ent := heap.Pop(&e.heap).(*entry)
		if ent.attempts >= ent.maxAttempts {
			ent.dlq = true
			ent.deadline = nowMs
			e.dead = append(e.dead, ent)
			continue
		}
		ent.deadline = 0
		ent.q.ready++
		woke = true
	}
	if woke {
		e.version++
	}
	return woke
}

// Revive runs expiry at the engine's clock and dead-letters what is due.
// Run calls it every Config.ReviveInterval; tests call it after moving
// the clock.
func (e *Engine) Revive(ctx context.Context) {
	e.releaseStored()
	e.mu.Lock()
	woke := e.expireLocked(e.now().UnixMilli())
	dead := e.dead
	e.dead = nil
	e.mu.Unlock()
	if woke {
		e.notify()
	}
	for _, ent := range dead {
		err := e.deadLetter(ctx, ent)
		e.mu.Lock()
		if err != nil {
			// Tried again later; it stays in flight meanwhile.
			e.log.Warn("pop: dead-lettering a message failed; retrying", "group", ent.g.name,
				"topic", ent.q.topic, "queue", ent.q.id, "offset", ent.offset, "err", err)
			ent.dlq = false
			ent.deadline = 0
			ent.q.ready++
			e.setDeadlineLocked(ent, e.now().UnixMilli()+dlqRetry.Milliseconds())
		} else {
			e.storedLocked(ent, e.deps.Store.MaxPhysOffset())
		}
		e.mu.Unlock()
		if err == nil {
			e.notify() // a FIFO queue may be free again
		}
	}
}

// deadLetter stores ent's message in %DLQ%<group> as a send-back past its
// maximum does. A message retention removed meanwhile is done.
func (e *Engine) deadLetter(ctx context.Context, ent *entry) error {
	e.mu.Lock()
	group, phys, attempts, maxAttempts := ent.g.name, ent.phys, ent.attempts, ent.maxAttempts
	e.mu.Unlock()
	return e.deps.DLQ.DeadLetter(ctx, group, phys, attempts, maxAttempts)
}
