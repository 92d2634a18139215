package remoting

import (
	"sync"
	"sync/atomic"
)

// readBudget bounds the bytes of request frames a server holds: frames
// being read and frames read but not yet handled. A frame takes budget as
// its buffer grows (which follows the bytes that arrived, not the declared
// length) and gives it back once its request has been handled.
//
// A connection that cannot take what it needs stops reading until budget
// is given back (backpressure); it is never closed for that. Partial
// frames could otherwise hold the whole budget and wait on each other
// forever, so one frame at a time may take the overflow slot instead: it
// then holds up to one max frame beyond the limit until it is handled. The
// bytes held are therefore at most limit + one max frame.
type readBudget struct {
	limit     int64
	used      atomic.Int64 // general budget taken
	slot      atomic.Bool  // the overflow slot is taken
	slotBytes atomic.Int64 // bytes of the frame holding the slot
	waiting   atomic.Int32 // readers waiting for budget

	mu   sync.Mutex
	wake chan struct{} // closed (and replaced) when budget is given back while someone waits
}

func newReadBudget(limit int64) *readBudget {
	return &readBudget{limit: limit, wake: make(chan struct{})}
}

// tryTake takes n bytes of the general budget if they fit.
func (b *readBudget) tryTake(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// give returns what one frame took: n bytes of the general budget, or the
// overflow slot.
func (b *readBudget) give(n int64, slot bool) {
	if slot {
		b.slotBytes.Add(-n)
		b.slot.Store(false)
	} else {
		if n == 0 {
			return
		}
		b.used.Add(-n)
	}
	if b.waiting.Load() > 0 {
		b.mu.Lock()
		close(b.wake)
		b.wake = make(chan struct{})
		b.mu.Unlock()
	}
}

// waitChan is the channel the next give closes. A waiter counts itself in
// waiting before it calls this and tries again after, so a give between its
// failed try and its wait is never missed.
func (b *readBudget) waitChan() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.wake
}

// inUse is the bytes held: general budget and overflow slot.
func (b *readBudget) inUse() int64 { return b.used.Load() + b.slotBytes.Load() }
