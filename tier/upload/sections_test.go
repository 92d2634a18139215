package upload_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/segfile"
	"github.com/stratamq/stratamq/tier/upload"
)

// sectionSource is a memSource of n commitlog segments whose queue and
// key indexes are opened (not listed), as the broker's store serves them
// to Config.Sections.
func sectionSource(n int) (*memSource, map[string][]byte) {
	src := newSource()
	src.opened = map[string][]byte{}
	base := int64(0)
	for i := range n {
		data := jsonSegment(uint64(i), 200<<10+i*1000)
		seg := upload.Segment{Kind: upload.KindCommitLog, Base: base, Name: fmt.Sprintf("seg-%d", i)}
		src.add(seg, data)
		src.opened[fmt.Sprintf("seg-%d:%s", i, upload.KindQueueIndex)] = jsonSegment(uint64(100+i), 20<<10+i)
		src.opened[fmt.Sprintf("seg-%d:%s", i, upload.KindKeyIndex)] = jsonSegment(uint64(200+i), 9<<10+i)
		base += int64(len(data))
	}
	return src, src.opened
}

func sectionConfig(b tier.Bucket, src upload.SegmentSource) upload.Config {
	cfg := fastConfig(b, src)
	cfg.Sections = []upload.Kind{upload.KindQueueIndex, upload.KindKeyIndex}
	cfg.PairQueueIndex, cfg.PairKeyIndex = true, true
	return cfg
}

