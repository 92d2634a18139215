// Trimming a listed segment's objects (many DELETEs at bucket latency)
// must not hold up the shipping: a send during a trim waits about the
// linger, not for the DELETEs.
package wal

import (
	"context"
	"fmt"
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
