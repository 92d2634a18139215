package tiering_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestOpenSyncsSegmentBeforeUpload: with flush=async a segment seals
// without an fdatasync, and the flusher may not have run yet; Open of its
// commitlog for the uploader makes it durable first, so the bucket never
// holds bytes a power cut could take from the local log.
func TestOpenSyncsSegmentBeforeUpload(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(store.Options{Dir: filepath.Join(dir, "store"), SegmentSize: 4 << 20, FlushInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for i := range 500 {
		m := store.Message{Topic: "Sync", QueueID: int32(i % 4), Body: fmt.Appendf(nil, "body %05d", i), BornTimestamp: 1700000000000}
		if _, err := st.Put(ctx, []store.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SealActive(); err != nil {
		t.Fatal(err)
	}
	sg := st.SealedSegments()[0]
	end := sg.Base + sg.Length
	if f := st.FlushedPhysOffset(); f >= end {
		t.Fatalf("flushed %d before the upload: the test needs a sealed segment not synced yet (end %d)", f, end)
	}
	tr, _ := openTiering(t, st, dir)
	r, err := tr.Open(ctx, upload.Segment{Kind: upload.KindCommitLog, Name: sg.Path, Base: sg.Base, Length: sg.Length})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if f := st.FlushedPhysOffset(); f < end {
		t.Fatalf("Open handed the uploader segment [%d, %d) with only %d durable", sg.Base, end, f)
	}
}
