package wal

// A third review's cases against fb944c3's walk rules. Each failed there:
// a claim named its predecessor by number only (a late PUT of another
// writer at that number was taken for it), a full trim deleted the newest
// writer's every object (numbers started again at #1), and a reclaim did
// not move the run's end to its new claim.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stratamq/stratamq/tier"
)

func r51h(seq uint64, epoch int64, claim, prev uint64, start, length int64) Header {
	return Header{Seq: seq, Epoch: epoch, Claim: claim, Prev: prev, Start: start, Length: length}
}

// TestReview51ClaimPrevIsASkippedLatePut (c): A (epoch 1) has #2 [0,800)
// landed and #3 [800,850), #4 [850,900), #5 [900,950) in flight. X (epoch
// 2) claims #3 (Prev 2, at 800), writes #4 [800,900) and #5 [900,1000);
// its #4's first attempt times out in the network, the retry lands. W
// (epoch 3) claims #6 (Prev 5, at 1000), acknowledges #7 [1000,1100).
// Segments reach 1000; W's trim deletes #1..#5 and its DELETE of #6 fails;
// W crashes. X's stale #4 attempt and A's #5 land (numbers free). The walk
// keeps X's #4 (its claim trimmed), skips A's #5 (older than X), and W's
// claim names #5: listed, ending at 950 <= 1000, so rule (1) takes it for
// the predecessor, does not find it in the chain: ErrCorrupt, with any
// held. Every New/restore/watch read fails; nothing runs to trim.
func TestReview51ClaimPrevIsASkippedLatePut(t *testing.T) {
	hs := []Header{
		r51h(4, 2, 3, 3, 800, 100),             // X's own stale PUT, after #4 was trimmed
		r51h(5, 1, 1, 4, 900, 50),              // A's late #5, after #5 was trimmed
		named(r51h(6, 3, 6, 5, 1000, 0), 2, 3), // W's claim, continuing X's #5 (its DELETE failed)
		r51h(7, 3, 6, 6, 1000, 100),
	}
	for _, held := range []func(int64) bool{nil, heldBelow(1000), heldBy([][2]int64{{0, 1000}})} {
		c, err := walk(hs, held)
		if err != nil {
			t.Errorf("walk (held %v): %v", held != nil, err)
			continue
		}
		if c.End(1000) != 1100 || c.Last() != 7 {
			t.Errorf("chain %v, want it to end with #7 at 1100", c.Objects)
		}
	}
}

// TestReview51ClaimPastARestoreGapKeepsALatePut (a)+(c): as
// TestFloorBelowARestoreGapDropsAckedObjects, W's log resumed at 5000 after
// a fresh-disk restore (nothing is ever written in [1000,5000)). A (epoch
// 1): #2 [0,800) landed, #3 [800,850), #4 [850,900), #5 [900,1100) in
// flight; X (epoch 2) claims #3 at 800, writes #4 [800,900), #5
// [900,1000); segments [0,1000). W (epoch 3) claims #6 (Prev 5, at 5000)
// and acknowledges #7 [5000,6000); its trim to segmentsEnd(m, Oldest) =
// 1000 deletes #1..#5 (#6 ends at 5000). A's #5 lands. Rule (1): #5 ends at
// 1100 <= 5000, so A's never-acknowledged #5 is W's predecessor, and
// Live(1000) (bucketObjectsEnd before W's first upload) holds its
// [1000,1100). A fresh restore (walRestorePoint: start max(1000, 900), no
// Gap) appends A's bytes at 1000, then Reconcile meets #7 at 5000: ErrGap on
// every start.
func TestReview51ClaimPastARestoreGapKeepsALatePut(t *testing.T) {
	hs := []Header{
		r51h(5, 1, 1, 4, 900, 200),             // A's late #5
		named(r51h(6, 3, 6, 5, 5000, 0), 2, 3), // W's claim, past the restore gap, continuing X's #5
		r51h(7, 3, 6, 6, 5000, 1000),
	}
	c, err := walk(hs, heldBy([][2]int64{{0, 1000}}))
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	for _, o := range c.Live(1000) {
		if o.Start < 5000 {
			t.Errorf("Live(1000) holds %s: an older writer's never-acknowledged bytes [1000,%d) in W's restore gap (chain %v)", o, o.End(), c.Objects)
		}
	}
	// A fresh disk: the restore point is 1000 (live[0] starts at 900).
	ctx := context.Background()
	b := tier.NewMem()
	putObj(b, Header{Seq: 5, Epoch: 1, Claim: 1, Prev: 4, Start: 900}, append(record("a5a", 100), record("a5b", 100)...))
	putObj(b, Header{Seq: 6, Epoch: 3, Claim: 6, Prev: 5, Start: 5000, PrevEpoch: 2, PrevClaim: 3}, nil)
	putObj(b, Header{Seq: 7, Epoch: 3, Claim: 6, Prev: 6, Start: 5000}, record("w1", 1000))
	c, err = ReadHeld(ctx, b, "wal/", heldBy([][2]int64{{0, 1000}}))
	if err != nil {
		t.Fatal(err)
	}
	start := max(int64(1000), c.Live(1000)[0].Start)
	if _, err := Reconcile(ctx, b, "wal/", c, 1000, newMemLog(start)); err != nil {
		t.Errorf("fresh-disk Reconcile from %d: %v", start, err)
	}
}

