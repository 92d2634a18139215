package wal

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// A deposed writer's PUT that lands late, in a hole the new writer saw:
// the new writer's filler takes the number first, so the old writer's run
// ends before it and it acknowledges nothing the new chain lacks.
func TestLateWriteInAHoleCannotCompleteAnOldRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &faultBucket{Bucket: tier.NewMem()}
		// A's objects: claim #1, then #2 lands, #3 is held back (a late
		// write), #4 lands.
		b.hook = func(key string) putAction {
			if strings.HasSuffix(key, fmt.Sprintf("%020d", 3)) && b.held == nil {
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
		d1 := a.send(A, "a1", 1000, time.Time{}) // object #2
		d2 := a.send(A, "a2", 1000, time.Time{}) // object #3, held
		d3 := a.send(A, "a3", 1000, time.Time{}) // object #4
		if err := <-d1; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := A.w.Durable(); got != 1000 {
			t.Fatalf("A durable at %d, want 1000 (#3 is not in the bucket)", got)
		}
		// B takes over from a copy holding a1 only.
		logB := newMemLog(0)
		logB.add(record("a1", 1000))
		B, err := start(t, b, logB, 0, Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.land(Key("wal/", 3)); !errors.Is(err, tier.ErrPreconditionFailed) {
			t.Fatalf("A's late #3 landed (err %v): B's filler should hold the number", err)
		}
		// A retries #3 (its backoff ends): taken by B's filler: deposed.
		time.Sleep(2 * time.Hour)
		for _, d := range []chan error{d2, d3} {
			if err := <-d; !errors.Is(err, ErrDeposed) {
				t.Fatalf("A's send after the hole: %v, want ErrDeposed", err)
			}
		}
		db := a.send(B, "b1", 500, time.Time{})
		if err := <-db; err != nil {
			t.Fatal(err)
		}
		_ = A.stop()
		_ = B.stop()
		restored := a.check(t, b, 0)
		if got := restored.MaxPhysOffset(); got != 1500 {
			t.Errorf("restored log ends at %d, want 1500 (a1, b1)", got)
		}
	})
}

// The same late write landing before B fills the hole: B's filler fails,
// B reads again and continues A's whole run, and A's retry finds its own
// object and acknowledges it.
func TestLateWriteBeforeTheFillerIsContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &faultBucket{Bucket: tier.NewMem()}
		b.hook = func(key string) putAction {
			if strings.HasSuffix(key, fmt.Sprintf("%020d", 3)) && b.held == nil {
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
		ds := []chan error{a.send(A, "a1", 1000, time.Time{}), a.send(A, "a2", 1000, time.Time{}), a.send(A, "a3", 1000, time.Time{})}
		<-ds[0]
		synctest.Wait()
		if err := b.land(Key("wal/", 3)); err != nil {
			t.Fatal(err)
		}
		logB := newMemLog(0)
		B, err := start(t, b, logB, 0, Config{})
		if err != nil {
			t.Fatal(err)
		}
		if got := logB.MaxPhysOffset(); got != 3000 {
			t.Fatalf("B reconciled to %d, want 3000 (A's whole run)", got)
		}
		time.Sleep(2 * time.Hour) // A's retry of #3 finds its own object
		for _, d := range ds[1:] {
			if err := <-d; err != nil {
				t.Fatalf("A's send: %v (its objects are all in the chain)", err)
			}
		}
		_ = A.stop()
		_ = B.stop()
		a.check(t, b, 0)
	})
}

