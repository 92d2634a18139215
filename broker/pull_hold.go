package broker

import (
	"context"
	"sync"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// pullHold is RocketMQ's PullRequestHoldService: pulls that found nothing
// wait here until the store dispatches a matching message for their queue,
// their hold time ends, or the broker shuts down; then they are run again
// and answered on their connection.
type pullHold struct {
	b  *Broker
	wg sync.WaitGroup // re-runs in flight

	mu struct {
		sync.Mutex
		waiting map[queueKey][]*heldPull
		closed  bool
	}
}

type queueKey struct {
	topic string
	queue int32
}

type heldPull struct {
	c        *remoting.Conn
	req      *remoting.Command
	offset   int64
	sub      Subscription
	deadline time.Time
}

func newPullHold(b *Broker) *pullHold {
	p := &pullHold{b: b}
	p.mu.waiting = map[queueKey][]*heldPull{}
	return p
}

// park holds a pull; false means it could not be held (shutting down).
func (p *pullHold) park(c *remoting.Conn, req *remoting.Command, topic string, queue int32, offset int64, sub Subscription, deadline time.Time) bool {
	k := queueKey{topic, queue}
	hp := &heldPull{c: c, req: req, offset: offset, sub: sub, deadline: deadline}
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return false
	}
	p.mu.waiting[k] = append(p.mu.waiting[k], hp)
	p.mu.Unlock()
	// A message may have been dispatched between the store read and the
	// park: check once more so it is not missed until the hold times out.
	if p.b.store.MaxQueueOffset(topic, queue) > offset {
		p.wakeQueue(k, func(h *heldPull) bool { return h == hp })
	}
	return true
}

// notify is the store's OnDispatch hook: wake pulls on this queue waiting
// at or before queueOffset whose filter takes the message.
func (p *pullHold) notify(topic string, queue int32, queueOffset int64, tagsCode int64) {
	p.wakeQueue(queueKey{topic, queue}, func(h *heldPull) bool {
		return queueOffset >= h.offset && h.sub.Match(tagsCode)
	})
}

func (p *pullHold) wakeQueue(k queueKey, pick func(*heldPull) bool) {
	p.mu.Lock()
	if len(p.mu.waiting[k]) == 0 {
		p.mu.Unlock()
		return
	}
	woken := p.sortLocked(k, nil, func(h *heldPull) holdVerdict {
		if pick(h) {
			return answerNow
		}
		return keepHeld
	})
	p.answerAndUnlock(woken)
}

// holdVerdict is what a sweep of the held pulls does with one of them.
type holdVerdict int8

const (
	keepHeld  holdVerdict = iota
	answerNow             // run it again and answer
	dropHeld              // forget it: its connection is gone
)

// sortLocked applies verdict to every pull held on k, keeps those it says
// to keep and returns due with those to answer now appended. p.mu is held.
func (p *pullHold) sortLocked(k queueKey, due []*heldPull, verdict func(*heldPull) holdVerdict) []*heldPull {
	list := p.mu.waiting[k]
	kept := list[:0]
	for _, h := range list {
		switch verdict(h) {
		case answerNow:
			due = append(due, h)
		case keepHeld:
			kept = append(kept, h)
		}
	}
	if len(kept) == 0 {
		delete(p.mu.waiting, k)
	} else {
		p.mu.waiting[k] = kept
	}
	return due
}

// answerAndUnlock counts due as re-runs in flight, releases p.mu and runs
// each again on its own goroutine (a re-run may read the tier).
func (p *pullHold) answerAndUnlock(due []*heldPull) {
	p.wg.Add(len(due))
	p.mu.Unlock()
	for _, h := range due {
		go p.rerun(h)
	}
}

// rerun executes a held pull again and writes its response, whatever it
// finds, as RocketMQ's hold service does: a woken pull is never parked
// again (the client pulls again at once), so a pull can neither spin
// between wake-ups nor wait out its hold behind something that will not
// change.
func (p *pullHold) rerun(h *heldPull) {
	defer p.wg.Done()
	resp := p.b.doPull(context.Background(), h.c, h.req, false)
	if resp == nil {
		return
	}
	resp.Version = Version
	_ = h.c.WriteResponse(resp)
}

// run expires held pulls every 500 ms until ctx ends.
func (p *pullHold) run(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.releaseAll()
			p.wg.Wait()
			return
		case now := <-t.C:
			p.expire(now)
		}
	}
}

func (p *pullHold) expire(now time.Time) {
	var due []*heldPull
	p.mu.Lock()
	for k := range p.mu.waiting {
		due = p.sortLocked(k, due, func(h *heldPull) holdVerdict {
			switch {
			case isClosed(h.c):
				return dropHeld // nobody to answer
			case !now.Before(h.deadline):
				return answerNow
			}
			return keepHeld
		})
	}
	p.answerAndUnlock(due)
}

// releaseAll answers every held pull now and refuses new holds.
func (p *pullHold) releaseAll() {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return
	}
	p.mu.closed = true
	var all []*heldPull
	for _, list := range p.mu.waiting {
		all = append(all, list...)
	}
	p.mu.waiting = map[queueKey][]*heldPull{}
	p.answerAndUnlock(all)
}

// count reports the number of held pulls (tests, metrics).
func (p *pullHold) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.mu.waiting {
		n += len(l)
	}
	return n
}

func isClosed(c *remoting.Conn) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}
