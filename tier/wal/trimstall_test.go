// Trimming a listed segment's objects (many DELETEs at bucket latency)
// must not hold up the shipping: a send during a trim waits about the
// linger, not for the DELETEs.
package wal

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// slowDeleteBucket answers each Delete after delay (virtual time in a
// synctest bubble): a bucket at S3 latency.
type slowDeleteBucket struct {
	tier.Bucket
	delay time.Duration
}

func (b *slowDeleteBucket) Delete(ctx context.Context, key string) error {
	select {
	case <-time.After(b.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.Bucket.Delete(ctx, key)
}

func TestTrimDoesNotStallSends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &slowDeleteBucket{Bucket: &faultBucket{Bucket: tier.NewMem()}, delay: 50 * time.Millisecond}
		const linger = 20 * time.Millisecond
		n, err := start(t, b, newMemLog(0), 0, Config{Batch: 1000, Linger: linger})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		// 100 objects of one record each, as a segment's worth of WAL
		// objects (a 256 MiB segment is 64 objects of 4 MiB at a high rate,
		// thousands at a low one).
		for i := range 100 {
			if err := <-a.send(n, fmt.Sprintf("t%03d", i), 1000, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		n.w.Trim(100 * 1000) // the segments now hold all of them
		synctest.Wait()      // the writer is in trim, at its first DELETE
		begin := time.Now()
		if err := <-a.send(n, "during-trim", 300, time.Time{}); err != nil {
			t.Fatal(err)
		}
		// Virtual time: the bucket's PUTs are instant, so a send waits for
		// the linger only, whatever the deletes cost.
		if waited := time.Since(begin); waited > 10*linger {
			t.Errorf("a send during a trim of 100 objects (50 ms per DELETE) waited %v, want about the linger (%v)", waited, linger)
		}
		_ = n.stop()
	})
}

// failDeleteBucket fails every Delete of key fail (a bucket that throttles
// or drops one request).
type failDeleteBucket struct {
	tier.Bucket
	fail string
}

func (b *failDeleteBucket) Delete(ctx context.Context, key string) error {
	if key == b.fail {
		return &tier.ServerError{Op: "delete", Key: key, Status: 503, Code: "SlowDown", Err: errInjected}
	}
	return b.Bucket.Delete(ctx, key)
}

// TestTrimWithAFailedDeleteKeepsTheChain: a trim whose DELETE of one
// object fails must leave a chain a reader can follow: no object past the
// trim point may be cut off from it, and a later writer's claim must read
// it. (Deleting the objects eight at a time, a failed DELETE left that
// object behind while later ones were gone: the reader took the hole for
// a PUT that never landed and ended the chain there, so every object past
// the trim point, acknowledged, fell out of the restore; a later claim
// continuing a deleted object made the WAL unreadable. TestSim seed 62
// with every topic bucket-durable.)
func TestTrimWithAFailedDeleteKeepsTheChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &failDeleteBucket{Bucket: &faultBucket{Bucket: tier.NewMem()}}
		n, err := start(t, b, newMemLog(0), 0, Config{Batch: 1000, Linger: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		for i := range 12 {
			if err := <-a.send(n, fmt.Sprintf("t%02d", i), 1000, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		c, err := Read(context.Background(), b, "wal/")
		if err != nil || len(c.Objects) < 12 {
			t.Fatalf("before the trim: %v, %d objects", err, len(c.Objects))
		}
		b.fail = Key("wal/", c.Objects[3].Seq) // the fourth object's DELETE fails
		n.w.Trim(10 * 1000)                    // the segments hold the first ten records
		synctest.Wait()
		c, err = Read(context.Background(), b, "wal/")
		_ = n.stop()
		if err != nil {
			t.Fatalf("after a trim with a failed DELETE the WAL is unreadable: %v", err)
		}
		if end := c.End(0); end != 12*1000 {
			t.Fatalf("after a trim with a failed DELETE the chain ends at %d, want %d (objects %v, skipped %v)", end, 12*1000, c.Objects, c.Skipped)
		}
		// A later writer claims over what is left, and a fresh disk at
		// the segments' end gets every acknowledged record back.
		b.fail = ""
		n2, err := start(t, b, newMemLog(10*1000), 10*1000, Config{Batch: 1000, Linger: time.Millisecond})
		if err != nil {
			t.Fatalf("a later writer could not claim the WAL: %v", err)
		}
		err = <-a.send(n2, "after", 300, time.Time{})
		_ = n2.stop()
		if err != nil {
			t.Fatal(err)
		}
		if c, err = Read(context.Background(), b, "wal/"); err != nil {
			t.Fatalf("after the later writer's claim the WAL is unreadable: %v", err)
		}
		a.check(t, b, 10*1000)
	})
}

// failReadLog is a log whose reads fail while fail is set (its bytes are
// in the bucket only, and the bucket does not answer).
type failReadLog struct {
	*memLog
	fail atomic.Bool
}

func (l *failReadLog) ReadLog(ctx context.Context, off int64, p []byte) (int, error) {
	if l.fail.Load() {
		return 0, errInjected
	}
	return l.memLog.ReadLog(ctx, off, p)
}

// TestLogReadFailureIsRetried: the log failing to read what is to ship (a
// cold read while the bucket is cut: the segment was listed and dropped
// locally) must not stop the writer for good: it tries again, and the
// send waiting meanwhile is committed once the log reads. (It stopped the
// writer, and every bucket-durable send was refused until a restart:
// TestSim seed 174 with every topic bucket-durable.)
func TestLogReadFailureIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &faultBucket{Bucket: tier.NewMem()}
		l := &failReadLog{memLog: newMemLog(0)}
		n, err := start(t, b, l.memLog, 0, Config{Batch: 1000, Linger: time.Millisecond, Log: l})
		if err != nil {
			t.Fatal(err)
		}
		var a acked
		if err := <-a.send(n, "before", 500, time.Time{}); err != nil {
			t.Fatal(err)
		}
		l.fail.Store(true)
		done := a.send(n, "while-unreadable", 500, time.Time{})
		time.Sleep(3 * time.Second)
		select {
		case err := <-done:
			_ = n.stop()
			t.Fatalf("a send answered while the log could not be read: %v", err)
		default:
		}
		l.fail.Store(false)
		err = <-done
		stopErr := n.stop()
		if err != nil {
			t.Fatalf("the send after the log read again: %v (writer: %v)", err, stopErr)
		}
		a.check(t, b, 0)
	})
}