func TestReconcileAppendsCutsAndKeeps(t *testing.T) {
	ctx := context.Background()
	b := tier.NewMem()
	r1, r2, r3 := record("r1", 100), record("r2", 100), record("r3", 100)
	putObj(b, Header{Seq: 1, Claim: 1, Epoch: 1, Start: 0}, nil)
	putObj(b, Header{Seq: 2, Claim: 1, Prev: 1, Epoch: 1, Start: 0}, append(append([]byte{}, r1...), r2...))
	putObj(b, Header{Seq: 3, Claim: 1, Prev: 2, Epoch: 1, Start: 200}, r3)
	c, err := Read(ctx, b, "wal/")
	if err != nil {
		t.Fatal(err)
	}
	// Shorter: a power cut took r2 and r3.
	short := newMemLog(0)
	short.add(r1)
	if end, err := Reconcile(ctx, b, "wal/", c, 0, short); err != nil || end != 300 || short.MaxPhysOffset() != 300 {
		t.Fatalf("short log: end %d, log %d, err %v; want 300", end, short.MaxPhysOffset(), err)
	}
	// Divergent: a deposed writer's r2' in place of r2, then more.
	div := newMemLog(0)
	div.add(r1)
	div.add(record("XX", 100))
	div.add(record("YY", 50))
	if end, err := Reconcile(ctx, b, "wal/", c, 0, div); err != nil || end != 300 {
		t.Fatalf("divergent: end %d err %v", end, err)
	}
	if len(div.cut) != 1 || div.cut[0] != 0 || string(div.bytesAt(100, 200)) != string(r2) || div.MaxPhysOffset() != 300 {
		t.Fatalf("divergent log: cut at %v, ends %d; want cut at the differing object's start and the chain's bytes", div.cut, div.MaxPhysOffset())
	}
	// Longer and agreeing: kept, nothing read but headers.
	long := newMemLog(0)
	for _, r := range [][]byte{r1, r2, r3, record("local", 80)} {
		long.add(r)
	}
	if end, err := Reconcile(ctx, b, "wal/", c, 0, long); err != nil || end != 300 || long.MaxPhysOffset() != 380 || len(long.cut) != 0 {
		t.Fatalf("longer log: end %d, log %d, cuts %v, err %v", end, long.MaxPhysOffset(), long.cut, err)
	}
	// From past the first object: only the live part matters; a fresh
	// disk restored at the segments' end 200 gets r3.
	fresh := newMemLog(200)
	if end, err := Reconcile(ctx, b, "wal/", c, 200, fresh); err != nil || end != 300 || string(fresh.bytesAt(200, 300)) != string(r3) {
		t.Fatalf("fresh at 200: end %d err %v", end, err)
	}
	// A gap: the segments end at 50 and the local log there, but the
	// WAL's live part starts at 200: the bytes between are in neither.
	if _, err := Reconcile(ctx, b, "wal/", &Chain{Objects: c.Objects[2:]}, 50, newMemLog(50)); !errors.Is(err, ErrGap) {
		t.Fatalf("gap: %v, want ErrGap", err)
	}
	// A log that resumed past the segments' end (a restore past the
	// reservations) starts where the WAL's first live object does.
	jumped := newMemLog(200)
	if end, err := Reconcile(ctx, b, "wal/", &Chain{Objects: c.Objects[2:]}, 50, jumped); err != nil || end != 300 || jumped.MaxPhysOffset() != 300 {
		t.Fatalf("resumed log: end %d err %v", end, err)
	}
}

