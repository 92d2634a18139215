package wal

// A second review's cases against the WAL walk from the segments' end:
// each failed on the walk by a floor (20c514f).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// TestFloorBelowARestoreGapDropsAckedObjects: a broker restored on an
// empty disk with no WAL tail resumes its log past the checkpoint's
// reservations (restore.FreshPoint: start = max(Reserved, HWM,
// objectsEnd)); nothing is ever written between, so the manifest's
// commitlog objects are [0,1000) and then [5000, ...): walFloor is 1000
// for as long as the objects below the gap are retained, while the trim
// point (segmentsEnd(m, Oldest)) runs past the gap. A PUT of the writer's
// own object that lands after its number was trimmed (the seed-129 shape)
// then starts the chain, and the next listed object, whose predecessor
// was trimmed, starts at 15000 > floor: rule (2) does not apply, the run
// "breaks", and every acknowledged object past the trim point falls out
// of the chain (ReadFrom(walFloor) in New, recoverWAL, watchWAL).
func TestFloorBelowARestoreGapDropsAckedObjects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &faultBucket{Bucket: tier.NewMem()}
		const resumed = 5000
		n, err := start(t, b, newMemLog(resumed), resumed, Config{Batch: 1000, Linger: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		for i := range 12 {
			if err := <-a.send(n, fmt.Sprintf("t%02d", i), 1000, time.Time{}); err != nil {
				_ = n.stop()
				t.Fatal(err)
			}
		}
		c, err := Read(ctx, b, "wal/")
		if err != nil {
			_ = n.stop()
			t.Fatal(err)
		}
		old := c.Objects[4]
		key := Key("wal/", old.Seq)
		body, err := objectBytes(ctx, b, key)
		if err != nil {
			t.Fatal(err)
		}
		segs := [][2]int64{{0, 1000}, {resumed, resumed + 10*1000}}
		n.w.Trim(segEnd(segs, n.w.Oldest())) // runWAL's tick: 15000
		synctest.Wait()
		_ = n.stop()
		if _, err := b.Stat(ctx, key); err == nil {
			t.Fatalf("%s was not trimmed", key)
		}
		if _, err := b.Bucket.PutIf(ctx, key, bytes.NewReader(body), int64(len(body)), tier.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		// The reader asks the segments about each offset (ReadHeld), so
		// the restore gap below them does not stop it.
		c, err = ReadHeld(ctx, b, "wal/", heldBy(segs))
		if err != nil {
			t.Fatalf("ReadHeld: %v", err)
		}
		if end := c.End(0); end != resumed+12*1000 {
			t.Errorf("ReadHeld after a restore gap: chain ends at %d, want %d: acknowledged objects dropped (objects %v, skipped %v)",
				end, resumed+12*1000, c.Objects, c.Skipped)
		}
		// A fresh disk: walRestorePoint(c, bucketObjectsEnd) sees no live
		// part, restorePoint resumes past the reservations: [15000,17000),
		// acknowledged, is lost.
		if live := c.Live(resumed + 10*1000); len(live) == 0 {
			t.Errorf("Live(bucketObjectsEnd=%d) is empty: a fresh-disk restore loses the acknowledged [15000,17000)", resumed+10*1000)
		}
	})
}