// TestReview51SafeShapes: shapes checked and found safe.
func TestReview51SafeShapes(t *testing.T) {
	h := r51h
	fill := func(seq uint64, epoch int64) Header { return Header{Seq: seq, Claim: seq, Epoch: epoch, Filler: true} }
	cases := []struct {
		name string
		hs   []Header
		held func(int64) bool
		want []uint64
		end  int64
	}{
		// Same-epoch reclaim: W1 (2,3) run #3..#5, A's late #6, W1 orphan #7,
		// filler none, W2 claim #8 (Prev 5, at W1#5's end); trim stopped at #5.
		{"reclaim, trim stopped at lastSeq", []Header{h(5, 2, 3, 4, 100, 10), h(6, 1, 1, 5, 105, 10), h(7, 2, 3, 6, 120, 10),
			h(8, 2, 8, 5, 110, 0), h(9, 2, 8, 8, 110, 10), h(10, 2, 8, 9, 120, 10)}, heldBelow(100), []uint64{5, 8, 9, 10}, 130},
		// Trim deleted #5 and #6, stopped at the orphan #7: it starts a chain
		// the reclaim claim resets (Prev #5 not listed).
		{"reclaim, trim stopped at an orphan", []Header{h(7, 2, 3, 6, 120, 10), h(8, 2, 8, 5, 110, 0), h(9, 2, 8, 8, 110, 10)},
			heldBelow(110), []uint64{8, 9}, 120},
		// A's late PUT at the reclaim claim's number after it was trimmed:
		// rule (2) resets at W2's data.
		{"older late put at the reclaim claim number", []Header{h(8, 1, 1, 7, 105, 30), h(9, 2, 8, 8, 110, 10), h(10, 2, 8, 9, 120, 10)},
			heldBelow(120), []uint64{9, 10}, 130},
		// W1's own stale orphan attempt re-lands after the trim, below W2's data.
		{"own orphan relands below the reclaim run", []Header{h(7, 2, 3, 6, 120, 10), h(9, 2, 8, 8, 110, 10), h(10, 2, 8, 9, 120, 10)},
			heldBelow(120), []uint64{9, 10}, 130},
		// A late PUT at the claim's Prev ending past the claim's start.
		{"late prev ending past the claim", []Header{h(5, 1, 1, 4, 90, 30), h(6, 2, 6, 5, 100, 0), h(7, 2, 6, 6, 100, 10)},
			heldBelow(100), []uint64{6, 7}, 110},
		// The predecessor's number relanded by the same object.
		{"prev relanded identical", []Header{h(5, 1, 1, 4, 90, 10), fill(6, 2), h(7, 2, 7, 5, 100, 0), h(8, 2, 7, 7, 100, 10)},
			heldBelow(100), []uint64{5, 7, 8}, 110},
	}
	for _, tc := range cases {
		c, err := walk(tc.hs, tc.held)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got []uint64
		for _, o := range c.Objects {
			got = append(got, o.Seq)
		}
		if len(got) != len(tc.want) || c.End(0) != tc.end {
			t.Errorf("%s: chain %v end %d, want %v end %d", tc.name, got, c.End(0), tc.want, tc.end)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: chain %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}

// TestReview51ReclaimTwiceBeforeAnAck: an older writer's late objects
// take two of W's numbers in a row: the first breaks W's run, W claims
// again, and the second takes the first data number after that claim,
// before W acknowledged anything past it. The second reclaim must find
// the chain ending with W's new claim (the run's end moved to it), not
// report W deposed though it holds the lease; the send is acknowledged
// and reads back at its offset.
func TestReview51ReclaimTwiceBeforeAnAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &faultBucket{Bucket: tier.NewMem()}
		n, err := start(t, b, newMemLog(0), 0, Config{Batch: 1000, Linger: time.Millisecond,
			Fence: func() (int64, error) { return 2, nil }})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		if err := <-a.send(n, "first", 1000, time.Time{}); err != nil { // #2
			t.Fatal(err)
		}
		// An older writer (epoch 1, claim 1) had PUTs in flight at #3 and
		// #5: each lands just before W's PUT at that number.
		late := map[string]Header{
			Key("wal/", 3): {Seq: 3, Epoch: 1, Claim: 1, Prev: 2, Start: 1000},
			Key("wal/", 5): {Seq: 5, Epoch: 1, Claim: 1, Prev: 4, Start: 1000},
		}
		b.mu.Lock()
		b.hook = func(key string) putAction {
			if h, ok := late[key]; ok {
				delete(late, key)
				putObj(b.Bucket, h, record("old", 700))
			}
			return putPass
		}
		b.mu.Unlock()
		if err := <-a.send(n, "second", 1000, time.Time{}); err != nil {
			t.Fatalf("the send after two late objects: %v", err)
		}
		if err := n.stop(); err != nil {
			t.Fatalf("the writer stopped with %v", err)
		}
		if len(late) != 0 {
			t.Fatalf("late objects never landed: %v", late)
		}
		a.check(t, b, 0)
	})
}