func TestWalkRules(t *testing.T) {
	h := func(seq uint64, epoch int64, claim, prev uint64, start, length int64) Header {
		return Header{Seq: seq, Epoch: epoch, Claim: claim, Prev: prev, Start: start, Length: length}
	}
	cases := []struct {
		name string
		hs   []Header
		want []uint64 // seqs in the chain
		end  int64
	}{
		{"one run", []Header{h(1, 1, 1, 0, 0, 0), h(2, 1, 1, 1, 0, 10), h(3, 1, 1, 2, 10, 10)}, []uint64{1, 2, 3}, 20},
		{"hole ends the run", []Header{h(1, 1, 1, 0, 0, 0), h(2, 1, 1, 1, 0, 10), h(4, 1, 1, 3, 20, 10)}, []uint64{1, 2}, 10},
		{"filler in the hole", []Header{h(1, 1, 1, 0, 0, 0), h(2, 1, 1, 1, 0, 10), {Seq: 3, Claim: 3, Epoch: 2, Filler: true},
			h(4, 1, 1, 3, 20, 10), h(5, 2, 5, 2, 10, 0), h(6, 2, 5, 5, 10, 7)}, []uint64{1, 2, 5, 6}, 17},
		{"deposed writer after a claim", []Header{h(1, 1, 1, 0, 0, 0), h(2, 1, 1, 1, 0, 10), h(3, 2, 3, 2, 10, 0), h(4, 1, 1, 3, 10, 10), h(5, 2, 3, 3, 10, 5)}, []uint64{1, 2, 3, 5}, 15},
		{"claim drops what it did not see", []Header{h(1, 1, 1, 0, 0, 0), h(2, 1, 1, 1, 0, 10), h(3, 1, 1, 2, 10, 10), h(4, 2, 4, 2, 10, 0), h(5, 2, 4, 4, 10, 3)}, []uint64{1, 2, 4, 5}, 13},
		{"same epoch, later claim wins", []Header{h(1, 1, 1, 0, 0, 0), h(2, 1, 1, 1, 0, 10), h(3, 1, 3, 2, 10, 0), h(4, 1, 3, 3, 10, 4)}, []uint64{1, 2, 3, 4}, 14},
		{"trimmed claim starts the chain", []Header{h(7, 3, 5, 6, 100, 10), h(8, 3, 5, 7, 110, 10)}, []uint64{7, 8}, 120},
	}
	for _, tc := range cases {
		c, err := walk(tc.hs, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []uint64
		for _, o := range c.Objects {
			got = append(got, o.Seq)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || c.End(0) != tc.end {
			t.Errorf("%s: chain %v end %d, want %v end %d", tc.name, got, c.End(0), tc.want, tc.end)
		}
	}
	// A newer claim continuing an object the walk does not keep is an
	// error, never a silent skip.
	if _, err := walk([]Header{h(1, 1, 1, 0, 0, 0), h(2, 1, 1, 1, 0, 10), h(4, 1, 1, 3, 20, 10), h(5, 2, 5, 4, 30, 0)}, nil); !errors.Is(err, ErrCorrupt) {
		t.Errorf("claim continuing a skipped object: %v, want ErrCorrupt", err)
	}
}

func TestTrimDeletesWhatSegmentsHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &faultBucket{Bucket: tier.NewMem()}
		n, err := start(t, b, newMemLog(0), 0, Config{Batch: 1000, Linger: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		for i := range 5 {
			if err := <-a.send(n, fmt.Sprintf("t%d", i), 1000, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		n.w.Trim(2500) // segments hold [0, 2500): objects ending at or before 2000 go
		synctest.Wait()
		c, err := Read(context.Background(), b, "wal/")
		if err != nil {
			t.Fatal(err)
		}
		if first := c.Objects[0]; first.Start != 2000 {
			t.Fatalf("after Trim(2500) the chain starts with %s, want the object at 2000", first)
		}
		if live := c.Live(2500); len(live) == 0 || live[0].Start > 2500 {
			t.Fatalf("live part past 2500: %v", live)
		}
		n.w.Trim(5000) // everything but the newest object: the writer continues from there
		synctest.Wait()
		c, _ = Read(context.Background(), b, "wal/")
		if len(c.Objects) != 1 || len(c.Skipped) != 0 || c.Objects[0].End() != 5000 {
			t.Fatalf("after Trim(5000) the chain is %v (skipped %v), want only the newest object, ending at 5000", c.Objects, c.Skipped)
		}
		if err := <-a.send(n, "after", 300, time.Time{}); err != nil {
			t.Fatal(err)
		}
		_ = n.stop()
		// A fresh disk at the segments' end 5000 gets the new record.
		fresh := a.check(t, b, 5000)
		if fresh.MaxPhysOffset() != 5300 {
			t.Fatalf("fresh log ends at %d, want 5300", fresh.MaxPhysOffset())
		}
	})
}

// A bucket that answers 503 SlowDown for a while: sends wait, with
// backoff, and are all committed once it recovers; a send whose deadline
// passes first is told so, and the writer goes on.
func TestSlowDownBacksOffAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &faultBucket{Bucket: tier.NewMem()}
		n, err := start(t, b, newMemLog(0), 0, Config{})
		if err != nil {
			t.Fatal(err)
		}
		until := time.Now().Add(20 * time.Second)
		b.mu.Lock()
		b.hook = func(string) putAction {
			if time.Now().Before(until) {
				return putSlow
			}
			return putPass
		}
		b.mu.Unlock()
		var a acked
		before := b.putCount()
		short := a.send(n, "short-deadline", 200, time.Now().Add(5*time.Second))
		var long []chan error
		for i := range 20 {
			long = append(long, a.send(n, fmt.Sprintf("l%d", i), 200, time.Time{}))
		}
		if err := <-short; !errors.Is(err, ErrTimeout) {
			t.Fatalf("send with a 5 s deadline during 20 s of SlowDown: %v, want ErrTimeout", err)
		}
		for _, d := range long {
			if err := <-d; err != nil {
				t.Fatalf("send after the bucket recovered: %v", err)
			}
		}
		// Backoff: 20 s of SlowDown cost a bounded number of attempts
		// (jittered doubling from 50 ms to 5 s: well under 40).
		if tries := b.putCount() - before; tries > 40 {
			t.Errorf("%d PUT attempts during 20 s of SlowDown", tries)
		}
		_ = n.stop()
		a.check(t, b, 0)
	})
}

