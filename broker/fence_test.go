package broker

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/logtest"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// segmentWritesBucket counts the writes of segment objects and of the
// manifest (not the lease's and checkpoints').
type segmentWritesBucket struct {
	tier.Bucket
	writes atomic.Int64
}

func (s *segmentWritesBucket) count(key string) {
	if strings.Contains(key, "/commitlog/") || strings.Contains(key, "/consumequeue/") || strings.Contains(key, "/meta/manifest") {
		s.writes.Add(1)
	}
}

func (s *segmentWritesBucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	s.count(key)
	return s.Bucket.Put(ctx, key, r, size)
}

func (s *segmentWritesBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, c tier.Cond) (string, error) {
	s.count(key)
	return s.Bucket.PutIf(ctx, key, r, size, c)
}

func (s *segmentWritesBucket) Delete(ctx context.Context, key string) error {
	s.count(key)
	return s.Bucket.Delete(ctx, key)
}

// TestBrokerTierLapsedLeaseStopsBucketWrites (issue 9 item 3, the
// uploader's fence): the manifest carries the lease epoch; once the lease
// lapses on the monotonic clock (renewals stopped) the uploader writes no
// object and no manifest though a sealed segment waits; once a renewal
// succeeds it uploads it.
func TestBrokerTierLapsedLeaseStopsBucketWrites(t *testing.T) {
	t.Parallel()
	bucket := &segmentWritesBucket{Bucket: tier.NewMem()}
	logs := &logtest.Recorder{}
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 64 << 10, LocalRetention: 1 << 30, LeaseTTL: 1500 * time.Millisecond,
		CheckpointInterval: 200 * time.Millisecond}
	b, _, _ := runBroker(t, cfg, Deps{Logger: slog.New(logs), Bucket: bucket})
	ctx := context.Background()
	seal := func(body string) int64 {
		t.Helper()
		res, err := b.store.Put(ctx, []store.Message{{Topic: "Lapse", QueueID: 0, Body: []byte(body)}})
		if err != nil {
			t.Fatal(err)
		}
		base := b.store.LocalSegments()
		if err := b.store.SealActive(); err != nil {
			t.Fatal(err)
		}
		b.tier.Uploader().Notify()
		for _, s := range base {
			if s.Base <= res[0].PhysOffset && res[0].PhysOffset < s.Base+s.Length {
				return s.Base
			}
		}
		t.Fatalf("record at %d in no segment", res[0].PhysOffset)
		return 0
	}
	mkey := "DefaultCluster/broker-a/" + upload.ManifestKey("")
	listed := func(base int64) (*upload.Manifest, bool) {
		m, _, err := upload.LoadManifest(ctx, bucket, mkey)
		if err != nil {
			return nil, false
		}
		for _, o := range m.CommitLog() {
			if o.Base == base {
				return m, true
			}
		}
		return m, false
	}
	first := seal("before the lapse")
	waitCond(t, 30*time.Second, "the first segment listed", func() bool {
		b.tier.Uploader().Flush()
		_, ok := listed(first)
		return ok
	})
	m, _ := listed(first)
	if m.Epoch != b.dur.ID().Epoch || m.Epoch < 1 {
		t.Fatalf("manifest epoch %d, want the lease's %d", m.Epoch, b.dur.ID().Epoch)
	}

	release := b.dur.HoldRenewals() // no more renewals
	locked := true
	defer func() {
		if locked {
			release()
		}
	}()
	waitCond(t, 10*time.Second, "the lease lapsed", func() bool { _, err := b.dur.Writable(); return err != nil })
	before := bucket.writes.Load()
	mBefore, _, err := upload.LoadManifest(ctx, bucket, mkey)
	if err != nil {
		t.Fatal(err)
	}
	second := seal("during the lapse")
	waitCond(t, 10*time.Second, "the uploader refused by its fence", func() bool { return logs.Count("bucket writes fenced") > 0 })
	b.tier.Uploader().Flush()
	if n := bucket.writes.Load() - before; n != 0 {
		t.Fatalf("%d segment or manifest writes reached the bucket with the lease lapsed", n)
	}
	if m, _, err := upload.LoadManifest(ctx, bucket, mkey); err != nil || m.Version != mBefore.Version {
		t.Fatalf("manifest written with the lease lapsed: %v", err)
	}

	locked = false
	release()
	waitCond(t, 60*time.Second, "the second segment listed after a renewal", func() bool {
		b.tier.Uploader().Flush()
		_, ok := listed(second)
		return ok
	})
	if m, _ := listed(second); m.Epoch != b.dur.ID().Epoch {
		t.Fatalf("manifest epoch %d after the renewal, want %d", m.Epoch, b.dur.ID().Epoch)
	}
}
