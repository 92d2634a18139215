package namesrv

import (
	"sync"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// routeHold makes route answers wait for one broker's first registration
// (HoldRoutes): `stratamq serve` opens its name server's port a moment
// before its own broker has registered, and a client that asks for a route
// in that moment would be told the topic does not exist (client-go's
// consumer Start gives up at once on that).
type routeHold struct {
	mu      sync.Mutex
	name    string        // the broker name waited for; "" when no hold is set
	max     time.Duration // the longest one answer waits
	ended   chan struct{} // closed when the hold ends: that broker registered, release, or the window passed
	endOnce sync.Once
}

// HoldRoutes makes GET_ROUTEINFO_BY_TOPIC answers wait, each for at most
// max, until a broker named brokerName first registers, and at most for
// window in all; release ends the hold at once (the broker stopped, or
// will never register here). Call it before the name server serves. A
// held request occupies no worker: it is answered from a goroutine of its
// own, from the tables as they are when the wait ends.
func (ns *NameServer) HoldRoutes(brokerName string, max, window time.Duration) (release func()) {
	h := &ns.hold
	h.mu.Lock()
	h.name, h.max, h.ended = brokerName, max, make(chan struct{})
	h.endOnce = sync.Once{}
	h.mu.Unlock()
	t := time.AfterFunc(window, h.end)
	return func() { t.Stop(); h.end() }
}

func (h *routeHold) end() {
	h.mu.Lock()
	ended := h.ended
	h.mu.Unlock()
	if ended != nil {
		h.endOnce.Do(func() { close(ended) })
	}
}

// registered ends the hold when brokerName is the one it waits for.
func (h *routeHold) registered(brokerName string) {
	h.mu.Lock()
	match := h.ended != nil && h.name == brokerName
	h.mu.Unlock()
	if match {
		h.end()
	}
}

// waiting returns the channel to wait on and the longest wait, or nil when
// answers need not wait.
func (h *routeHold) waiting() (<-chan struct{}, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended == nil {
		return nil, 0
	}
	select {
	case <-h.ended:
		return nil, 0
	default:
		return h.ended, h.max
	}
}

// heldRoute answers a route query once the hold ends or max passed, on
// its own goroutine; false when no hold is on (answer now).
func (ns *NameServer) heldRoute(c *remoting.Conn, req *remoting.Command) bool {
	ended, max := ns.hold.waiting()
	if ended == nil || c == nil {
		return false
	}
	go func() {
		t := time.NewTimer(max)
		defer t.Stop()
		select {
		case <-ended:
		case <-t.C:
		case <-c.Done():
		}
		_ = c.Reply(req, ns.getRouteInfoByTopic(req)) // a closed conn: nobody to answer
	}()
	return true
}
