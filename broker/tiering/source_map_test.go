package tiering_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/tiering"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/segfile"
	"github.com/stratamq/stratamq/tier/upload"
)

// TestOpenMapsSealedSegment: on the real filesystem Open hands the
// uploader a sealed segment as a read-only mapping (segfile.Mapped) with
// its queue-major layout, and the object encoded from it holds exactly
// the segment's bytes: decoded frame by frame and put back in log order
// through its layout section, they equal the file.
func TestOpenMapsSealedSegment(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(store.Options{Dir: filepath.Join(dir, "store"), SegmentSize: 4 << 20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for i := range 3000 {
		m := store.Message{Topic: "Map", QueueID: int32(i % 4), Body: fmt.Appendf(nil, "body %05d %0300d", i, i*7919),
			BornTimestamp: 1700000000000, Properties: fmt.Sprintf("UNIQ_KEY\x01K%06d\x02", i)}
		if _, err := st.Put(ctx, []store.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SealActive(); err != nil {
		t.Fatal(err)
	}
	sg := st.SealedSegments()[0]
	tr, bucket := openTiering(t, st, dir)
	defer tr.Close()
	r, err := tr.Open(ctx, upload.Segment{Kind: upload.KindCommitLog, Name: sg.Path, Base: sg.Base, Length: sg.Length})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want, err := os.ReadFile(sg.Path)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := r.(segfile.Mapped)
	if !ok || !bytes.Equal(m.MappedBytes(), want) {
		t.Fatalf("Open gave %T (mapped %v), want a mapping of the segment's bytes", r, ok)
	}
	// The layout's scan mapped the segment; the frames are read from that
	// same mapping, not a second one.
	if maps, err := os.ReadFile("/proc/self/maps"); err == nil {
		if n := bytes.Count(maps, []byte(" "+sg.Path+"\n")); n != 1 {
			t.Fatalf("%d mappings of the segment, want 1", n)
		}
	}
	l, ok := r.(upload.Layouter)
	if !ok || len(l.Layout()) < 4 {
		t.Fatal("no queue-major layout")
	}
	var obj bytes.Buffer
	w, err := segfile.NewWriter(&obj, segfile.Options{FrameSize: 64 << 10, Layout: l.Layout(), Base: sg.Base})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFrom(r, r.Size()); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bucket.Put(ctx, "x.seg", bytes.NewReader(obj.Bytes()), int64(obj.Len())); err != nil {
		t.Fatal(err)
	}
	f, err := segfile.ReadFooter(ctx, bucket.ReadAt, "x.seg", int64(obj.Len()))
	if err != nil {
		t.Fatal(err)
	}
	frames, err := segfile.ReadFrames(ctx, bucket.ReadAt, "x.seg", f, 0, len(f.Frames)-1)
	if err != nil {
		t.Fatal(err)
	}
	stream := bytes.Join(frames, nil)
	runs, err := segfile.ReadLayout(ctx, bucket.ReadAt, "x.seg", f)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, f.LogicalSize)
	for e := runs; len(e) > 0; e = e[segfile.LayoutEntrySize:] {
		off, n, pos := binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint32(e[8:]), binary.LittleEndian.Uint64(e[12:])
		copy(got[off:off+uint64(n)], stream[pos:pos+uint64(n)])
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the object's bytes, in log order, differ from the segment's")
	}
}

// openTiering opens a Tiering (queue-major layout, an in-memory bucket,
// local segments kept) over st, its data dir under dir; closed with the
// test.
func openTiering(t *testing.T, st *store.Store, dir string) (*tiering.Tiering, tier.Bucket) {
	t.Helper()
	bucket := tier.NewMem()
	tr, err := tiering.New(tiering.Config{Bucket: bucket, FS: vfs.OS(), DataDir: filepath.Join(dir, "data"), Layout: "queue",
		LocalRetention: 1 << 40, SegmentMaxAge: time.Hour, SegmentSize: 4 << 20},
		tiering.Deps{Store: st, Owner: benchOwner{bucket}, Retention: benchRetention{}, Logger: slog.New(slog.DiscardHandler)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, bucket
}