// TestOlderLatePutAtATrimmedClaimNumber: A had #3 in flight when it lost
// the lease; B read #1,#2 and claimed #3 first (A's PUT is held in the
// network). B ships #4, #5 (acknowledged), the segments take [0,2000) and
// B trims #1..#4 (its claim included: End 1000 <= 2000). A's #3 then
// lands (IfAbsent: the number is free). The walk takes A's #3 for a
// chain start (its claim #1 is not listed), then B's #5: a newer writer,
// not a claim, whose claim number #3 is listed (by A's object): ErrCorrupt,
// with floor 0 and with walFloor. New, the restore judge (both reads) and
// a slave's watch fail on every start; nothing runs to delete #3.
func TestOlderLatePutAtATrimmedClaimNumber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &faultBucket{Bucket: tier.NewMem()}
		var holdA atomic.Bool
		holdA.Store(true)
		b.hook = func(key string) putAction {
			if holdA.Load() && strings.HasSuffix(key, fmt.Sprintf("%020d", 3)) {
				return putHold
			}
			return putPass
		}
		logA := newMemLog(0)
		A, err := start(t, b, logA, 0, Config{Batch: 1000, Linger: time.Millisecond, MaxBackoff: time.Hour, MinBackoff: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		if err := <-a.send(A, "a1", 1000, time.Time{}); err != nil { // #2
			t.Fatal(err)
		}
		a.send(A, "a2", 1000, time.Time{}) // #3, held in the network
		synctest.Wait()
		_ = A.stop()
		holdA.Store(false)
		logB := newMemLog(0)
		logB.add(record("a1", 1000))
		B, err := start(t, b, logB, 0, Config{Batch: 1000, Linger: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if B.w.claim != 3 {
			t.Fatalf("B claimed #%d, want #3", B.w.claim)
		}
		for i := range 2 {
			if err := <-a.send(B, fmt.Sprintf("b%d", i), 1000, time.Time{}); err != nil { // #4 [1000,2000), #5 [2000,3000)
				t.Fatal(err)
			}
		}
		B.w.Trim(2000)
		synctest.Wait()
		_ = B.stop()
		if _, err := b.Stat(ctx, Key("wal/", 3)); err == nil {
			t.Fatal("B's claim #3 was not trimmed")
		}
		if err := b.land(Key("wal/", 3)); err != nil {
			t.Fatalf("A's late #3: %v", err)
		}
		for _, floor := range []int64{0, 2000} {
			c, err := ReadFrom(ctx, b, "wal/", floor)
			if err != nil {
				t.Errorf("ReadFrom(%d) after an older writer's PUT landed at the newest writer's trimmed claim number: %v", floor, err)
				continue
			}
			if end := c.End(2000); end != 3000 {
				t.Errorf("ReadFrom(%d): chain ends at %d, want 3000 (objects %v)", floor, end, c.Objects)
			}
		}
	})
}

// TestOlderLatePutAtATrimmedPrevUnderAListedClaim: walk level. A (epoch
// 1) had #3 [1000,2000) in flight; X (epoch 2) claimed #3 first (Prev 2,
// at 1000) and wrote nothing; W (epoch 3) claimed #4 continuing X's #3
// and acknowledged #5 [1000,2000). W's trim to 1000 deletes #1..#3 and
// its DELETE of #4 (the claim) fails (the trim stops there). A's held #3
// lands. The walk keeps A's #3 (its claim trimmed), and W's claim names
// #3: found in the chain, but it is A's object, ending past the claim's
// Start: ErrCorrupt. With X's #3 gone, #3 counts as W's Prev.
func TestOlderLatePutAtATrimmedPrevUnderAListedClaim(t *testing.T) {
	p := func(name string) []byte { return record(name, 1000) }
	for _, floor := range []int64{0, 1000} {
		ctx := context.Background()
		b := tier.NewMem()
		putObj(b, Header{Seq: 3, Epoch: 1, Claim: 1, Prev: 2, Start: 1000}, p("a2")) // A's, late
		putObj(b, Header{Seq: 4, Epoch: 3, Claim: 4, Prev: 3, Start: 1000}, nil)     // W's claim, DELETE failed
		putObj(b, Header{Seq: 5, Epoch: 3, Claim: 4, Prev: 4, Start: 1000}, p("w1"))
		c, err := ReadFrom(ctx, b, "wal/", floor)
		if err != nil {
			t.Errorf("ReadFrom(%d): %v", floor, err)
			continue
		}
		if end := c.End(1000); end != 2000 || c.Last() != 5 {
			t.Errorf("ReadFrom(%d): end %d last #%d, want 2000 #5 (objects %v)", floor, end, c.Last(), c.Objects)
		}
	}
}

var _ = errors.Is

// TestReview50SafeShapes: shapes checked and found safe (they pass).
func TestReview50SafeShapes(t *testing.T) {
	h := func(seq uint64, epoch int64, claim, prev uint64, start, length int64) Header {
		return Header{Seq: seq, Epoch: epoch, Claim: claim, Prev: prev, Start: start, Length: length}
	}
	fill := func(seq uint64, epoch int64) Header { return Header{Seq: seq, Claim: seq, Epoch: epoch, Filler: true} }
	cases := []struct {
		name  string
		hs    []Header
		floor int64
		want  []uint64
		end   int64
	}{
		// W's #3 never landed, #4 did (unacked); X filled #3, claimed #5
		// continuing #2 with other bytes; X's trim stopped at #2. Rule 2
		// puts W's #4 back (its Prev is a filler), X's claim cuts it off.
		{"rule 2 past a real hole, later claim cuts", []Header{h(2, 1, 1, 1, 0, 10), fill(3, 2), h(4, 1, 1, 3, 20, 10),
			h(5, 2, 5, 2, 10, 0), h(6, 2, 5, 5, 10, 10), h(7, 2, 5, 6, 20, 10), h(8, 2, 5, 7, 30, 10)}, 30, []uint64{2, 5, 6, 7, 8}, 40},
		// The same, #2 trimmed too: W's #4 starts the chain, X's claim
		// (Prev #2 not listed) resets it.
		{"claim's prev trimmed resets", []Header{fill(3, 2), h(4, 1, 1, 3, 20, 10),
			h(5, 2, 5, 2, 10, 0), h(6, 2, 5, 5, 10, 10), h(7, 2, 5, 6, 20, 10)}, 20, []uint64{5, 6, 7}, 30},
		// An older writer's late PUT below the newest writer's data,
		// whose claim is trimmed: reset.
		{"older late put below newer data", []Header{h(3, 1, 1, 2, 10, 10), h(7, 2, 5, 6, 20, 10), h(8, 2, 5, 7, 30, 10)}, 30, []uint64{7, 8}, 40},
		// The writer's own late PUT below its later objects, floor past
		// them: rule 2 skips the gap; Live(floor) excludes the leftover.
		{"own late put, floor covers", []Header{h(4, 1, 1, 3, 30, 10), h(9, 1, 1, 8, 80, 10), h(10, 1, 1, 9, 90, 10)}, 90, []uint64{4, 9, 10}, 100},
		// A claim's own fillers below it are not predecessors.
		{"filler below the claim, run after", []Header{h(2, 1, 1, 1, 0, 10), fill(3, 2), h(4, 2, 4, 2, 10, 0), h(5, 2, 4, 4, 10, 10)}, 0, []uint64{2, 4, 5}, 20},
	}
	for _, tc := range cases {
		c, err := walk(tc.hs, heldBelow(tc.floor))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got []uint64
		for _, o := range c.Objects {
			got = append(got, o.Seq)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || c.End(0) != tc.end {
			t.Errorf("%s: chain %v end %d, want %v end %d", tc.name, got, c.End(0), tc.want, tc.end)
		}
		for _, o := range c.Live(tc.floor) {
			if o.Start < tc.floor && o.End() <= tc.floor {
				t.Errorf("%s: Live(%d) holds %s", tc.name, tc.floor, o)
			}
		}
	}
}

// heldBelow is ReadFrom's held: the segments hold the log below floor.
func heldBelow(floor int64) func(int64) bool {
	if floor <= 0 {
		return nil
	}
	return func(off int64) bool { return off < floor }
}

// heldBy is the broker's walHeld over [base,end) pairs.
func heldBy(segs [][2]int64) func(int64) bool {
	return func(off int64) bool {
		for _, r := range segs {
			if r[0] <= off && off < r[1] {
				return true
			}
		}
		return false
	}
}
