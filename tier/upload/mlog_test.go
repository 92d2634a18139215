package upload_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/logtest"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

const pfx = "c1/broker-a"

// metaKeys lists the manifest's objects under pfx by kind: "log", "snap",
// "shard" and "legacy" (manifest.json).
func metaKeys(t testing.TB, b tier.Reader) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := b.List(context.Background(), pfx+"/meta/", func(key string, _ int64) error {
		rel := strings.TrimPrefix(key, pfx+"/meta/")
		switch {
		case rel == "manifest.json":
			out["legacy"] = append(out["legacy"], key)
		case strings.HasPrefix(rel, "manifest/log/"):
			out["log"] = append(out["log"], key)
		case strings.HasPrefix(rel, "manifest/snap/"):
			out["snap"] = append(out["snap"], key)
		case strings.HasPrefix(rel, "manifest/shard/"):
			out["shard"] = append(out["shard"], key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func load(t testing.TB, b tier.Reader) *upload.Manifest {
	t.Helper()
	m, _, err := upload.LoadManifest(context.Background(), b, upload.ManifestKey(pfx))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sameManifest fails unless a and b list the same objects and ranges at
// the same version and epoch.
func sameManifest(t testing.TB, what string, a, b *upload.Manifest) {
	t.Helper()
	sorted := func(objs []upload.Object) []upload.Object {
		objs = slices.Clone(objs)
		slices.SortFunc(objs, func(a, b upload.Object) int { return strings.Compare(a.Key, b.Key) })
		return objs
	}
	ja, _ := json.Marshal(upload.Manifest{Version: a.Version, Epoch: a.Epoch, Objects: sorted(a.Objects), Expired: a.Expired})
	jb, _ := json.Marshal(upload.Manifest{Version: b.Version, Epoch: b.Epoch, Objects: sorted(b.Objects), Expired: b.Expired})
	if len(ja) > 4000 {
		ja, jb = ja[:4000], jb[:4000]
	}
	if !bytes.Equal(ja, jb) {
		t.Fatalf("%s: manifests differ:\n%s\n%s", what, ja, jb)
	}
}

// history makes n segments' worth of objects (commitlog, queue index, key
// index at each base), as a long-lived broker's manifest holds.
func history(n int) []upload.Object {
	created := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	objs := make([]upload.Object, 0, 3*n)
	for i := range n {
		base := int64(i) * (1 << 30)
		for _, k := range []upload.Kind{upload.KindCommitLog, upload.KindQueueIndex, upload.KindKeyIndex} {
			key, _ := upload.Key(pfx, upload.Segment{Kind: k, Base: base})
			objs = append(objs, upload.Object{Key: key, Kind: k.String(), Base: base, Length: 1 << 30,
				Size: 300<<20 + int64(i%1000), Frames: 512, Created: created.Add(time.Duration(i) * time.Minute)})
		}
	}
	return objs
}

// TestCommitAppendsDelta: a commit writes one small delta at the next
// sequence number (conditional create), nothing else, whatever the size
// of the history; manifest.json is never written.
func TestCommitAppendsDelta(t *testing.T) {
	var sizes []int
	for _, n := range []int{0, 10_000} {
		mem := tier.NewMem()
		if n > 0 {
			if err := upload.SeedSnapshot(context.Background(), mem, pfx, &upload.Manifest{Version: 7, Objects: history(n)}); err != nil {
				t.Fatal(err)
			}
		}
		before := metaKeys(t, mem)
		src := newSource()
		src.add(upload.Segment{Kind: upload.KindCommitLog, Base: int64(n) << 30}, jsonSegment(1, 5000))
		hb := newHookBucket(mem)
		var metaBytes atomic.Int64
		hb.checkMan = func(key string, buf []byte) { metaBytes.Add(int64(len(buf))) }
		u, _ := upload.New(fastConfig(hb, src))
		stop := startRun(t, u)
		waitFor(t, "uploaded", 10*time.Second, src.allUploaded)
		stop()
		after := metaKeys(t, mem)
		if len(after["log"]) != len(before["log"])+1 || len(after["legacy"]) != 0 || len(after["snap"]) != len(before["snap"]) {
			t.Fatalf("history %d: manifest objects before %v, after %v: want one delta more", n, before, after)
		}
		want := upload.DeltaKey(pfx, map[bool]int64{true: 8, false: 1}[n > 0])
		if after["log"][len(after["log"])-1] != want {
			t.Fatalf("history %d: delta %v, want %s", n, after["log"], want)
		}
		if m := load(t, mem); len(m.Objects) != 3*n+1 {
			t.Fatalf("history %d: %d objects after the commit", n, len(m.Objects))
		}
		sizes = append(sizes, int(metaBytes.Load()))
	}
	if sizes[0] > 100 || sizes[1] > 100 {
		t.Fatalf("delta bytes %v: want the same small size with no history and with 10,000 segments", sizes)
	}
}

// commitOneByOne uploads the given commitlog bases one commit each.
func commitOneByOne(t *testing.T, u *upload.Uploader, src *memSource, bases []int64) {
	t.Helper()
	for _, b := range bases {
		src.add(upload.Segment{Kind: upload.KindCommitLog, Base: b}, jsonSegment(uint64(b), 100))
		u.Notify()
		waitFor(t, fmt.Sprintf("segment %d uploaded", b), 10*time.Second, src.allUploaded)
	}
}

// TestSnapshotCompaction: every SnapshotEvery deltas a snapshot is
// written; a later one rewrites only the shards whose objects changed
// (the others keep their object), collects older snapshots, unreferenced
// shards and deltas more than one interval old; a reader sees exactly what
// the writer has, through Trim and Expire too.
func TestSnapshotCompaction(t *testing.T) {
	defer upload.SetShardObjects(4)()
	mem := tier.NewMem()
	src := newSource()
	cfg := fastConfig(mem, src)
	cfg.SnapshotEvery = 4
	u, _ := upload.New(cfg)
	startRun(t, u)
	var bases []int64
	for i := range 30 {
		bases = append(bases, int64(i)*100)
	}
	commitOneByOne(t, u, src, bases)
	keys := metaKeys(t, mem)
	if len(keys["snap"]) != 1 || !strings.HasSuffix(keys["snap"][0], fmt.Sprintf("%020d", 28)) {
		t.Fatalf("snapshots %v, want the one at 28", keys["snap"])
	}
	// Deltas 25..30 remain (one interval below the snapshot, and after it).
	if n := len(keys["log"]); n < 2 || n > 2*cfg.SnapshotEvery {
		t.Fatalf("%d deltas left: %v", n, keys["log"])
	}
	// 28 objects in shards of 4 to 8: the first shards were written by the
	// first snapshots and never rewritten.
	if n := len(keys["shard"]); n < 4 || n > 8 {
		t.Fatalf("%d shards: %v", n, keys["shard"])
	}
	if strings.Contains(keys["shard"][0], fmt.Sprintf("%020d-", 28)) {
		t.Fatalf("the oldest shard %s was rewritten; want it kept from an early snapshot", keys["shard"][0])
	}
	sameManifest(t, "after 30 commits", load(t, mem), u.Manifest())

	ctx := context.Background()
	removed, err := u.Trim(ctx, 1000)
	if err != nil || len(removed) != 10 {
		t.Fatalf("Trim: %d removed, %v", len(removed), err)
	}
	if _, err := u.Expire(ctx, []int64{1500, 1600}); err != nil {
		t.Fatal(err)
	}
	commitOneByOne(t, u, src, []int64{3000, 3100, 3200, 3300, 3400})
	m := load(t, mem)
	sameManifest(t, "after trim, expire and more commits", m, u.Manifest())
	if len(m.Expired) != 1 || m.CommitLog()[0].Base != 1000 || len(m.CommitLog()) != 23 {
		t.Fatalf("manifest after trim and expire: expired %v, %d objects from %d", m.Expired, len(m.CommitLog()), m.CommitLog()[0].Base)
	}
	if keys := metaKeys(t, mem); len(keys["snap"]) != 1 {
		t.Fatalf("snapshots %v", keys["snap"])
	}
	// A fresh uploader on the same bucket starts from the snapshot and the
	// deltas, and continues the sequence.
	src2 := newSource()
	u2, _ := upload.New(fastConfig(mem, src2))
	stopAll := startRun(t, u2)
	waitFor(t, "second uploader loaded", 5*time.Second, func() bool { return u2.Manifest() != nil })
	sameManifest(t, "second uploader", u2.Manifest(), m)
	stopAll()
}

// TestRacingWriters: two uploaders on one prefix. Each sequence number is
// won by one conditional create; the loser rereads, merges and writes the
// next one, so the manifest ends with every object of both.
func TestRacingWriters(t *testing.T) {
	t.Run("stale-reader", func(t *testing.T) {
		mem := tier.NewMem()
		srcA, srcB := newSource(), newSource()
		srcA.setHidden(true)
		a, _ := upload.New(fastConfig(mem, srcA))
		startRun(t, a)
		waitFor(t, "A loaded the empty manifest", 5*time.Second, func() bool { return a.Manifest() != nil })
		b, _ := upload.New(fastConfig(mem, srcB))
		stopB := startRun(t, b)
		commitOneByOne(t, b, srcB, []int64{1000})
		stopB()
		// A still believes the manifest is empty: its write at sequence 1
		// loses, it rereads and writes 2.
		srcA.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0}, jsonSegment(1, 1000))
		srcA.setHidden(false)
		a.Notify()
		waitFor(t, "A uploaded", 10*time.Second, srcA.allUploaded)
		m := load(t, mem)
		if m.Version != 2 || len(m.Objects) != 2 || a.Stats().Errors == 0 {
			t.Fatalf("manifest v%d with %d objects, A errors %d: want v2, both objects, A's lost race counted", m.Version, len(m.Objects), a.Stats().Errors)
		}
	})
	t.Run("far-behind", func(t *testing.T) {
		// A writer more than SnapshotEvery behind: the sequence number it
		// writes next was taken and collected by the other writer's
		// snapshot, so its conditional create succeeds on a free key, but
		// below the newest snapshot, where no reader looks.
		mem := tier.NewMem()
		srcA, srcB := newSource(), newSource()
		srcA.setHidden(true)
		cfgA := fastConfig(mem, srcA)
		cfgA.SnapshotEvery = 2
		a, _ := upload.New(cfgA)
		startRun(t, a)
		waitFor(t, "A loaded the empty manifest", 5*time.Second, func() bool { return a.Manifest() != nil })
		cfgB := fastConfig(mem, srcB)
		cfgB.SnapshotEvery = 2
		b, _ := upload.New(cfgB)
		stopB := startRun(t, b)
		commitOneByOne(t, b, srcB, []int64{1000, 1100, 1200, 1300, 1400, 1500, 1600, 1700})
		stopB()
		if _, err := mem.Stat(context.Background(), pfx+"/meta/manifest/log/00000000000000000001"); !errors.Is(err, tier.ErrNotExist) {
			t.Fatalf("B's first delta is still there (%v): the test needs it collected", err)
		}
		srcA.add(upload.Segment{Kind: upload.KindCommitLog, Base: 0}, jsonSegment(1, 1000))
		srcA.setHidden(false)
		a.Notify()
		waitFor(t, "A uploaded", 10*time.Second, srcA.allUploaded)
		m := load(t, mem)
		if len(m.CommitLog()) != 9 {
			t.Fatalf("manifest v%d lists %d objects, want B's 8 and A's: A's delta went below B's snapshot", m.Version, len(m.CommitLog()))
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		mem := tier.NewMem()
		hb := newHookBucket(mem)
		var won, lost atomic.Int64
		counting := &condCounter{Bucket: hb, won: &won, lost: &lost}
		var srcs [2]*memSource
		var us [2]*upload.Uploader
		for i := range srcs {
			srcs[i] = newSource()
			for j := range 15 {
				srcs[i].add(upload.Segment{Kind: upload.KindCommitLog, Base: int64(j*2+i) * 100}, jsonSegment(uint64(j), 100))
			}
			cfg := fastConfig(counting, srcs[i])
			cfg.SnapshotEvery = 8
			cfg.Concurrency = 1
			us[i], _ = upload.New(cfg)
		}
		for _, u := range us {
			startRun(t, u)
		}
		for i := range srcs {
			waitFor(t, "all uploaded", 30*time.Second, srcs[i].allUploaded)
		}
		m := load(t, mem)
		if len(m.CommitLog()) != 30 {
			t.Fatalf("%d objects listed, want 30", len(m.CommitLog()))
		}
		if m.Version != won.Load() {
			t.Fatalf("version %d after %d won delta writes", m.Version, won.Load())
		}
		t.Logf("%d deltas won, %d lost", won.Load(), lost.Load())
	})
}

// condCounter counts conditional creates of deltas that won and lost.
type condCounter struct {
	tier.Bucket
	won, lost *atomic.Int64
}

func (c *condCounter) PutIf(ctx context.Context, key string, r io.Reader, size int64, cond tier.Cond) (string, error) {
	etag, err := c.Bucket.PutIf(ctx, key, r, size, cond)
	if upload.IsDeltaKey(pfx, key) {
		switch {
		case err == nil:
			c.won.Add(1)
		case errors.Is(err, tier.ErrPreconditionFailed):
			c.lost.Add(1)
		}
	}
	return etag, err
}

func putDelta(t *testing.T, b tier.Bucket, seq, epoch int64, objs ...upload.Object) {
	t.Helper()
	buf := upload.EncodeDelta(pfx, seq, epoch, objs)
	if _, err := b.PutIf(context.Background(), upload.DeltaKey(pfx, seq), bytes.NewReader(buf), int64(len(buf)), tier.IfAbsent()); err != nil {
		t.Fatal(err)
	}
}

// TestOlderEpochDeltaIgnored: a delta whose epoch is older than one the
// manifest already holds (a deposed lease holder) is ignored by readers,
// and an uploader whose fence returns an older epoch writes nothing.
func TestOlderEpochDeltaIgnored(t *testing.T) {
	mem := tier.NewMem()
	objs := history(3)
	putDelta(t, mem, 1, 5, objs[0])
	putDelta(t, mem, 2, 3, objs[3]) // the deposed holder's
	putDelta(t, mem, 3, 5, objs[6])
	m := load(t, mem)
	if m.Version != 3 || m.Epoch != 5 || len(m.Objects) != 2 || m.Objects[0].Base != objs[0].Base || m.Objects[1].Base != objs[6].Base {
		t.Fatalf("manifest v%d epoch %d objects %+v: want v3, epoch 5, without the epoch-3 delta's", m.Version, m.Epoch, m.Objects)
	}

	src := newSource()
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 1 << 40}, jsonSegment(1, 1000))
	hb := newHookBucket(mem)
	metaWrites := atomic.Int64{}
	hb.putHook = func(key string) error {
		if strings.Contains(key, "/meta/") {
			metaWrites.Add(1)
		}
		return nil
	}
	logs := &logtest.Recorder{}
	cfg := fastConfig(hb, src)
	cfg.Logger = slog.New(logs)
	cfg.Fence = func() (int64, error) { return 4, nil }
	u, _ := upload.New(cfg)
	startRun(t, u)
	waitFor(t, "the stale write refused", 10*time.Second, func() bool { return logs.Count("fenced") > 0 })
	if _, err := u.Trim(context.Background(), 1<<31); err == nil {
		t.Fatal("Trim under an older epoch succeeded")
	}
	if n := metaWrites.Load(); n != 0 || src.allUploaded() {
		t.Fatalf("%d manifest writes under an older epoch", n)
	}
	sameManifest(t, "after the refused writes", load(t, mem), m)
}

// TestCrashBetweenDeltaAndSnapshot: snapshots fail (the process dies
// after its deltas, before the snapshot): readers replay the deltas; the
// next snapshot that succeeds covers them all.
func TestCrashBetweenDeltaAndSnapshot(t *testing.T) {
	mem := tier.NewMem()
	hb := newHookBucket(mem)
	var snapFails atomic.Bool
	snapFails.Store(true)
	hb.putHook = func(key string) error {
		if snapFails.Load() && (strings.Contains(key, "/manifest/snap/") || strings.Contains(key, "/manifest/shard/")) {
			return errors.New("crash")
		}
		return nil
	}
	src := newSource()
	cfg := fastConfig(hb, src)
	cfg.SnapshotEvery = 3
	u, _ := upload.New(cfg)
	stop := startRun(t, u)
	commitOneByOne(t, u, src, []int64{0, 100, 200, 300, 400})
	stop()
	keys := metaKeys(t, mem)
	if len(keys["snap"]) != 0 || len(keys["log"]) != 5 {
		t.Fatalf("after failed snapshots: %v", keys)
	}
	m := load(t, mem)
	if m.Version != 5 || len(m.Objects) != 5 {
		t.Fatalf("reader replaying deltas: v%d, %d objects", m.Version, len(m.Objects))
	}
	snapFails.Store(false)
	u2, _ := upload.New(cfg)
	startRun(t, u2)
	commitOneByOne(t, u2, src, []int64{500})
	keys = metaKeys(t, mem)
	if len(keys["snap"]) != 1 {
		t.Fatalf("no snapshot after recovery: %v", keys)
	}
	m = load(t, mem)
	if m.Version != 6 || len(m.Objects) != 6 {
		t.Fatalf("after the snapshot: v%d, %d objects", m.Version, len(m.Objects))
	}
}

// TestMigrateLegacyManifest: a bucket with a format-0 manifest.json
// (consumequeue objects, expired ranges, an epoch) is read as it is until
// an uploader starts; the uploader writes the first snapshot at its
// version, deletes the consumequeue objects and manifest.json, and
// continues the sequence. A fenced uploader migrates nothing.
func TestMigrateLegacyManifest(t *testing.T) {
	mem := tier.NewMem()
	ctx := context.Background()
	objs := history(50)
	var cq []upload.Object
	for i := range 3 {
		o := upload.Object{Key: fmt.Sprintf("%s/consumequeue/T/%d/00000000000000000000.cq", pfx, i), Kind: "consumequeue",
			Topic: "T", QueueID: i, Length: 20, Size: 20, Frames: 1}
		cq = append(cq, o)
		if err := mem.Put(ctx, o.Key, strings.NewReader("x"), 1); err != nil {
			t.Fatal(err)
		}
	}
	legacy := upload.Manifest{Version: 41, Epoch: 2, Updated: time.Now().UTC(), Objects: append(append([]upload.Object{}, cq...), objs...),
		Expired: []upload.Span{{From: 5 << 30, To: 7 << 30}}}
	buf, _ := json.MarshalIndent(legacy, "", " ")
	if err := mem.Put(ctx, upload.ManifestKey(pfx), bytes.NewReader(buf), int64(len(buf))); err != nil {
		t.Fatal(err)
	}
	want := &upload.Manifest{Version: 41, Epoch: 2, Objects: objs, Expired: legacy.Expired}
	sameManifest(t, "legacy read", load(t, mem), want)

	// Fenced: nothing is written, the legacy manifest still serves.
	hb := newHookBucket(mem)
	src := newSource()
	cfg := fastConfig(hb, src)
	var fenced atomic.Bool
	fenced.Store(true)
	cfg.Fence = func() (int64, error) {
		if fenced.Load() {
			return 0, errTestFenced
		}
		return 3, nil
	}
	u, _ := upload.New(cfg)
	startRun(t, u)
	waitFor(t, "loaded", 5*time.Second, func() bool { return u.Manifest() != nil })
	sameManifest(t, "uploader's legacy state", u.Manifest(), want)
	if n := hb.writeCount(); n != 0 {
		t.Fatalf("%d writes while fenced", n)
	}
	// Unfenced: the first commit migrates first.
	fenced.Store(false)
	commitOneByOne(t, u, src, []int64{50 << 30})
	keys := metaKeys(t, mem)
	if len(keys["legacy"]) != 0 || len(keys["snap"]) != 1 || !strings.HasSuffix(keys["snap"][0], fmt.Sprintf("%020d", 41)) || len(keys["log"]) != 1 {
		t.Fatalf("after the migration: %v", keys)
	}
	for _, o := range cq {
		if _, err := mem.Stat(ctx, o.Key); !errors.Is(err, tier.ErrNotExist) {
			t.Fatalf("consumequeue object %s not deleted: %v", o.Key, err)
		}
	}
	m := load(t, mem)
	if m.Version != 42 || m.Epoch != 3 || len(m.Objects) != len(objs)+1 || len(m.Expired) != 1 || m.Expired[0] != legacy.Expired[0] {
		t.Fatalf("after the migration: v%d epoch %d, %d objects, expired %v", m.Version, m.Epoch, len(m.Objects), m.Expired)
	}
	sameManifest(t, "after the migration", m, u.Manifest())

	// A second bucket: migration happens at start when the fence allows.
	mem2 := tier.NewMem()
	if err := mem2.Put(ctx, upload.ManifestKey(pfx), bytes.NewReader(buf), int64(len(buf))); err != nil {
		t.Fatal(err)
	}
	cfg2 := fastConfig(mem2, newSource())
	cfg2.Fence = func() (int64, error) { return 2, nil }
	u2, _ := upload.New(cfg2)
	startRun(t, u2)
	waitFor(t, "migrated at start", 5*time.Second, func() bool {
		k := metaKeys(t, mem2)
		return len(k["snap"]) == 1 && len(k["legacy"]) == 0
	})
	sameManifest(t, "migrated at start", load(t, mem2), want)
}

// synthLegacy is a read-only bucket serving a format-0 manifest.json of
// size bytes: a few objects padded with whitespace, generated on the fly.
type synthLegacy struct {
	tier.Reader
	head, tail []byte
	size       int64
}

func (s *synthLegacy) byteAt(off int64) byte {
	switch {
	case off < int64(len(s.head)):
		return s.head[off]
	case off >= s.size-int64(len(s.tail)):
		return s.tail[off-(s.size-int64(len(s.tail)))]
	}
	return ' '
}

func (s *synthLegacy) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	if key != upload.ManifestKey(pfx) {
		return tier.ErrNotExist
	}
	if err := tier.CheckRange(key, off, len(p), s.size); err != nil {
		return err
	}
	for i := range p {
		p[i] = s.byteAt(off + int64(i))
	}
	return nil
}

func (s *synthLegacy) Stat(ctx context.Context, key string) (tier.Attrs, error) {
	if key != upload.ManifestKey(pfx) {
		return tier.Attrs{}, tier.ErrNotExist
	}
	return tier.Attrs{Size: s.size, ETag: "x"}, nil
}

func (s *synthLegacy) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	if strings.HasPrefix(upload.ManifestKey(pfx), prefix) {
		return fn(upload.ManifestKey(pfx), s.size)
	}
	return nil
}

// TestNoSizeCliff: the 256 MiB manifest limit is gone. A legacy
// manifest.json past it is read (streamed); and in the new format no
// object grows with history (TestCommitAppendsDelta: a commit's delta is
// the same size at any history; snapshot shards hold at most twice
// shardObjects objects).
func TestNoSizeCliff(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("reads a 257 MiB manifest")
	}
	objs := history(2)
	tail, _ := json.Marshal(objs)
	s := &synthLegacy{head: []byte(`{"version":9,"objects":`), tail: append(tail, '}'), size: 257 << 20}
	m, _, err := upload.LoadManifest(context.Background(), s, upload.ManifestKey(pfx))
	if err != nil || len(m.Objects) != 6 || m.Version != 9 {
		t.Fatalf("257 MiB legacy manifest: %v, %+v", err, m)
	}
}
