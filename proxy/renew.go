package proxy

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// Renewal of auto_renew receipt handles, as RocketMQ's Proxy does it: a
// PushConsumer receives with auto_renew and no invisible duration and
// never extends a message its listener is still processing, so the server
// keeps each delivered handle invisible (PopChangeInvisible when less than
// a third of its invisible time is left) while the client's session (its
// Telemetry stream, by client id) is alive, until the client acks it,
// dead-letters it, changes it itself, or MaxAutoRenew has passed since the
// delivery (then it expires as any other).
//
// The engine replaces the handle on every change; the client keeps the
// one it was given. renewer maps that original handle to the current one,
// and AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetter-
// Queue translate it (take): from then on the renewer lets it go.
//
// One goroutine (run) renews, on a timer heap, until the server stops.
// When a session ends (its stream gone, or NotifyClientTermination) its
// handles are dropped: they expire normally and are delivered again (at
// least once). The map is bounded (maxRenewHandles; the engine's
// in-flight caps bound deliveries anyway): past it a handle is not
// renewed.

// MaxAutoRenew is how long after its delivery a handle is renewed at most
// (RocketMQ's largest invisible time).
const MaxAutoRenew = 12 * time.Hour

// maxRenewHandles bounds the handles renewed at once.
const maxRenewHandles = 200_000

// renewRetry is how soon a renewal that failed for a reason other than a
// dead handle is tried again (while the handle's deadline is ahead).
const renewRetry = time.Second

type renewEntry struct {
	orig, group, topic, client string
	invisible                  time.Duration
	start                      time.Time // the delivery
	at                         time.Time // next renewal
	deadline                   time.Time // the current handle's deadline
	index                      int       // in the heap; -1 when out

	mu   sync.Mutex // held while renewing; guards cur and done
	cur  string
	done bool // taken by the client, or dropped
}

type renewHeap []*renewEntry

func (h renewHeap) Len() int           { return len(h) }
func (h renewHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h renewHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *renewHeap) Push(x any) {
	e := x.(*renewEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *renewHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// renewer holds the auto_renew handles being renewed.
type renewer struct {
	svc  *service
	now  func() time.Time
	wake chan struct{} // an earlier renewal was added

	mu     sync.Mutex
	byOrig map[string]*renewEntry
	heap   renewHeap
}

func newRenewer(svc *service) *renewer {
	return &renewer{svc: svc, now: time.Now, wake: make(chan struct{}, 1), byOrig: map[string]*renewEntry{}}
}

// renewAt is when a handle with this deadline and invisible time is
// renewed: when a third of its invisible time is left.
func renewAt(deadline time.Time, invisible time.Duration) time.Time {
	return deadline.Add(-invisible / 3)
}

// add renews handle (delivered to client, invisible until deadline) from
// now on; false when it is not (no client id, the map is full).
func (r *renewer) add(client, group, topic, handle string, invisible time.Duration, deadline time.Time) bool {
	if client == "" || handle == "" || invisible <= 0 {
		return false
	}
	e := &renewEntry{orig: handle, cur: handle, group: group, topic: topic, client: client,
		invisible: invisible, start: r.now(), deadline: deadline, at: renewAt(deadline, invisible)}
	r.mu.Lock()
	if len(r.byOrig) >= maxRenewHandles || r.byOrig[handle] != nil {
		r.mu.Unlock()
		return false
	}
	r.byOrig[handle] = e
	heap.Push(&r.heap, e)
	first := r.heap[0] == e
	r.mu.Unlock()
	if first {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// take translates a handle the client sent with a request of group and
// topic: the current handle of a renewed one of that group and topic
// (which is renewed no more: the client acks, dead-letters or changes
// it), else the handle as it is. A request of another group or topic
// (which the engine refuses: the handle is not of its group) leaves the
// renewal as it is.
func (r *renewer) take(group, topic, handle string) string {
	r.mu.Lock()
	e := r.byOrig[handle]
	if e != nil && (e.group != group || e.topic != topic) {
		e = nil
	}
	if e != nil {
		r.removeLocked(e)
	}
	r.mu.Unlock()
	if e == nil {
		return handle
	}
	e.mu.Lock() // waits for a renewal under way: its new handle is the one
	defer e.mu.Unlock()
	e.done = true
	return e.cur
}

func (r *renewer) removeLocked(e *renewEntry) {
	if r.byOrig[e.orig] == e {
		delete(r.byOrig, e.orig)
	}
	if e.index >= 0 {
		heap.Remove(&r.heap, e.index)
	}
}

// dropClient stops renewing a client's handles (its session ended).
func (r *renewer) dropClient(client string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.byOrig {
		if e.client == client {
			r.removeLocked(e)
		}
	}
}

// count is the number of handles being renewed.
func (r *renewer) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byOrig)
}

// run renews what is due until ctx ends.
func (r *renewer) run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		r.mu.Lock()
		wait := time.Hour
		if len(r.heap) > 0 {
			wait = max(r.heap[0].at.Sub(r.now()), 0)
		}
		r.mu.Unlock()
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
			continue
		case <-t.C:
		}
		r.renewDue()
	}
}

// renewDue renews every handle whose time has come.
func (r *renewer) renewDue() {
	for {
		now := r.now()
		r.mu.Lock()
		if len(r.heap) == 0 || r.heap[0].at.After(now) {
			r.mu.Unlock()
			return
		}
		e := heap.Pop(&r.heap).(*renewEntry)
		r.mu.Unlock()
		if next, keep := r.renew(e, now); keep {
			r.mu.Lock()
			if r.byOrig[e.orig] == e { // not taken or dropped meanwhile
				e.at = next
				heap.Push(&r.heap, e)
			}
			r.mu.Unlock()
		} else {
			r.mu.Lock()
			r.removeLocked(e)
			r.mu.Unlock()
		}
	}
}

// renew extends one handle; it answers when to renew it next, or false to
// let it go (its session ended, its time is up, its handle is dead).
func (r *renewer) renew(e *renewEntry, now time.Time) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return time.Time{}, false
	}
	if r.svc.sessions.get(e.client) == nil {
		return time.Time{}, false
	}
	d := min(e.invisible, e.start.Add(MaxAutoRenew).Sub(now))
	if d < e.invisible/3 || d <= 0 {
		return time.Time{}, false // past MaxAutoRenew: it expires as it is
	}
	_, cb, err := r.svc.consumerBackend()
	var h string
	if err == nil {
		h, err = cb.ChangeInvisible(e.group, e.topic, e.cur, d)
	}
	if err != nil {
		if errors.Is(err, ErrInvalidReceiptHandle) || errors.Is(err, ErrReceiptHandleExpired) || !now.Before(e.deadline) {
			r.svc.s.log.Debug("auto_renew handle not renewed", "client", e.client, "group", e.group, "topic", e.topic, "err", err)
			return time.Time{}, false
		}
		r.svc.s.log.Warn("auto_renew: renewing a receipt handle failed; retrying", "client", e.client, "group", e.group, "topic", e.topic, "err", err)
		return now.Add(min(renewRetry, e.deadline.Sub(now)/2)), true
	}
	e.cur = h
	e.deadline = now.Add(d)
	return renewAt(e.deadline, e.invisible), true
}
