package segfile_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/segfile"
)

// TestSectionsRoundTrip writes a layout object with two sections (as the
// uploader stores a segment with its queue and key index) and reads every
// part back through a bucket: the data by its layout, each section as an
// object of its own through Section.ReadAt.
func TestSectionsRoundTrip(t *testing.T) {
	ctx := context.Background()
	data := randBytes(11, 300<<10)
	qidx := randBytes(12, 70<<10)
	kix := randBytes(13, 5<<10)
	layout := layoutOf([]int{100 << 10, 100 << 10, 100 << 10}, []int64{0, 1, 0})

	var obj bytes.Buffer
	w, err := segfile.NewWriter(&obj, segfile.Options{FrameSize: 32 << 10, Layout: layout, Base: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFrom(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	sf, err := w.AddSection(3, bytes.NewReader(qidx), int64(len(qidx)), segfile.Options{FrameSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if sf.LogicalSize != int64(len(qidx)) || len(sf.Frames) != 5 {
		t.Fatalf("section footer: %d bytes in %d frames, want %d in 5", sf.LogicalSize, len(sf.Frames), len(qidx))
	}
	if _, err := w.AddSection(2, bytes.NewReader(kix), int64(len(kix)), segfile.Options{}); err == nil {
		t.Fatal("a section added out of order (id 2 after 3)")
	}
	if _, err := w.Write([]byte("late")); err == nil {
		t.Fatal("Write after AddSection was accepted")
	}
	// The refused AddSection left the writer sticky-failed: start over.
	obj.Reset()
	w, _ = segfile.NewWriter(&obj, segfile.Options{FrameSize: 32 << 10, Layout: layout, Base: 4096})
	if err := w.WriteFrom(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		id uint32
		b  []byte
		fs int
	}{{3, qidx, 16 << 10}, {4, kix, 1 << 10}} {
		if _, err := w.AddSection(s.id, bytes.NewReader(s.b), int64(len(s.b)), segfile.Options{FrameSize: s.fs}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := w.Footer()
	if f.ObjectSize() != int64(obj.Len()) {
		t.Fatalf("ObjectSize %d, wrote %d", f.ObjectSize(), obj.Len())
	}

	b := tier.NewMem()
	put(t, b, "s.seg", obj.Bytes())
	rf, err := segfile.ReadFooter(ctx, b.ReadAt, "s.seg", int64(obj.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if rf.Base != 4096 || rf.LogicalSize != int64(len(data)) || rf.Layout == nil || len(rf.Sections) != 2 {
		t.Fatalf("footer read back: base %d, %d bytes, layout %v, %d sections", rf.Base, rf.LogicalSize, rf.Layout != nil, len(rf.Sections))
	}
	// The data, by its layout.
	sec, err := segfile.ReadLayout(ctx, b.ReadAt, "s.seg", rf)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := readAll(ctx, b, "s.seg", int64(obj.Len()))
	if err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off < int64(len(data)); {
		pos, n := rf.Locate(sec, off)
		if !bytes.Equal(stream[pos:pos+n], data[off:off+n]) {
			t.Fatalf("logical %d: bytes differ", off)
		}
		off += n
	}
	// Each section, as an object of its own.
	for _, want := range []struct {
		id uint32
		b  []byte
	}{{3, qidx}, {4, kix}} {
		s, ok := rf.Section(want.id)
		if !ok || s.LogicalSize != int64(len(want.b)) {
			t.Fatalf("section %d: %+v, %v", want.id, s, ok)
		}
		got, err := readAllWith(ctx, s.ReadAt(b.ReadAt), "s.seg", s.Size)
		if err != nil {
			t.Fatalf("section %d: %v", want.id, err)
		}
		if !bytes.Equal(got, want.b) {
			t.Fatalf("section %d: bytes differ", want.id)
		}
		// Confined: a read past its end is refused, not served from the
		// next section.
		if err := s.ReadAt(b.ReadAt)(ctx, "s.seg", make([]byte, 2), s.Size-1); err == nil {
			t.Fatalf("section %d: a read past its end succeeded", want.id)
		}
	}
	if _, ok := rf.Section(1); ok {
		t.Fatal("section 1 found; none was written")
	}

	// A flipped byte in the section table fails the footer's checksum; one
	// in a section's frame fails that frame's.
	tab := bytes.Clone(obj.Bytes())
	tab[len(tab)-segfile.TrailerSize-20] ^= 1
	if _, err := segfile.ReadFooter(ctx, bytesReadAt(tab), "s.seg", int64(len(tab))); !errors.Is(err, segfile.ErrCorrupt) {
		t.Fatalf("a damaged section table read back: %v", err)
	}
	s, _ := rf.Section(3)
	fr := bytes.Clone(obj.Bytes())
	fr[s.Off+10] ^= 1
	if _, err := readAllWith(ctx, s.ReadAt(bytesReadAt(fr)), "s.seg", s.Size); !errors.Is(err, segfile.ErrCorrupt) {
		t.Fatalf("a damaged section frame read back: %v", err)
	}
}

// TestSectionsWithoutLayout: sections after frames stored in log order.
func TestSectionsWithoutLayout(t *testing.T) {
	ctx := context.Background()
	data := randBytes(31, 50<<10)
	idx := randBytes(32, 3<<10)
	var obj bytes.Buffer
	w, _ := segfile.NewWriter(&obj, segfile.Options{FrameSize: 16 << 10})
	if err := w.WriteFrom(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddSection(7, bytes.NewReader(idx), int64(len(idx)), segfile.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rf, err := segfile.ReadFooter(ctx, bytesReadAt(obj.Bytes()), "k", int64(obj.Len()))
	if err != nil {
		t.Fatal(err)
	}
	s, ok := rf.Section(7)
	if rf.Layout != nil || !ok || s.Off != rf.DataSize {
		t.Fatalf("footer: layout %v, section %+v %v, data %d", rf.Layout, s, ok, rf.DataSize)
	}
	got, err := readAllWith(ctx, s.ReadAt(bytesReadAt(obj.Bytes())), "k", s.Size)
	if err != nil || !bytes.Equal(got, idx) {
		t.Fatalf("section read back: %v", err)
	}
}

// TestSectionlessObjectUnchanged: an object written without sections is
// byte for byte what Encode wrote before sections existed (version 1, no
// section table), so readers of that format keep reading it.
func TestSectionlessObjectUnchanged(t *testing.T) {
	data := bytes.Repeat([]byte("compressible, and no frame stored raw; "), 3000)
	obj, f := encode(t, data, segfile.Options{FrameSize: 16 << 10})
	if len(f.Sections) != 0 {
		t.Fatalf("%d sections", len(f.Sections))
	}
	for _, fr := range f.Frames {
		if fr.Raw {
			t.Fatal("a frame stored raw")
		}
	}
	if v := obj[len(obj)-16]; v != 1 {
		t.Fatalf("version %d, want 1", v)
	}
	if want := int64(24 + 32*len(f.Frames)); f.FooterLen != want {
		t.Fatalf("footer %d bytes, want %d", f.FooterLen, want)
	}
}

func bytesReadAt(obj []byte) segfile.ReadAtFunc {
	return func(_ context.Context, _ string, p []byte, off int64) error {
		if off < 0 || off+int64(len(p)) > int64(len(obj)) {
			return errors.New("out of range")
		}
		copy(p, obj[off:])
		return nil
	}
}

func readAllWith(ctx context.Context, readAt segfile.ReadAtFunc, key string, size int64) ([]byte, error) {
	f, err := segfile.ReadFooter(ctx, readAt, key, size)
	if err != nil {
		return nil, err
	}
	var out []byte
	for i := range f.Frames {
		fr, err := segfile.ReadFrames(ctx, readAt, key, f, i, i)
		if err != nil {
			return nil, err
		}
		out = append(out, fr[0]...)
	}
	return out, nil
}
