package wal

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// A deposed writer's PUT that lands late ABOVE the new writer's claim (it
// had several objects in flight, InFlight > 1): the number the new writer
// needs next holds an older writer's object. The walk skips that object
// (an older incarnation after a newer claim), so nothing is lost; but the
// new writer, which holds the lease, must not take itself for deposed and
// stop answering every bucket-durable send.
func TestLateWriteAboveTheClaimDoesNotDeposeTheNewWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
		d1 := a.send(A, "a1", 1000, time.Time{}) // #2
		if err := <-d1; err != nil {
			t.Fatal(err)
		}
		a.send(A, "a2", 1000, time.Time{}) // #3, held
		a.send(A, "a3", 1000, time.Time{}) // #4, held
		synctest.Wait()
		holdA.Store(false)
		// B takes over (A's lease ran out) from a copy holding a1: it lists
		// #1..#2 and claims #3.
		logB := newMemLog(0)
		logB.add(record("a1", 1000))
		B, err := start(t, b, logB, 0, Config{Linger: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if B.w.claim != 3 {
			t.Fatalf("B claimed #%d, want #3", B.w.claim)
		}
		// A's #4, sent before its lease ran out, lands now.
		if err := b.land(Key("wal/", 4)); err != nil {
			t.Fatalf("A's late #4: %v", err)
		}
		db := a.send(B, "b1", 500, time.Now().Add(time.Minute))
		if err := <-db; err != nil {
			t.Errorf("the lease holder's send after an older writer's late object took its next number: %v", err)
		}
		_ = A.stop()
		if err := B.stop(); err != nil {
			t.Errorf("the lease holder's writer stopped: %v", err)
		}
		if c, err := Read(t.Context(), b, "wal/"); err != nil || errors.Is(err, ErrCorrupt) {
			t.Fatalf("read the chain: %v", err)
		} else {
			t.Logf("chain %v skipped %v", c.Objects, c.Skipped)
		}
		a.check(t, b, 0)
	})
}

// While the WAL is active, bytes no send waits for (an internal write to a
// bucket-durable topic) ship after a linger, not only once a batch fills:
// readers of bucket-durable topics see nothing past Durable.
func TestActiveShipsUnwaitedBytesAfterLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &faultBucket{Bucket: tier.NewMem()}
		l := newMemLog(0)
		n, err := start(t, b, l, 0, Config{Linger: 100 * time.Millisecond, Active: func() bool { return true }})
		if err != nil {
			t.Fatal(err)
		}
		_, end := l.add(record("internal", 500))
		time.Sleep(time.Second)
		synctest.Wait()
		if got := n.w.Durable(); got != end {
			t.Errorf("an unwaited record is not shipped a second after it was written (linger 100ms): durable %d, log end %d", got, end)
		}
		_ = n.stop()
	})
}
