package upload_test

import (
	"context"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestTrimRemovesObjectsBelowFloor: Trim drops the commitlog objects that
// end at or below the floor from the manifest (consumequeue objects and
// later commitlog objects stay), and a concurrent upload is not undone.
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
	cq := 0
	for _, o := range m.Objects {
		if o.Kind == upload.KindConsumeQueue.String() {
			cq++
		}
	}
	if cq != 2 {
		t.Fatalf("consumequeue objects after trim: %d, want 2", cq)
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
