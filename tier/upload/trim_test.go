package upload_test

import (
	"context"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestTrimRemovesObjectsBelowFloor: Trim drops the commitlog objects that
// end at or below the floor from the manifest (later commitlog objects
// stay), and a concurrent upload is not undone.
func TestTrimRemovesObjectsBelowFloor(t *testing.T) {
	src := newSource()
	addSegments(src)
	b := tier.NewMem()
	u, err := upload.New(fastConfig(b, src))
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, u)
	defer stop()
	waitFor(t, "all uploaded", 10*time.Second, src.allUploaded)
	floor := int64(300<<10 + 1) // the end of the first two commitlog segments
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	removed, err := u.Trim(ctx, floor)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 || removed[0].Base != 0 || removed[1].Base != 300<<10 {
		t.Fatalf("removed %+v, want the commitlog objects at 0 and %d", removed, 300<<10)
	}
	m, _, err := upload.LoadManifest(ctx, b, upload.ManifestKey("c1/broker-a"))
	if err != nil {
		t.Fatal(err)
	}
	cl := m.CommitLog()
	if len(cl) != 3 || cl[0].Base != floor {
		t.Fatalf("commitlog objects after trim: %+v", cl)
	}
	// A later upload merges into the trimmed manifest, not the old one.
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 714<<10 + 8}, jsonSegment(42, 1000))
	u.Notify()
	waitFor(t, "new segment uploaded", 10*time.Second, src.allUploaded)
	m, _, err = upload.LoadManifest(ctx, b, upload.ManifestKey("c1/broker-a"))
	if err != nil {
		t.Fatal(err)
	}
	if cl := m.CommitLog(); len(cl) != 4 || cl[0].Base != floor {
		t.Fatalf("after a new upload the trimmed objects came back: %+v", cl)
	}
}

// TestExpireMiddleObjects: Expire removes commitlog objects from the middle
// of the log (with their indexes), records their ranges as expired so the
// log still reads as one run, never removes the newest object, and Trim
// forgets an expired range once the prefix before it is gone.
func TestExpireMiddleObjects(t *testing.T) {
	src := newSource()
	addSegments(src) // commitlog objects at 0, 300K, 300K+1, 500K+8, 564K+8
	for _, base := range []int64{0, 300 << 10, 300<<10 + 1, 500<<10 + 8, 564<<10 + 8} {
		src.add(upload.Segment{Kind: upload.KindQueueIndex, Base: base}, jsonSegment(uint64(base%97), 100))
	}
	b := tier.NewMem()
	u, err := upload.New(fastConfig(b, src))
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, u)
	defer stop()
	waitFor(t, "all uploaded", 10*time.Second, src.allUploaded)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	last := int64(564<<10 + 8)
	removed, err := u.Expire(ctx, []int64{300 << 10, 300<<10 + 1, last})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range removed {
		if o.Base == last {
			t.Fatalf("the newest commitlog object was removed: %+v", o)
		}
		kinds[o.Kind]++
	}
	if kinds[upload.KindCommitLog.String()] != 2 || kinds[upload.KindQueueIndex.String()] != 2 || len(removed) != 4 {
		t.Fatalf("removed %+v, want the two middle segments and their queue indexes", removed)
	}
	m, _, err := upload.LoadManifest(ctx, b, upload.ManifestKey("c1/broker-a"))
	if err != nil {
		t.Fatal(err)
	}
	want := []upload.Span{{From: 300 << 10, To: 500<<10 + 8}}
	if len(m.Expired) != 1 || m.Expired[0] != want[0] {
		t.Fatalf("expired ranges %+v, want %+v", m.Expired, want)
	}
	if run := m.Contiguous(nil); len(run) != 3 || run[2].Base != last {
		t.Fatalf("contiguous run %+v: want the three objects left, the gap counted as present", run)
	}
	// Without the expired range the run would stop at the gap.
	m2 := *m
	m2.Expired = nil
	if run := m2.Contiguous(nil); len(run) != 1 {
		t.Fatalf("contiguous run without the expired range: %+v", run)
	}
	// A later upload keeps the expired range.
	src.add(upload.Segment{Kind: upload.KindCommitLog, Base: 714<<10 + 8}, jsonSegment(42, 1000))
	u.Notify()
	waitFor(t, "new segment uploaded", 10*time.Second, src.allUploaded)
	if m := u.Manifest(); len(m.Expired) != 1 || len(m.CommitLog()) != 4 {
		t.Fatalf("after a new upload: expired %+v, objects %+v", m.Expired, m.CommitLog())
	}
	// The prefix goes: the expired range below the first object left goes too.
	if _, err := u.Trim(ctx, 300<<10); err != nil {
		t.Fatal(err)
	}
	if m := u.Manifest(); len(m.Expired) != 0 || m.CommitLog()[0].Base != 500<<10+8 {
		t.Fatalf("after trimming the prefix: expired %+v, objects %+v", m.Expired, m.CommitLog())
	}
}
