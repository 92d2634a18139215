package broker

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// pullHold is RocketMQ's PullRequestHoldService: pulls that found nothing
// wait here until the store dispatches a matching message for their queue,
// their hold time ends, or the broker shuts down; then they are run again
// and answered on their connection. A sync_master's pull that stopped at a
// record the read bound hides (readBound) waits instead until the bound
// shows that record (wakeVisible, on every slave ack).
type pullHold struct {
	b  *Broker
	wg sync.WaitGroup // re-runs in flight
	// minWait is at most the lowest waitPhys of the held pulls
	// (math.MaxInt64: none waits on the bound); written under mu.
	minWait atomic.Int64
	reruns  atomic.Int64 // held pulls run again (tests)

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
	// waitPhys > 0: the pull stopped at a record the read bound hides,
	// ending at this commitlog offset (store.GetResult.HeldBack); it waits
	// for the bound, not for a dispatch.
	waitPhys int64
}

func newPullHold(b *Broker) *pullHold {
	p := &pullHold{b: b}
	p.mu.waiting = map[queueKey][]*heldPull{}
	p.minWait.Store(math.MaxInt64)
	return p
}

// park holds a pull, behind a hidden record ending at waitPhys when that is
// positive; false means it could not be held (shutting down).
func (p *pullHold) park(c *remoting.Conn, req *remoting.Command, topic string, queue int32, offset int64, sub Subscription, deadline time.Time, waitPhys int64) bool {
	k := queueKey{topic, queue}
	hp := &heldPull{c: c, req: req, offset: offset, sub: sub, deadline: deadline, waitPhys: waitPhys}
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return false
	}
	p.mu.waiting[k] = append(p.mu.waiting[k], hp)
	if waitPhys > 0 && waitPhys < p.minWait.Load() {
		p.minWait.Store(waitPhys)
	}
	p.mu.Unlock()
	// A message may have been dispatched (or the bound may have moved)
	// between the store read and the park: check once more so it is not
	// missed until the hold times out. One the read bound hides does not
	// wake the pull: it waits for the bound to show it.
	if waitPhys == 0 && p.b.store.MaxQueueOffset(topic, queue) > offset {
		if waitPhys = p.b.hiddenEndOf(topic, queue, offset); waitPhys == 0 {
			p.wakeQueue(k, func(h *heldPull) bool { return h == hp })
			return true
		}
		p.mu.Lock()
		if hp.waitPhys == 0 { // else notify set it meanwhile
			hp.waitPhys = waitPhys
		}
		waitPhys = hp.waitPhys
		if waitPhys < p.minWait.Load() {
			p.minWait.Store(waitPhys)
		}
		p.mu.Unlock()
	}
	if waitPhys > 0 && p.b.visibleOf(topic, waitPhys) {
		p.wakeQueue(k, func(h *heldPull) bool { return h == hp })
	}
	return true
}

// notify is the store's OnDispatch hook: wake pulls on this queue waiting
// at or before queueOffset whose filter takes the message (not those
// behind a hidden record: a new one does not show it). Under a read bound
// the message is not visible yet: those pulls wait for the bound to reach
// the log's end instead (it ends past the message), with no re-run.
func (p *pullHold) notify(topic string, queue int32, queueOffset int64, tagsCode int64) {
	k := queueKey{topic, queue}
	p.mu.Lock()
	if len(p.mu.waiting[k]) == 0 {
		p.mu.Unlock()
		return
	}
	bounded, end, waits := p.b.readBoundOf(topic) > 0, p.b.store.MaxPhysOffset(), false
	woken := p.sortLocked(k, nil, func(h *heldPull) holdVerdict {
		switch {
		case h.waitPhys != 0 || queueOffset < h.offset || !h.sub.Match(tagsCode):
			return keepHeld
		case bounded:
			h.waitPhys, waits = end, true
			return keepHeld
		}
		return answerNow
	})
	if waits && end < p.minWait.Load() {
		p.minWait.Store(end)
	}
	p.answerAndUnlock(woken)
	if waits && p.b.visibleOf(topic, end) {
		p.wakeVisible() // an ack may have passed end before the pulls waited on it
	}
}

// wakeVisible is ha.MasterOptions.OnAcked of a sync_master and the WAL's
// OnDurable: wake the pulls behind a hidden record that the read bound
// (readBoundOf their topic) now shows. With none waiting
// on the bound, or none it reaches, it costs an atomic load or two.
func (p *pullHold) wakeVisible() {
	if p.minWait.Load() == math.MaxInt64 {
		return
	}
	bound := p.b.readBound()
	if bound > 0 && bound < p.minWait.Load() {
		return
	}
	p.mu.Lock()
	next := int64(math.MaxInt64)
	var due []*heldPull
	for k := range p.mu.waiting {
		bound := p.b.readBoundOf(k.topic) // a bucket-durable topic's is the WAL's, at most the role's
		due = p.sortLocked(k, due, func(h *heldPull) holdVerdict {
			switch {
			case h.waitPhys == 0:
			case bound == 0 || h.waitPhys <= bound:
				return answerNow
			default:
				next = min(next, h.waitPhys)
			}
			return keepHeld
		})
	}
	p.minWait.Store(next)
	p.answerAndUnlock(due)
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
// finds, as RocketMQ's hold service does: a woken pull is not parked again
// (the client pulls again at once), so a pull can neither spin between
// wake-ups nor wait out its hold behind something that will not change.
// The one exception is a pull that now stops at a record the read bound
// hides: it waits on, within its hold, until the bound shows that record
// (doPull), which only an ack can do.
func (p *pullHold) rerun(h *heldPull) {
	defer p.wg.Done()
	p.reruns.Add(1)
	resp := p.b.doPull(context.Background(), h.c, h.req, h)
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
