package wal

// A review's cases against reading the WAL from the segments' end
// (ReadFrom), in-order trims and retried log reads: each failed on the
// first form of ReadFrom.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// TestReadFromFloorKeepsTheNewestWritersView: a deposed writer A had #3
// and #4 in flight; B took over, claimed #3 at 1000 and wrote nothing
// more; A's #4 [2000,3000) landed late above B's claim (the shape of
// TestLateWriteAboveTheClaimDoesNotDeposeTheNewWriter, B idle). The
// segments then hold the log up to 1000 (B's idle segment sealed by age
// and uploaded). Read (floor 0) skips #4: an older writer's object after
// a newer claim. ReadFrom(1000) drops B's claim (End 1000 <= floor), so
// the walk never sees B's incarnation, and takes A's unacknowledged #4
// for the chain.
//
// Consequences shown below: (1) B restarting on its own intact disk
// fails in Reconcile with ErrGap, on every start (nothing trims while no
// writer runs); (2) on an empty disk, walRestorePoint would start the log
// at #4's Start (the "resumed past the segments' end" case), Reconcile
// appends A's deposed bytes, and the new claim continues #4: after that
// Read with floor 0 (walHolds, the restore judge; reclaim) is ErrCorrupt.
func TestReadFromFloorKeepsTheNewestWritersView(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &faultBucket{Bucket: tier.NewMem()}
		var holdA atomic.Bool
		holdA.Store(true)
		b.hook = func(key string) putAction {
			if holdA.Load() && (strings.HasSuffix(key, fmt.Sprintf("%020d", 3)) || strings.HasSuffix(key, fmt.Sprintf("%020d", 4))) {
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
		a.send(A, "a2", 1000, time.Time{}) // #3, held
		a.send(A, "a3", 1000, time.Time{}) // #4, held
		synctest.Wait()
		holdA.Store(false)
		logB := newMemLog(0)
		logB.add(record("a1", 1000))
		B, err := start(t, b, logB, 0, Config{Linger: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if B.w.claim != 3 {
			t.Fatalf("B claimed #%d, want #3", B.w.claim)
		}
		if err := b.land(Key("wal/", 4)); err != nil {
			t.Fatalf("A's late #4: %v", err)
		}
		_ = A.stop()
		_ = B.stop() // B idle: it never hit #4
		full, err := Read(ctx, b, "wal/")
		if err != nil {
			t.Fatal(err)
		}
		if full.End(1000) != 1000 {
			t.Fatalf("Read: chain ends at %d, want 1000 (objects %v skipped %v)", full.End(1000), full.Objects, full.Skipped)
		}
		const floor = 1000 // the segments hold a1
		c, err := ReadFrom(ctx, b, "wal/", floor)
		if err != nil {
			t.Fatal(err)
		}
		if end := c.End(floor); end != 1000 {
			t.Errorf("ReadFrom(%d): chain ends at %d, want 1000: A's deposed, unacknowledged #4 is taken for the chain (objects %v, Read's %v)",
				floor, end, c.Objects, full.Objects)
		}
		// (1) B's own disk, intact.
		if _, err := Reconcile(ctx, b, "wal/", c, floor, logB); err != nil {
			t.Errorf("B restarting on its intact disk cannot reconcile: %v", err)
		}
		// (2) An empty disk: the log starts where the live part starts.
		live := c.Live(floor)
		if len(live) == 0 {
			return
		}
		fresh := newMemLog(max(floor, live[0].Start))
		end, err := Reconcile(ctx, b, "wal/", c, floor, fresh)
		if err != nil {
			t.Fatalf("fresh reconcile: %v", err)
		}
		w := NewWriter(Config{Bucket: b, Log: fresh}, c, end)
		if err := w.Claim(ctx); err != nil {
			t.Fatalf("claim: %v", err)
		}
		t.Logf("fresh disk restored [%d,%d): A's unacknowledged a3; claimed #%d continuing #%d", fresh.base, fresh.MaxPhysOffset(), w.claim, w.prev)
		if _, err := Read(ctx, b, "wal/"); err != nil {
			t.Errorf("after a claim over ReadFrom's chain, Read (walHolds, reclaim) fails: %v", err)
		}
	})
}

// TestReadFromHolesAreFreeNumbers: ReadFrom computes Chain.Holes over the
// kept headers only, so the numbers of the objects it dropped below the
// floor count as holes when a kept object lies below them (a filler an
// earlier claim put, not yet trimmed: trims stop at the first failed
// DELETE, or the broker died between the manifest commit and the trim).
// The next writer's Claim then puts a filler at a taken number:
// ErrConflict; recoverWAL reads again with the same floor and gets the
// same holes, nine times, and the broker does not start; nothing trims
// while no writer runs, so it never will.
func TestReadFromHolesAreFreeNumbers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &faultBucket{Bucket: tier.NewMem()}
		var holdA atomic.Bool
		holdA.Store(true)
		b.hook = func(key string) putAction {
			if holdA.Load() && strings.HasSuffix(key, fmt.Sprintf("%020d", 3)) {
				return putHold // A's #3 never lands
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
		a.send(A, "a2", 1000, time.Time{}) // #3, never lands
		a.send(A, "a3", 1000, time.Time{}) // #4 [2000,3000)
		synctest.Wait()
		_ = A.stop()
		holdA.Store(false)
		// B: fills #3, claims #5 at 1000, writes #6..#8.
		logB := newMemLog(0)
		logB.add(record("a1", 1000))
		B, err := start(t, b, logB, 0, Config{Batch: 1000, Linger: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := <-a.send(B, fmt.Sprintf("b%d", i), 1000, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		_ = B.stop()       // dies before its trim
		const floor = 3000 // the segments hold a1, b0, b1
		c, err := ReadFrom(ctx, b, "wal/", floor)
		if err != nil {
			t.Fatal(err)
		}
		listed := map[uint64]bool{}
		_ = b.List(ctx, "wal/", func(key string, _ int64) error {
			if s, ok := parseKey("wal/", key); ok {
				listed[s] = true
			}
			return nil
		})
		if bad := slices.DeleteFunc(slices.Clone(c.Holes), func(s uint64) bool { return !listed[s] }); len(bad) > 0 {
			t.Errorf("ReadFrom(%d): Holes %v name listed objects %v (objects %v, skipped %v)", floor, c.Holes, bad, c.Objects, c.Skipped)
		}
		// recoverWAL's loop: Reconcile, claim, on ErrConflict read again.
		for try := 0; ; try++ {
			end, err := Reconcile(ctx, b, "wal/", c, floor, logB)
			if err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			w := NewWriter(Config{Bucket: b, Log: logB}, c, end)
			err = w.Claim(ctx)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrConflict) || try >= 8 {
				t.Fatalf("the restarted master cannot claim the WAL (try %d): %v", try+1, err)
			}
			if c, err = ReadFrom(ctx, b, "wal/", floor); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestReadFromRunWithAHoleAfterADroppedClaim: header shape. B claimed #3
// at 1000; its #4 never landed (crash), its #5 [2000,3000) did: nothing
// of B past its claim was acknowledged. Read: the run breaks at #4, the
// chain ends at B's claim. ReadFrom(1500) drops B's claim, and #5 (B's
// claim "trimmed") starts the chain: an unacknowledged run with a hole
// is taken for the chain (a fresh disk restores it past a gap), and a
// claim over it makes Read (floor 0) ErrCorrupt.
func TestReadFromRunWithAHoleAfterADroppedClaim(t *testing.T) {
	ctx := context.Background()
	b := tier.NewMem()
	p := func(name string) []byte { return record(name, 1000) }
	putObj(b, Header{Seq: 1, Epoch: 1, Claim: 1}, nil)
	putObj(b, Header{Seq: 2, Epoch: 1, Claim: 1, Prev: 1, Start: 0}, p("a1"))
	putObj(b, Header{Seq: 3, Epoch: 2, Claim: 3, Prev: 2, Start: 1000}, nil)
	putObj(b, Header{Seq: 5, Epoch: 2, Claim: 3, Prev: 4, Start: 2000}, p("b2"))
	full, err := Read(ctx, b, "wal/")
	if err != nil || full.End(0) != 1000 {
		t.Fatalf("Read: end %d, %v", full.End(0), err)
	}
	c, err := ReadFrom(ctx, b, "wal/", 1500)
	if err != nil {
		t.Fatal(err)
	}
	if end := c.End(1500); end != 1500 {
		t.Errorf("ReadFrom(1500): chain ends at %d (objects %v): B's run with a hole (#4 missing) is taken for the chain", end, c.Objects)
	}
	w := NewWriter(Config{Bucket: b, Log: newMemLog(3000), Fence: func() (int64, error) { return 3, nil }}, c, c.End(1500))
	if err := w.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(ctx, b, "wal/"); err != nil {
		t.Errorf("after a claim over ReadFrom's chain, Read fails: %v", err)
	}
}

// TestRestoreJudgeAfterALatePutBelowAClaim: the scenario of
// TestReadFromSkipsWhatTheSegmentsHold (a PUT landing late after its
// number was trimmed), plus a restart's claim, which every start makes.
// New's ReadFrom(floor) copes; but checkLocalData's walHolds(0) reads the
// whole listing: the late object starts the chain, the claim continues
// a trimmed object numbered above it, and the walk returns ErrCorrupt, so
// a broker with a data dir refuses to start (until a trim removes the
// late object; the restarted writer never ran to do it if it crashed
// again, or its first DELETE failed, which now stops the trim).
func TestRestoreJudgeAfterALatePutBelowAClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &faultBucket{Bucket: tier.NewMem()}
		l := newMemLog(0)
		n, err := start(t, b, l, 0, Config{Batch: 1000, Linger: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		for i := range 12 {
			if err := <-a.send(n, fmt.Sprintf("t%02d", i), 1000, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		c, _ := Read(ctx, b, "wal/")
		old := c.Objects[4]
		key := Key("wal/", old.Seq)
		body, err := objectBytes(ctx, b, key)
		if err != nil {
			t.Fatal(err)
		}
		n.w.Trim(10 * 1000)
		synctest.Wait()
		_ = n.stop()
		if _, err := b.Bucket.PutIf(ctx, key, bytes.NewReader(body), int64(len(body)), tier.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		// The broker restarts on its disk: New reads from the segments'
		// end and claims; it dies before its first trim.
		c, err = ReadFrom(ctx, b, "wal/", 10*1000)
		if err != nil {
			t.Fatal(err)
		}
		end, err := Reconcile(ctx, b, "wal/", c, 10*1000, l)
		if err != nil {
			t.Fatal(err)
		}
		w := NewWriter(Config{Bucket: b, Log: l}, c, end)
		if err := w.Claim(ctx); err != nil {
			t.Fatal(err)
		}
		// The next start: the restore judge (walHolds) reads the whole
		// listing, and, when it does not walk, from the segments' end.
		if _, err := ReadFrom(ctx, b, "wal/", 10*1000); err != nil {
			t.Errorf("ReadFrom(10000) (the restore judge's fallback) after a late PUT below a claim: %v", err)
		}
	})
}

// segEnd is broker/wire_tiering.go's segmentsEnd over [base,end) pairs.
func segEnd(segs [][2]int64, p int64) int64 {
	for moved := true; moved; {
		moved = false
		for _, s := range segs {
			if s[0] <= p && p < s[1] {
				p, moved = s[1], true
			}
		}
	}
	return p
}

// TestFloorPastAManifestGapTrimsUnlistedBytes: the uploader runs two
// uploads at once and commits whichever finishes (upload.Config
// Concurrency 2): the manifest can list [0,1000) and [2000,3000) while
// [1000,2000) is parked after a failed upload. bucketObjectsEnd is the
// highest End, 3000, not where the listed segments end contiguously. A
// restart on the same disk reads ReadFrom(3000): the object holding
// [1000,2000) goes to Skipped, so it is no longer inChain, Oldest skips
// it, and runWAL's Trim(segmentsEnd(m, Oldest())) deletes it though no
// segment holds its acknowledged bytes. (With Read, Oldest was 0 and the
// trim stopped at 1000.) Lose the disk before the parked upload retries
// and they are gone (the fresh-disk restore's Live(bucketObjectsEnd)
// already skips them: a pre-existing hole that this makes unrecoverable).
func TestFloorPastAManifestGapTrimsUnlistedBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &faultBucket{Bucket: tier.NewMem()}
		l := newMemLog(0)
		n, err := start(t, b, l, 0, Config{Batch: 1000, Linger: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		for i := range 4 {
			if err := <-a.send(n, fmt.Sprintf("t%02d", i), 1000, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		_ = n.stop()
		segs := [][2]int64{{0, 1000}, {2000, 3000}}
		floor := int64(3000) // bucketObjectsEnd: the highest End listed
		c, err := ReadFrom(ctx, b, "wal/", floor)
		if err != nil {
			t.Fatal(err)
		}
		end, err := Reconcile(ctx, b, "wal/", c, min(floor, l.MaxPhysOffset()), l)
		if err != nil {
			t.Fatal(err)
		}
		w := NewWriter(Config{Bucket: b, Log: l, Linger: time.Millisecond}, c, end)
		if err := w.Claim(ctx); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(rctx) }()
		w.Trim(segEnd(segs, w.Oldest())) // runWAL's tick
		synctest.Wait()
		cancel()
		<-done
		full, err := Read(ctx, b, "wal/")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range full.Objects {
			if o.Start == 1000 {
				return
			}
		}
		t.Errorf("the WAL object holding [1000,2000), which no listed segment holds, was trimmed (Oldest %d; left %v)", w.Oldest(), full.Objects)
	})
}

// TestLogReadFailureStillAnswersDeadlinesAndStops: passing check. While
// the log cannot be read, a send with a deadline is answered ErrTimeout
// at it, and stopping the writer answers the rest ErrClosed promptly.
func TestLogReadFailureStillAnswersDeadlinesAndStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &faultBucket{Bucket: tier.NewMem()}
		l := &failReadLog{memLog: newMemLog(0)}
		n, err := start(t, b, l.memLog, 0, Config{Batch: 1000, Linger: time.Millisecond, Log: l})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		l.fail.Store(true)
		t0 := time.Now()
		d1 := a.send(n, "deadline", 500, t0.Add(2*time.Second))
		if err := <-d1; !errors.Is(err, ErrTimeout) || time.Since(t0) > 2*time.Second+10*time.Millisecond {
			t.Errorf("send with a deadline: %v after %v", err, time.Since(t0))
		}
		d2 := a.send(n, "nodeadline", 500, time.Time{})
		time.Sleep(time.Minute)
		t1 := time.Now()
		if err := n.stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
		if err := <-d2; !errors.Is(err, ErrClosed) {
			t.Errorf("waiting send at stop: %v", err)
		}
		if time.Since(t1) > 0 {
			t.Errorf("stop took %v", time.Since(t1))
		}
	})
}