// TestReadFromSkipsWhatTheSegmentsHold: a PUT that lands late, after its
// number was trimmed, puts an old object back below objects of the same
// writer past the trim point. Walked, it looks like a run with a hole and
// the chain ends there, before what was acknowledged (TestSim seed 129,
// every topic bucket-durable: a restored broker handed those offsets out
// again). A reader that knows where the segments end (ReadFrom) skips
// what holds nothing past it, and a claim over the result reads back.
func TestReadFromSkipsWhatTheSegmentsHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &faultBucket{Bucket: tier.NewMem()}
		n, err := start(t, b, newMemLog(0), 0, Config{Batch: 1000, Linger: time.Millisecond})
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
		old := c.Objects[4] // [3000, 4000): its bytes, to land again later
		key := Key("wal/", old.Seq)
		body, err := objectBytes(ctx, b, key)
		if err != nil {
			_ = n.stop()
			t.Fatal(err)
		}
		n.w.Trim(10 * 1000)
		synctest.Wait()
		_ = n.stop()
		if _, err := b.Stat(ctx, key); err == nil {
			t.Fatalf("%s was not trimmed", key)
		}
		// The late PUT lands: the number is free again.
		if _, err := b.Bucket.PutIf(ctx, key, bytes.NewReader(body), int64(len(body)), tier.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		if c, err := Read(ctx, b, "wal/"); err == nil && c.End(0) == 12*1000 {
			t.Fatalf("without the segments' end the chain still reaches %d: the test no longer shows the hole", c.End(0))
		}
		c, err = ReadFrom(ctx, b, "wal/", 10*1000)
		if err != nil {
			t.Fatalf("ReadFrom: %v", err)
		}
		if end := c.End(10 * 1000); end != 12*1000 {
			t.Fatalf("ReadFrom(10000) chain ends at %d, want %d (objects %v, skipped %v)", end, 12*1000, c.Objects, c.Skipped)
		}
		if slices.ContainsFunc(c.Live(10*1000), func(h Header) bool { return h.Seq == old.Seq }) {
			t.Fatalf("the landed-late object %s is restored (Live past the segments' end): %v", old, c.Live(10*1000))
		}
		// Its number holds an object: no hole for a new writer to fill
		// (a filler put there would find it taken, and the claim would
		// conflict for ever: TestSim seed 1540).
		if slices.Contains(c.Holes, old.Seq) {
			t.Fatalf("ReadFrom lists #%d, which holds an object, as a hole: %v", old.Seq, c.Holes)
		}
		w := NewWriter(Config{Bucket: b, Dir: "wal/", Log: newMemLog(12 * 1000), Batch: 1000, Linger: time.Millisecond}, c, 12*1000)
		if err := w.Claim(ctx); err != nil {
			t.Fatalf("a writer claiming over ReadFrom's chain: %v", err)
		}
	})
}

// objectBytes is the whole object key in b (to land it again later, as a
// late PUT would).
func objectBytes(ctx context.Context, b tier.Bucket, key string) ([]byte, error) {
	attrs, err := b.Stat(ctx, key)
	if err != nil {
		return nil, err
	}
	body := make([]byte, attrs.Size)
	return body, b.ReadAt(ctx, key, body, 0)
}
