package wal

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// tailBucket answers data-object PUTs after fast, except each key's
// first attempt once slowFirst is set, which takes slow (honouring its
// context, as an HTTP request does): a bucket with a slow tail.
type tailBucket struct {
	tier.Bucket
	fast, slow time.Duration
	mu         sync.Mutex
	slowFirst  bool
	tried      map[string]bool
}

func (b *tailBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	d := b.fast
	b.mu.Lock()
	if size > HeaderSize && b.slowFirst && !b.tried[key] {
		d = b.slow
	}
	b.tried[key] = true
	b.mu.Unlock()
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(d):
	}
	return b.Bucket.PutIf(ctx, key, r, size, cond)
}

// TestHedgeBeatsASlowTailPut: every object's first PUT takes 2 s; a
// second attempt sent beside it after the hedge delay lands first and
// commits the object, so no send waits for the slow one, and a restore
// finds every acknowledged record. Fixed and adaptive hedges; with
// hedging off every send waits the 2 s (virtual time: testing/synctest).
func TestHedgeBeatsASlowTailPut(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hedge    time.Duration
		warmup   int // sends before the first PUTs turn slow
		maxWait  time.Duration
		noHedges bool
	}{
		{"fixed 100ms", 100 * time.Millisecond, 0, 500 * time.Millisecond, false},
		{"adaptive", 0, 10, 500 * time.Millisecond, false},
		{"off", -1, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &tailBucket{Bucket: tier.NewMem(), fast: 40 * time.Millisecond, slow: 2 * time.Second, tried: map[string]bool{}}
				n, err := start(t, b, newMemLog(0), 0, Config{Linger: 20 * time.Millisecond, Hedge: tc.hedge})
				if err != nil {
					t.Fatal(err)
				}
				var a acked
				var worst time.Duration
				for i := range tc.warmup + 20 {
					if i == tc.warmup {
						b.mu.Lock()
						b.slowFirst = true
						b.mu.Unlock()
					}
					sent := time.Now()
					if err := <-a.send(n, fmt.Sprintf("m%04d", i), 300, time.Time{}); err != nil {
						t.Fatalf("send %d: %v", i, err)
					}
					if i >= tc.warmup {
						worst = max(worst, time.Since(sent))
					}
				}
				st := n.w.Stats()
				if tc.noHedges {
					if st.Hedges != 0 || worst < 2*time.Second {
						t.Errorf("hedging off: %d hedges, a send waited at most %v; want none and the slow PUT's 2s", st.Hedges, worst)
					}
				} else if st.Hedges < 20 || worst > tc.maxWait {
					t.Errorf("%d hedges, a send waited up to %v behind 2s first attempts; want one hedge per object and at most %v", st.Hedges, worst, tc.maxWait)
				}
				_ = n.stop()
				a.check(t, b, 0)
			})
		})
	}
}
