package wal

// A fourth review's cases (fc04a8a, 18b95ed): format 2 claims, the kept
// newest object, Oldest past trimTo, reclaim with Held.

import (
	"context"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// gateBucket holds back the PUTs of the keys in gates until the gate's
// channel is closed: a slow PUT that does land (not a failed one).
type gateBucket struct {
	tier.Bucket
	mu    sync.Mutex
	gates map[string]chan struct{}
}

func (g *gateBucket) gate(key string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	g.gates[key] = ch
	return ch
}

func (g *gateBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	g.mu.Lock()
	ch := g.gates[key]
	g.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return g.Bucket.PutIf(ctx, key, r, size, cond)
}

// r53SegmentsEnd is the broker's segmentsEnd for a manifest whose
// segments hold [0, segEnd) and nothing else.
func r53SegmentsEnd(segEnd, p int64) int64 {
	if p < segEnd {
		return segEnd
	}
	return p
}

// TestReview53OldestPassesAnObjectStillInFlight: W ships #2 [0,1000)
// (acknowledged), then #3 [1000,2000) and #4 [2000,3000) at once; #4
// lands first, #3's PUT is slow. The segments hold [0,1000). The broker's
// ticker trims to segmentsEnd(m, Oldest()): Oldest is the first held
// object past trimTo, #4 at 2000 (the in-flight #3 is not held), and no
// segment covers 2000, so trimTo becomes 2000 though [1000,2000) is in no
// segment. #3 then lands and is acknowledged; it ends at 2000 <= trimTo,
// so the next trim deletes it: acknowledged bytes only it held are gone,
// and a restore on an empty disk from the segments' end meets ErrGap.
func TestReview53OldestPassesAnObjectStillInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gateBucket{Bucket: tier.NewMem()}
		b := &faultBucket{Bucket: g}
		n, err := start(t, b, newMemLog(0), 0, Config{Batch: 1000, Linger: time.Millisecond, Hedge: -1})
		if err != nil {
			t.Fatal(err)
		}
		const segEnd = 1000
		tick := func() { // runWAL's ticker
			n.w.Trim(r53SegmentsEnd(segEnd, n.w.Oldest()))
			synctest.Wait()
		}
		var a acked
		if err := <-a.send(n, "r1", 1000, time.Time{}); err != nil { // #2
			t.Fatal(err)
		}
		slow := g.gate(Key("wal/", 3))
		d2 := a.send(n, "r2", 1000, time.Time{}) // #3, slow
		d3 := a.send(n, "r3", 1000, time.Time{}) // #4, lands at once
		synctest.Wait()
		if got := n.w.Durable(); got != 1000 {
			t.Fatalf("durable %d before #3 landed, want 1000", got)
		}
		tick()
		tick()
		close(slow) // #3 lands
		for _, d := range []chan error{d2, d3} {
			if err := <-d; err != nil {
				t.Fatal(err)
			}
		}
		tick()
		_ = n.stop()
		if _, err := g.Stat(context.Background(), Key("wal/", 3)); err != nil {
			t.Errorf("#3 [1000,2000), acknowledged and in no segment (they end at %d), was deleted by a trim: %v", segEnd, err)
		}
		a.check(t, b, segEnd)
	})
}

// TestReview53LateObjectBehindALandedOneStallsTheWriter: W (epoch 2) has
// #3 and #4 in flight; #4 lands first (done, held back behind #3), then
// an older writer's late object takes #3 and W's PUT there fails
// (errTakenByOlder). Run drops #3 from inflight and waits for the PUTs in
// flight to end before claiming again, but #4 already ended: it stays in
// inflight, marked done, and nothing ever removes it (only a later
// successful result does, and none is in flight). W never claims again
// and ships nothing more: every bucket-durable send times out while it
// holds the lease.
func TestReview53LateObjectBehindALandedOneStallsTheWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gateBucket{Bucket: tier.NewMem()}
		n, err := start(t, g, newMemLog(0), 0, Config{Batch: 1000, Linger: time.Millisecond, Hedge: -1,
			Fence: func() (int64, error) { return 2, nil }})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		if err := <-a.send(n, "r1", 1000, time.Time{}); err != nil { // #2
			t.Fatal(err)
		}
		slow := g.gate(Key("wal/", 3))
		a.send(n, "r2", 1000, time.Time{}) // #3, slow
		a.send(n, "r3", 1000, time.Time{}) // #4, lands at once
		synctest.Wait()
		// An older writer's PUT lands at #3 first.
		putObj(g.Bucket, Header{Seq: 3, Epoch: 1, Claim: 1, Prev: 2, Start: 1000}, record("old", 700))
		close(slow)
		synctest.Wait()
		d := a.send(n, "r4", 500, time.Now().Add(time.Minute))
		err = <-d
		durable := n.w.Durable()
		_ = n.stop()
		if err != nil {
			t.Fatalf("a send after an older writer's late object took #3 (behind #4, which had landed): %v; W ships nothing more (durable %d, log %d)",
				err, durable, n.log.MaxPhysOffset())
		}
		a.check(t, g, 0)
	})
}
