package broker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/tier"
)

// TestBrokerFencingLease: a second broker on the same prefix refuses to
// start while the first holds the lease, with an error naming the holder;
// once the first is gone (no release: a crash) and the lease expired, a new
// broker takes over, and the old one can no longer checkpoint.
func TestBrokerFencingLease(t *testing.T) {
	bucket := tier.NewMem()
	cfg := func() Config {
		return Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, LeaseTTL: 1500 * time.Millisecond}
	}
	first, err := New(cfg(), Deps{Logger: discardLogger(), Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg(), Deps{Logger: discardLogger(), Bucket: bucket})
	if !errors.Is(err, offsets.ErrLeaseHeld) {
		t.Fatalf("second broker on the prefix: %v, want ErrLeaseHeld", err)
	}
	if !strings.Contains(err.Error(), "broker-a") || !strings.Contains(err.Error(), first.dur.id.Instance) {
		t.Fatalf("error %q does not name the holder (instance %s)", err, first.dur.id.Instance)
	}
	// The first broker dies without releasing the lease.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	var second *Broker
	waitCond(t, 20*time.Second, "takeover after the lease expired", func() bool {
		b, err := New(cfg(), Deps{Logger: discardLogger(), Bucket: bucket})
		if err != nil {
			if !errors.Is(err, offsets.ErrLeaseHeld) {
				t.Fatalf("takeover: %v", err)
			}
			return false
		}
		second = b
		return true
	})
	defer second.Close()
	if err := first.dur.checkpoint(context.Background()); !errors.Is(err, offsets.ErrFenced) {
		t.Fatalf("the old broker checkpointed after the takeover: %v", err)
	}
	if err := second.dur.checkpoint(context.Background()); err != nil {
		t.Fatalf("the new holder cannot checkpoint: %v", err)
	}
}
