package simtest

import (
	"context"
	"math"
	"sync"
	"time"
)

// skewClock is a node's monotonic clock (offsets.MonoClock, through
// broker.Deps.Mono) running at rate times the (virtual) real rate: the
// lease's self-fence and a slave's TTL watch are measured on it. Rates
// within [0.9, 1.1] are inside what the lease margin (TTL/5) covers: a
// holder at 0.9 fences at 0.8 TTL / 0.9 real, before a contender at 1.1
// may take over at TTL / 1.1.
type skewClock struct {
	mu       sync.Mutex
	baseReal time.Time     // when the rate last changed
	baseMono time.Duration // the reading then
	rate     float64
}

func newSkewClock(rate float64) *skewClock {
	return &skewClock{baseReal: time.Now(), rate: rate}
}

func (c *skewClock) Elapsed() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.baseMono + time.Duration(float64(time.Since(c.baseReal))*c.rate)
}

// setRate changes the rate from now on; readings stay monotonic.
func (c *skewClock) setRate(r float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.baseMono += time.Duration(float64(now.Sub(c.baseReal)) * c.rate)
	c.baseReal, c.rate = now, r
}

// Sleep waits until d has passed on this clock, or ctx ends.
func (c *skewClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	// Rounded up, and a nanosecond more: a reading after the sleep must be
	// at least d on, or a caller that sleeps what is left would sleep 0
	// over and over in a bubble where time then never moves.
	c.mu.Lock()
	real := time.Duration(math.Ceil(float64(d)/c.rate)) + 1
	c.mu.Unlock()
	t := time.NewTimer(real)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
