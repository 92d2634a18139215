package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/upload"
)

// runBrokerHooked is runBroker with hook run between New and Run (to set
// test hooks before any goroutine starts).
func runBrokerHooked(t *testing.T, cfg Config, deps Deps, hook func(*Broker)) (*Broker, *remoting.Client) {
	t.Helper()
	b, cl, _ := runBrokerWith(t, cfg, deps, hook)
	return b, cl
}

// TestBrokerTierColdReaderKnowsBeforeUploaded (issue 9 item 11): a sealed
// segment counts as uploaded, and so may be dropped locally, only once the
// cold reader knows its object. At the instant it counts (a hook), the
// cold reader already serves its first record, and a forced retention
// pass followed by a read through the store never fails. While telling
// the cold reader fails, the segment stays not uploaded and local; the
// uploader tries again and, once that works, the segment goes and every
// message reads back from the bucket.
func TestBrokerTierColdReaderKnowsBeforeUploaded(t *testing.T) {
	t.Parallel()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 0}
	var (
		failCold  atomic.Bool
		coldFails atomic.Int64
		checked   atomic.Int64
		mu        sync.Mutex
		problems  []string
	)
	problem := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	failCold.Store(true)
	b, cl := runBrokerHooked(t, cfg, Deps{Logger: discardLogger(), Bucket: tier.NewMem()}, func(b *Broker) {
		tr := b.tier
		tr.Hooks.SetCold = func(objs []coldread.Object) error {
			if failCold.Load() {
				coldFails.Add(1)
				return errors.New("injected: cold reader not told")
			}
			return tr.Cold().SetObjects(objs)
		}
		tr.Hooks.Uploaded = func(base int64) {
			ctx := context.Background()
			// From now on local retention may drop the segment.
			if _, err := tr.Cold().ReadAt(ctx, base, make([]byte, 4)); err != nil {
				problem("segment %d counts as uploaded, but the cold reader cannot read it: %v", base, err)
			}
			if err := tr.EnforceLocalRetention(); err != nil {
				problem("retention: %v", err)
			}
			if b.store.LocalMinPhysOffset() > base {
				if _, err := b.store.ReadRecord(base); err != nil {
					problem("segment %d dropped, then its first record: %v", base, err)
				}
			}
			checked.Add(1)
		}
	})
	bodies := produceTiered(t, b, cl, "Mark", 300) // ≈ 2.4 MiB: 2 sealed segments
	listed := func(base int64) bool {
		m := b.tier.Uploader().Manifest()
		if m == nil {
			return false
		}
		for _, o := range m.CommitLog() {
			if o.Base == base {
				return true
			}
		}
		return false
	}
	waitCond(t, 30*time.Second, "segment 0 listed in the manifest and telling the cold reader failing twice", func() bool {
		b.tier.Uploader().Flush()
		return listed(0) && coldFails.Load() >= 2
	})
	if got := b.store.LocalMinPhysOffset(); got != 0 {
		t.Fatalf("the cold reader was never told of segment 0, yet the local log starts at %d: it was dropped", got)
	}
	pending, err := b.tier.Sealed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stillPending := false
	for _, s := range pending {
		stillPending = stillPending || s.Kind == upload.KindCommitLog && s.Base == 0
	}
	if !stillPending {
		t.Fatal("segment 0 counts as uploaded though the cold reader was not told")
	}

	failCold.Store(false)
	waitCond(t, 60*time.Second, "every sealed segment uploaded, checked by the hook and dropped", func() bool {
		b.tier.Uploader().Flush()
		return checked.Load() >= 2 && len(b.store.SealedSegments()) == 0 && b.store.LocalMinPhysOffset() > 0
	})
	mu.Lock()
	seen := append([]string(nil), problems...)
	mu.Unlock()
	if len(seen) > 0 {
		t.Fatalf("%d problems, first: %s", len(seen), seen[0])
	}
	readBack(t, b, cl, "Mark", bodies)
}
