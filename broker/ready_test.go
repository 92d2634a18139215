package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// TestBrokerReadyNeedsTheLease: Ready (serve's /readyz) is nil for a
// master holding its bucket lease (no name servers to register with
// here), an error naming the lease once it lapsed, and nil again after a
// renewal.
func TestBrokerReadyNeedsTheLease(t *testing.T) {
	t.Parallel()
	b, _, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20,
		LeaseTTL: 1500 * time.Millisecond, CheckpointInterval: 200 * time.Millisecond}, Deps{Logger: discardLogger(), Bucket: tier.NewMem()})
	ctx := context.Background()
	waitCond(t, 20*time.Second, "ready with the lease held", func() bool { return b.Ready(ctx) == nil })
	release := b.dur.HoldRenewals() // no more renewals
	locked := true
	defer func() {
		if locked {
			release()
		}
	}()
	waitCond(t, 10*time.Second, "the lease lapsed", func() bool { _, err := b.dur.Writable(); return err != nil })
	if err := b.Ready(ctx); err == nil || !strings.Contains(err.Error(), "lease") {
		t.Fatalf("Ready with the lease lapsed: %v; want an error naming the lease", err)
	}
	locked = false
	release()
	waitCond(t, 30*time.Second, "ready again after a renewal", func() bool { return b.Ready(ctx) == nil })
}