// segmentKeys lists the bucket's objects under prefix/commitlog/.
func segmentKeys(t *testing.T, b tier.Bucket, prefix string) []string {
	t.Helper()
	var keys []string
	if err := b.List(context.Background(), prefix+"/commitlog/", func(key string, size int64) error {
		keys = append(keys, key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestUploadSectionsOneObjectPerSegment: with Config.Sections a segment
// and its queue and key index are one object (one PUT, one manifest
// entry), the bucket holds nothing else per segment, and each index reads
// back, through Manifest.Indexes, as the bytes the source gave.
func TestUploadSectionsOneObjectPerSegment(t *testing.T) {
	ctx := context.Background()
	const n = 4
	src, idx := sectionSource(n)
	hb := newHookBucket(tier.NewMem())
	cfg := sectionConfig(hb, src)
	cfg.ManifestDelay = time.Hour // one delta for all: Flush below
	u, err := upload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, u)
	waitFor(t, "every segment's object put", 20*time.Second, func() bool { return len(segmentKeys(t, hb, "c1/broker-a")) == n })
	u.Flush()
	waitFor(t, "all segments uploaded", 20*time.Second, src.allUploaded)
	stop()

	keys := segmentKeys(t, hb, "c1/broker-a")
	if len(keys) != n {
		t.Fatalf("bucket holds %d objects under commitlog/, want %d (one per segment): %v", len(keys), n, keys)
	}
	var deltas int
	for _, k := range keys {
		if !strings.HasSuffix(k, ".seg") {
			t.Fatalf("object %s besides the segments", k)
		}
		if c := hb.putCount(k); c != 1 {
			t.Fatalf("%s put %d times", k, c)
		}
	}
	hb.mu.Lock()
	for k := range hb.puts {
		if upload.IsDeltaKey("c1/broker-a", k) {
			deltas++
		}
	}
	puts := 0
	for _, c := range hb.puts {
		puts += c
	}
	hb.mu.Unlock()
	if deltas != 1 || puts != n+1 {
		t.Fatalf("%d PUTs, %d of them deltas; want %d object PUTs and one delta", puts, deltas, n)
	}

	m, _, err := upload.LoadManifest(ctx, hb, upload.ManifestKey("c1/broker-a"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Objects) != n {
		t.Fatalf("manifest lists %d objects, want %d", len(m.Objects), n)
	}
	for _, k := range []upload.Kind{upload.KindQueueIndex, upload.KindKeyIndex} {
		views := m.Indexes(k)
		if len(views) != n {
			t.Fatalf("%s: %d indexes, want %d", k, len(views), n)
		}
		for i, o := range m.CommitLog() {
			v := views[o.Base]
			if v.Key != o.Key || v.Off <= 0 || v.Off+v.Size > o.Size {
				t.Fatalf("%s of %s: %+v not inside the object of %d bytes", k, o.Key, v, o.Size)
			}
			f, err := segfile.ReadFooter(ctx, segfile.Section{Off: v.Off, Size: v.Size}.ReadAt(hb.ReadAt), v.Key, v.Size)
			if err != nil {
				t.Fatal(err)
			}
			frames, err := segfile.ReadFrames(ctx, segfile.Section{Off: v.Off, Size: v.Size}.ReadAt(hb.ReadAt), v.Key, f, 0, len(f.Frames)-1)
			if err != nil {
				t.Fatal(err)
			}
			if want := idx[fmt.Sprintf("seg-%d:%s", i, k)]; !bytes.Equal(bytes.Join(frames, nil), want) || v.Length != int64(len(want)) {
				t.Fatalf("%s of segment %d reads back %d bytes, want the source's %d", k, i, v.Length, len(want))
			}
			// The object describes itself: its footer lists the sections
			// where the manifest says.
			of, err := segfile.ReadFooter(ctx, hb.ReadAt, o.Key, o.Size)
			if err != nil {
				t.Fatal(err)
			}
			if s, ok := of.Section(uint32(k)); !ok || s.Off != v.Off || s.Size != v.Size {
				t.Fatalf("%s: footer section %+v, manifest %+v", o.Key, s, v)
			}
		}
	}
}

// TestUploadCrashBetweenPutAndCommit: objects put but not yet listed (the
// process dies before the delta) are not marked uploaded, so the store
// keeps its local copy; the next run puts them again under the same keys
// (no second object per segment) and lists them.
func TestUploadCrashBetweenPutAndCommit(t *testing.T) {
	const n = 3
	src, _ := sectionSource(n)
	mem := tier.NewMem()
	hb := newHookBucket(mem)
	hb.putHook = func(key string) error {
		if upload.IsDeltaKey("c1/broker-a", key) {
			return errors.New("injected: the process dies before the delta")
		}
		return nil
	}
	u, err := upload.New(sectionConfig(hb, src))
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, u)
	waitFor(t, "every segment's object put", 20*time.Second, func() bool { return len(segmentKeys(t, mem, "c1/broker-a")) == n })
	stop() // the crash: nothing listed
	src.mu.Lock()
	marks := src.marks
	src.mu.Unlock()
	if marks != 0 {
		t.Fatalf("%d segments marked uploaded before any delta was written", marks)
	}
	if m, _, err := upload.LoadManifest(context.Background(), mem, upload.ManifestKey("c1/broker-a")); err != nil || len(m.Objects) != 0 {
		t.Fatalf("manifest after the crash: %v, %v", m, err)
	}

	hb2 := newHookBucket(mem)
	u2, err := upload.New(sectionConfig(hb2, src))
	if err != nil {
		t.Fatal(err)
	}
	stop2 := startRun(t, u2)
	waitFor(t, "all segments uploaded by the next run", 20*time.Second, src.allUploaded)
	stop2()
	if keys := segmentKeys(t, mem, "c1/broker-a"); len(keys) != n {
		t.Fatalf("bucket holds %v, want %d segment objects", keys, n)
	}
	m, _, err := upload.LoadManifest(context.Background(), mem, upload.ManifestKey("c1/broker-a"))
	if err != nil || len(m.CommitLog()) != n || len(m.Indexes(upload.KindKeyIndex)) != n {
		t.Fatalf("manifest after the next run: %+v, %v", m, err)
	}
}

// TestUploadReadsLegacyIndexObjects: a manifest written before sections
// (queue and key indexes as objects of their own, format version 1) is
// read alike: Indexes finds them, and a segment uploaded since, with its
// indexes inside, sits beside them.
func TestUploadReadsLegacyIndexObjects(t *testing.T) {
	ctx := context.Background()
	mem := tier.NewMem()
	old := upload.EncodeDelta("c1/broker-a", 1, 0, []upload.Object{
		{Key: "c1/broker-a/commitlog/00000000000000000000.seg", Kind: "commitlog", Base: 0, Length: 100, Size: 90, Frames: 1},
		{Key: "c1/broker-a/commitlog/00000000000000000000.idx", Kind: "queueindex", Base: 0, Length: 40, Size: 60, Frames: 1},
		{Key: "c1/broker-a/commitlog/00000000000000000000.kix", Kind: "keyindex", Base: 0, Length: 30, Size: 50, Frames: 1},
	})
	if old[4] != 1 {
		t.Fatalf("a delta without sections written as format version %d, want 1 (what older readers read)", old[4])
	}
	if err := mem.Put(ctx, upload.DeltaKey("c1/broker-a", 1), bytes.NewReader(old), int64(len(old))); err != nil {
		t.Fatal(err)
	}
	src, _ := sectionSource(1)
	src.mu.Lock()
	for _, e := range src.segs {
		e.seg.Base = 100 // after the legacy segment
	}
	src.mu.Unlock()
	u, err := upload.New(sectionConfig(mem, src))
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, u)
	u.Flush()
	waitFor(t, "the new segment uploaded", 20*time.Second, src.allUploaded)
	stop()
	m, _, err := upload.LoadManifest(ctx, mem, upload.ManifestKey("c1/broker-a"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []upload.Kind{upload.KindQueueIndex, upload.KindKeyIndex} {
		v := m.Indexes(k)
		if len(v) != 2 || v[0].Off != 0 || !strings.HasSuffix(v[0].Key, map[upload.Kind]string{upload.KindQueueIndex: ".idx", upload.KindKeyIndex: ".kix"}[k]) ||
			v[100].Off == 0 || !strings.HasSuffix(v[100].Key, ".seg") {
			t.Fatalf("%s: %+v", k, v)
		}
	}
	// Retention trims a legacy segment with its index objects.
	removed, err := trimAll(ctx, mem, src, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 3 {
		t.Fatalf("trim removed %+v, want the legacy segment and its two index objects", removed)
	}
}

func trimAll(ctx context.Context, b tier.Bucket, src upload.SegmentSource, floor int64) ([]upload.Object, error) {
	u, err := upload.New(sectionConfig(b, src))
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- u.Run(cctx) }()
	defer func() { cancel(); <-errc }()
	return u.Trim(ctx, floor)
}

// TestUploadCommitWindow: the committer holds a finished upload while
// MoreSoon expects another segment in the window and lists both in one
// delta; once MoreSoon expects none (and no upload runs) it commits at
// once, however long ManifestDelay is.
func TestUploadCommitWindow(t *testing.T) {
	src, _ := sectionSource(3)
	src.mu.Lock()
	later := map[string]*srcSeg{}
	for name, e := range src.segs {
		if name != "seg-0" {
			later[name] = e
			delete(src.segs, name)
		}
	}
	src.mu.Unlock()
	hb := newHookBucket(tier.NewMem())
	var deltas atomic.Int32
	var listed atomic.Int32 // objects listed by delta 1
	hb.checkMan = func(key string, buf []byte) {
		if !upload.IsDeltaKey("c1/broker-a", key) {
			return
		}
		d, err := upload.DecodeDelta("c1/broker-a", buf)
		if err != nil {
			t.Error(err)
			return
		}
		if deltas.Add(1) == 1 {
			listed.Store(int32(len(d.Put)))
		}
	}
	var more atomic.Bool
	var asked atomic.Int32
	more.Store(true)
	cfg := sectionConfig(hb, src)
	cfg.ManifestDelay = time.Hour
	cfg.MoreSoon = func(within time.Duration) bool {
		if within <= 0 || within > time.Hour {
			t.Errorf("MoreSoon(%v): outside the window", within)
		}
		asked.Add(1)
		return more.Load()
	}
	u, err := upload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, u)
	// seg-0 is uploaded and held: the committer asked whether more comes.
	waitFor(t, "the committer holding seg-0", 20*time.Second, func() bool { return asked.Load() > 0 })
	if deltas.Load() != 0 {
		t.Fatal("a delta written while MoreSoon expected another segment")
	}
	src.mu.Lock()
	src.segs["seg-1"] = later["seg-1"]
	src.mu.Unlock()
	u.Notify()
	waitFor(t, "seg-1's object put", 20*time.Second, func() bool { return len(segmentKeys(t, hb, "c1/broker-a")) == 2 })
	more.Store(false)
	waitFor(t, "seg-0 and seg-1 listed", 20*time.Second, src.allUploaded)
	if deltas.Load() != 1 || listed.Load() != 2 {
		t.Fatalf("%d deltas, the first listing %d objects; want one delta listing both segments", deltas.Load(), listed.Load())
	}
	// Nothing more expected: listed at once, not after the hour.
	src.mu.Lock()
	src.segs["seg-2"] = later["seg-2"]
	src.mu.Unlock()
	u.Notify()
	waitFor(t, "seg-2 listed without waiting for ManifestDelay", 20*time.Second, src.allUploaded)
	stop()
	if deltas.Load() != 2 {
		t.Fatalf("%d deltas, want 2", deltas.Load())
	}
}