// Random interleavings of two writers taking turns, faults on every PUT
// (lost responses, failures, late writes landing at random times): every
// record a writer acknowledged is restored at its offset.
func TestRandomTakeoversLoseNothingAcknowledged(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 40
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { randomTakeovers(t, uint64(seed)) })
		})
	}
}

func randomTakeovers(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := &faultBucket{Bucket: tier.NewMem()}
	hookRng := rand.New(rand.NewPCG(seed, 8)) // used under b.mu only
	b.hook = func(string) putAction {
		switch x := hookRng.IntN(20); {
		case x < 2:
			return putFail
		case x < 4:
			return putLose
		case x < 6:
			return putHold
		}
		return putPass
	}
	var a acked
	var nodes []*node // every writer started; older ones may keep running (deposed)
	var ds []chan error
	logs := []*memLog{newMemLog(0), newMemLog(0)}
	landSome := func() {
		b.mu.Lock()
		var keys []string
		for k := range b.held {
			keys = append(keys, k)
		}
		b.mu.Unlock()
		for _, k := range keys {
			if rng.IntN(2) == 0 {
				_ = b.land(k)
			}
		}
	}
	for round := range 6 {
		who := rng.IntN(2)
		if n := len(nodes); n > 0 && rng.IntN(2) == 0 {
			nodes[n-1].end() // a crash or stop; otherwise it keeps running, deposed
		}
		landSome()
		n, err := start(t, b, logs[who], 0, Config{Batch: 300 + rng.IntN(2000), Linger: time.Duration(1+rng.IntN(50)) * time.Millisecond,
			InFlight: 1 + rng.IntN(4), MinBackoff: time.Duration(1+rng.IntN(100)) * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
		if err != nil {
			t.Fatalf("round %d: start: %v", round, err)
		}
		nodes = append(nodes, n)
		for i := range 1 + rng.IntN(30) {
			w := n
			if len(nodes) > 1 && rng.IntN(4) == 0 {
				w = nodes[len(nodes)-2] // the deposed writer still takes sends
			}
			if w.ctx.Err() != nil {
				continue
			}
			ds = append(ds, a.send(w, fmt.Sprintf("%d-%d", round, i), 20+rng.IntN(400), time.Time{}))
			if rng.IntN(5) == 0 {
				time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
				landSome()
			}
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond) // some sends still waiting at the takeover
	}
	time.Sleep(time.Second)
	landSome()
	time.Sleep(time.Second)
	for _, n := range nodes {
		n.end()
	}
	for _, d := range ds {
		<-d
	}
	a.check(t, b, 0)
}

// TestTrimPastWhatWasShippedKeepsTheNewestObject: an idle writer (no
// send waits, not Active) leaves local-durable bytes unshipped; the
// segments then hold the log past them. The trim deletes every object but
// the newest, and the writer continues from the segments' end: its next
// object continues the newest (Prev) and starts past its end. A reader
// without the manifest (Read) keeps it in the chain, and a fresh disk at
// the segments' end gets the acknowledged record at its offset.
func TestTrimPastWhatWasShippedKeepsTheNewestObject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &faultBucket{Bucket: tier.NewMem()}
		n, err := start(t, b, newMemLog(0), 0, Config{Batch: 1000, Linger: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		for i := range 3 {
			if err := <-a.send(n, fmt.Sprintf("t%d", i), 1000, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 2 { // nobody waits for these: not shipped
			n.log.add(record(fmt.Sprintf("local%d", i), 1000))
		}
		synctest.Wait()
		n.w.Trim(5000)
		synctest.Wait()
		c, err := Read(context.Background(), b, "wal/")
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Objects) != 1 || c.Objects[0].End() != 3000 || len(c.Skipped) != 0 {
			t.Fatalf("after Trim(5000) the chain is %v (skipped %v), want the newest object alone", c.Objects, c.Skipped)
		}
		if err := <-a.send(n, "after", 300, time.Time{}); err != nil {
			t.Fatal(err)
		}
		_ = n.stop()
		c, err = Read(context.Background(), b, "wal/")
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Objects) != 2 || c.Objects[1].Start != 5000 || c.Objects[1].Prev != c.Objects[0].Seq {
			t.Fatalf("the chain after the send is %v, want the newest object and one continuing it from 5000", c.Objects)
		}
		a.mu.Lock()
		for off := range a.recs {
			if off < 5000 {
				delete(a.recs, off) // in the segments
			}
		}
		a.mu.Unlock()
		if fresh := a.check(t, b, 5000); fresh.MaxPhysOffset() != 5300 {
			t.Fatalf("fresh log ends at %d, want 5300", fresh.MaxPhysOffset())
		}
	})
}
