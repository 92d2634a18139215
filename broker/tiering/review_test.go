package tiering_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/broker/tiering"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

func reviewMaps(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, path) {
			out = append(out, l)
		}
	}
	return out
}

// reviewFds counts the process's descriptors open on files under dir
// (the store's and the tiering's; the runtime's and other goroutines'
// own descriptors come and go).
func reviewFds(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(target, dir) {
			n++
		}
	}
	return n
}

// reviewTiering opens a store on the real filesystem with one sealed
// segment of 4 queues and a Tiering (queue-major layout) over it.
func reviewTiering(t *testing.T) (*store.Store, *tiering.Tiering, store.SegmentInfo) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(store.Options{Dir: filepath.Join(dir, "store"), SegmentSize: 4 << 20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 2000 {
		m := store.Message{Topic: "Rev", QueueID: int32(i % 4), Body: fmt.Appendf(nil, "body %05d %0300d", i, i),
			BornTimestamp: 1700000000000, Properties: fmt.Sprintf("UNIQ_KEY\x01K%06d\x02", i)}
		if _, err := st.Put(ctx, []store.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SealActive(); err != nil {
		t.Fatal(err)
	}
	tr, _ := openTiering(t, st, dir)
	return st, tr, st.SealedSegments()[0]
}

// TestReviewOpenReleasesMappingsAndFds: the uploader's sequence for a
// segment (Open of the commitlog, mapped, with its layout; Open of its
// queue index, which takes the layout's plan; Close of both), repeated,
// leaves no mapping of the segment file and no descriptor behind. Holds.
func TestReviewOpenReleasesMappingsAndFds(t *testing.T) {
	st, tr, sg := reviewTiering(t)
	defer st.Close()
	defer tr.Close()
	ctx := context.Background()
	dir := filepath.Dir(filepath.Dir(filepath.Dir(sg.Path))) // the test's temp dir: store/commitlog/<segment>
	fds := reviewFds(t, dir)
	for range 20 {
		r, err := tr.Open(ctx, upload.Segment{Kind: upload.KindCommitLog, Name: sg.Path, Base: sg.Base, Length: sg.Length})
		if err != nil {
			t.Fatal(err)
		}
		if len(reviewMaps(t, sg.Path)) == 0 {
			t.Skip("the segment was not mapped")
		}
		ix, err := tr.Open(ctx, upload.Segment{Kind: upload.KindQueueIndex, Name: "queueindex", Base: sg.Base, Length: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if m := reviewMaps(t, sg.Path); len(m) != 0 {
		t.Fatalf("segment still mapped after its uploads:\n%s", strings.Join(m, "\n"))
	}
	if n := reviewFds(t, dir); n > fds {
		t.Fatalf("%d descriptors open, %d before", n, fds)
	}
}

// TestReviewFailedEncodeKeepsSegmentMapped (finding 1, from the broker's
// side): an upload whose encode fails after Open of the commitlog (bucket
// or spool error, lease lost, context ended, the queue index's Open
// failing) never reaches the queue index build that takes the layout's
// plan; the plan keeps the segment mapped after the reader's Close, after
// Tiering.Close and after the store's Close (until two later layouts push
// it out).
func TestReviewFailedEncodeKeepsSegmentMapped(t *testing.T) {
	st, tr, sg := reviewTiering(t)
	ctx := context.Background()
	r, err := tr.Open(ctx, upload.Segment{Kind: upload.KindCommitLog, Name: sg.Path, Base: sg.Base, Length: sg.Length})
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the encode failed
	tr.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if m := reviewMaps(t, sg.Path); len(m) != 0 {
		t.Fatalf("segment still mapped after the store closed:\n%s", strings.Join(m, "\n"))
	}
}
