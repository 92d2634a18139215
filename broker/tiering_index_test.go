package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/tiering"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// spoolFile is a queue index served from a file in the spool dir (the
// only segment reader of package tiering with a Name).
type spoolFile interface {
	upload.SegmentReader
	Name() string
}

// TestTieringQueueIndexSpoolFile: on the real filesystem the uploader gets
// a queue index built into a file in the spool dir, holding exactly the
// blob store.BuildSegmentIndex makes; Close removes the file and frees the
// build slot, and a failed build leaves no file and frees it too.
func TestTieringQueueIndexSpoolFile(t *testing.T) {
	t.Parallel()
	bucket := &downBucket{Bucket: tier.NewMem()}
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 64 << 10, LocalRetention: 0, CacheSize: 1 << 20}
	b, _, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	waitCond(t, 10*time.Second, "the uploader loaded the manifest", func() bool { return b.tier.Uploader().Manifest() != nil })
	bucket.down.Store(true)        // the uploader's own uploads fail: nothing is dropped
	defer bucket.down.Store(false) // up again for the shutdown's uploads
	ctx := context.Background()
	batch := make([]store.Message, 512)
	for i := range batch {
		batch[i] = store.Message{Topic: "Idx", QueueID: int32(i % 3), Body: []byte("0123456789abcdef"), TagsCode: int64(i % 5)}
	}
	for len(b.store.SealedSegments()) < 2 {
		if _, err := b.store.Put(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	spool := tiering.SpoolDir(dir)
	for _, sg := range b.store.SealedSegments() {
		want, err := b.store.BuildSegmentIndex(sg.Base)
		if err != nil {
			t.Fatal(err)
		}
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := b.tier.Open(octx, upload.Segment{Kind: upload.KindQueueIndex, Name: fmt.Sprintf("queueindex:%020d", sg.Base), Base: sg.Base, Length: -1})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		f, ok := r.(spoolFile)
		if !ok {
			t.Fatalf("queue index served as %T, want a spool file", r)
		}
		if filepath.Dir(f.Name()) != spool {
			t.Fatalf("queue index built in %s, want the spool dir %s", f.Name(), spool)
		}
		if r.Size() != int64(len(want)) {
			t.Fatalf("segment %d: size %d, blob %d", sg.Base, r.Size(), len(want))
		}
		got := make([]byte, len(want)+10)
		n, err := r.ReadAt(got, 0)
		if n != len(want) || !errors.Is(err, io.EOF) || !bytes.Equal(got[:n], want) {
			t.Fatalf("segment %d: read %d bytes (%v), want the %d-byte blob then EOF", sg.Base, n, err, len(want))
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(f.Name()); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("queue index file still there after Close: %v", err)
		}
	}
	// A segment that is not there: an error, no file, and the slot is free
	// for the next build.
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := b.tier.Open(octx, upload.Segment{Kind: upload.KindQueueIndex, Base: 1 << 40, Length: -1}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("queue index of a missing segment: %v", err)
	}
	base := b.store.SealedSegments()[0].Base
	r, err := b.tier.Open(octx, upload.Segment{Kind: upload.KindQueueIndex, Base: base, Length: -1})
	if err != nil {
		t.Fatalf("build after a failed one: %v", err)
	}
	name := r.(spoolFile).Name()
	r.Close()
	if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("queue index file still there after Close: %v", err)
	}
}
