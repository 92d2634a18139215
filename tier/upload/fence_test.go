package upload_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/logtest"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

var errTestFenced = errors.New("test: fenced")

// TestFenceStopsEveryWrite (issue 9 item 3's hook): while Config.Fence
// refuses, no object PUT, manifest write or delete reaches the bucket, the
// manifest stays as it was, Trim and DeleteObjects refuse, and the refusal
// is logged once; when Fence allows again, uploads resume and the manifest
// records the epoch Fence returned.
func TestFenceStopsEveryWrite(t *testing.T) {
	mem := tier.NewMem()
	ctx := context.Background()
	// A manifest from an earlier life, with one object to trim later.
	mk := upload.ManifestKey("c1/broker-a")
	old := upload.Manifest{Version: 3, Objects: []upload.Object{{Key: "c1/broker-a/commitlog/00000000000000000000.seg",
		Kind: "commitlog", Base: 0, Length: 100, Size: 90, Frames: 1}}}
	buf, _ := json.Marshal(old)
	if err := mem.Put(ctx, "c1/broker-a/commitlog/00000000000000000000.seg", bytes.NewReader(make([]byte, 90)), 90); err != nil {
		t.Fatal(err)
	}
	if err := mem.Put(ctx, mk, bytes.NewReader(buf), int64(len(buf))); err != nil {
		t.Fatal(err)
	}
	before, err := mem.Stat(ctx, mk)
	if err != nil {
		t.Fatal(err)
	}

	src := newSource()
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 100}, jsonSegment(1, 64<<10))
	src.add(upload.Segment{Kind: upload.KindQueueIndex, Base: 100}, jsonSegment(2, 4<<10))
	hb := newHookBucket(mem)
	var fenced atomic.Bool
	fenced.Store(true)
	var asked atomic.Int64
	logs := &logtest.Recorder{}
	cfg := fastConfig(hb, src)
	cfg.Logger = slog.New(logs)
	cfg.Fence = func() (int64, error) {
		asked.Add(1)
		if fenced.Load() {
			return 0, errTestFenced
		}
		return 7, nil
	}
	u, err := upload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, u)
	waitFor(t, "uploads asking the fence again and again", 10*time.Second, func() bool { return asked.Load() >= 20 })
	if _, err := u.Trim(ctx, 100); !errors.Is(err, errTestFenced) {
		t.Fatalf("Trim while fenced: %v, want the fence's error", err)
	}
	if err := u.DeleteObjects(ctx, old.Objects); !errors.Is(err, errTestFenced) {
		t.Fatalf("DeleteObjects while fenced: %v, want the fence's error", err)
	}
	if n := hb.writeCount(); n != 0 {
		t.Fatalf("%d writes reached the bucket while fenced", n)
	}
	if a, err := mem.Stat(ctx, mk); err != nil || a.ETag != before.ETag {
		t.Fatalf("manifest changed while fenced: %+v %v", a, err)
	}
	if src.allUploaded() || u.Stats().Objects != 0 {
		t.Fatal("a segment uploaded while fenced")
	}
	if n := logs.Count("fenced"); n != 1 {
		t.Fatalf("fenced logged %d times over %d refusals, want once", n, asked.Load())
	}

	fenced.Store(false)
	waitFor(t, "uploaded once the fence allows", 10*time.Second, src.allUploaded)
	if n := logs.Count("no longer fenced"); n != 1 {
		t.Fatalf("the end of the fence logged %d times, want once", n)
	}
	removed, err := u.Trim(ctx, 100)
	if err != nil || len(removed) != 1 {
		t.Fatalf("Trim after the fence: %v %v", removed, err)
	}
	if err := u.DeleteObjects(ctx, removed); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Stat(ctx, removed[0].Key); !errors.Is(err, tier.ErrNotExist) {
		t.Fatalf("trimmed object not deleted: %v", err)
	}
	m, _, err := upload.LoadManifest(ctx, mem, mk)
	if err != nil {
		t.Fatal(err)
	}
	if m.Epoch != 7 || m.Version <= old.Version || len(m.Objects) != 2 {
		t.Fatalf("manifest after the fence: epoch %d version %d, %d objects; want epoch 7, version > %d, 2 objects",
			m.Epoch, m.Version, len(m.Objects), old.Version)
	}
	// Every delta written records the epoch.
	deltas := 0
	if err := mem.List(ctx, "c1/broker-a/meta/", func(key string, size int64) error {
		if !upload.IsDeltaKey("c1/broker-a", key) {
			return nil
		}
		deltas++
		d, err := upload.DecodeDelta("c1/broker-a", mustRead(t, mem, key))
		if err != nil || d.Epoch != 7 {
			t.Errorf("delta %s: epoch %d, %v; want 7", key, d.Epoch, err)
		}
		return nil
	}); err != nil || deltas == 0 {
		t.Fatalf("list: %d deltas, %v", deltas, err)
	}
}

// TestNoFenceNoEpoch: without Config.Fence the manifest has no epoch field.
func TestNoFenceNoEpoch(t *testing.T) {
	mem := tier.NewMem()
	src := newSource()
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0}, jsonSegment(1, 1000))
	u, _ := upload.New(fastConfig(mem, src))
	startRun(t, u)
	waitFor(t, "uploaded", 10*time.Second, src.allUploaded)
	m, _, err := upload.LoadManifest(context.Background(), mem, upload.ManifestKey("c1/broker-a"))
	if err != nil || m.Epoch != 0 || len(m.Objects) != 1 {
		t.Fatalf("manifest without fencing: %+v %v; want epoch 0", m, err)
	}
}