func h51(seq uint64, epoch int64, claim, prev uint64, start, length int64) Header {
	return r51h(seq, epoch, claim, prev, start, length)
}

func memWith(hs []Header) tier.Bucket {
	b := tier.NewMem()
	for _, h := range hs {
		var p []byte
		if h.Length > 0 {
			p = record("x", int(h.Length))
		}
		putObj(b, h, p)
	}
	return b
}

// named returns claim h naming its predecessor's writer.
func named(h Header, epoch int64, claim uint64) Header {
	h.PrevEpoch, h.PrevClaim = epoch, claim
	return h
}

// TestReview51FullTrimThenADeposedWritersLatePut: W (epoch 1) acknowledges
// [0,2000), the segments come to hold it and W trims; W's next PUTs (#4,
// #5) are held in the network and W is deposed. V (epoch 2) claims,
// acknowledges [2000,3500) and trims to there. W's PUTs then land where
// their numbers are free. A trim never deletes the chain's newest object,
// so V's stays listed, W's late object is an older writer's and the walk
// skips it: a fresh disk at 3500 gets nothing of W's. Had the trims
// deleted everything, numbers would have started again at #1 below W's,
// and W's never-acknowledged bytes, overlapping V's acknowledged ones,
// would have been the chain's tail.
func TestReview51FullTrimThenADeposedWritersLatePut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &faultBucket{Bucket: tier.NewMem()}
		cfg := func(epoch int64) Config {
			return Config{Batch: 1000, Linger: time.Millisecond, Fence: func() (int64, error) { return epoch, nil }}
		}
		w, err := start(t, b, newMemLog(0), 0, cfg(1))
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		for i := range 2 {
			if err := <-a.send(w, fmt.Sprintf("w%d", i), 1000, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		w.w.Trim(2000)
		synctest.Wait()
		var deposed atomic.Bool // W's PUTs from now on: the first attempt held, the rest lost
		b.mu.Lock()
		b.hook = func(key string) putAction {
			switch {
			case deposed.Load():
				return putPass
			case b.held[key] != nil:
				return putFail
			}
			return putHold
		}
		b.mu.Unlock()
		for i := range 2 {
			a.send(w, fmt.Sprintf("late%d", i), 1000, time.Time{})
		}
		synctest.Wait()
		_ = w.stop()
		deposed.Store(true)

		v, err := start(t, b, newMemLog(2000), 2000, cfg(2))
		if err != nil {
			t.Fatal(err)
		}
		if err := <-a.send(v, "v", 1500, time.Time{}); err != nil {
			t.Fatal(err)
		}
		v.w.Trim(3500)
		synctest.Wait()
		_ = v.stop()
		b.mu.Lock()
		var keys []string
		for k := range b.held {
			keys = append(keys, k)
		}
		b.mu.Unlock()
		if len(keys) == 0 {
			t.Fatal("no PUT of W's was held: the test cannot land one late")
		}
		landed := 0
		for _, k := range keys {
			if b.land(k) == nil {
				landed++
			}
		}
		if landed == 0 {
			t.Fatal("none of W's late PUTs found its number free: the test shows nothing")
		}
		c, err := Read(ctx, b, "wal/")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range c.Live(3500) {
			t.Errorf("Live(3500) holds %s (chain %v): a deposed writer's never-acknowledged bytes", o, c.Objects)
		}
		fresh := newMemLog(3500)
		if _, err := Reconcile(ctx, b, "wal/", c, 3500, fresh); err != nil {
			t.Fatalf("a fresh disk at 3500: %v", err)
		}
		if fresh.MaxPhysOffset() != 3500 {
			t.Fatalf("a fresh disk at 3500 ends at %d: it took bytes nobody acknowledged", fresh.MaxPhysOffset())
		}
	})
}
