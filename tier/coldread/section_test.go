package coldread_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/segfile"
)

// TestSectionObjects: a segment's index stored as a section of its
// object reads as an object of its own (Object.Off), through the same
// footer and frame caches: a reread costs no GET, and the segment's data
// and its two sections never serve each other's frames.
func TestSectionObjects(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, base, 200<<10, 16<<10, []int{200 << 10})
	qidx := bytes.Repeat([]byte("queue index entry 0123456789 "), 2000)
	kix := bytes.Repeat([]byte("key index bucket "), 3000)
	var obj bytes.Buffer
	w, err := segfile.NewWriter(&obj, segfile.Options{FrameSize: 16 << 10, Base: base})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFrom(bytes.NewReader(fx.data), int64(len(fx.data))); err != nil {
		t.Fatal(err)
	}
	for id, b := range [][]byte{1: qidx, 2: kix} {
		if b == nil {
			continue
		}
		if _, err := w.AddSection(uint32(id), bytes.NewReader(b), int64(len(b)), segfile.Options{FrameSize: 8 << 10}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	mem := tier.NewMem()
	key := fx.objs[0].Key
	if err := mem.Put(ctx, key, bytes.NewReader(obj.Bytes()), int64(obj.Len())); err != nil {
		t.Fatal(err)
	}
	cb := newCounting(mem)
	seg := coldread.Object{Key: key, Base: base, Length: int64(len(fx.data)), Size: int64(obj.Len())}
	r := newReader(t, cb, []coldread.Object{seg}, coldread.Config{ReadAhead: -1})
	f := w.Footer()
	for id, want := range [][]byte{1: qidx, 2: kix} {
		if want == nil {
			continue
		}
		s, _ := f.Section(uint32(id))
		o := coldread.Object{Key: key, Off: s.Off, Size: s.Size, Length: s.LogicalSize}
		got := make([]byte, len(want))
		if err := r.ReadObjectAt(ctx, o, got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("section %d read back other bytes", id)
		}
		before := cb.count()
		part := make([]byte, 100)
		if err := r.ReadObjectAt(ctx, o, part, 9000); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(part, want[9000:9100]) || cb.count() != before {
			t.Fatalf("section %d: a reread cost %d GETs (want 0, from the cache)", id, cb.count()-before)
		}
	}
	// The segment's own records, unaffected by its sections' cached frames.
	got := make([]byte, len(fx.data))
	if _, err := r.ReadAt(ctx, base, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, fx.data) {
		t.Fatal("the segment's data read back other bytes")
	}
	if err := r.SetObjects([]coldread.Object{{Key: key, Off: 10, Base: base, Length: 1, Size: 100}}); err == nil {
		t.Fatal("a section accepted in the object table")
	}
}
