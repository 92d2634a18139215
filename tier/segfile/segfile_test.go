package segfile_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/segfile"
)

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		// Compressible but not trivial: small alphabet runs.
		b[i] = byte('a' + r.IntN(8))
	}
	return b
}

func encode(t testing.TB, data []byte, opts segfile.Options) ([]byte, *segfile.Footer) {
	t.Helper()
	var obj bytes.Buffer
	f, err := segfile.Encode(&obj, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		t.Fatal(err)
	}
	if f.ObjectSize() != int64(obj.Len()) {
		t.Fatalf("ObjectSize %d, wrote %d", f.ObjectSize(), obj.Len())
	}
	return obj.Bytes(), f
}

func put(t testing.TB, b tier.Bucket, key string, obj []byte) {
	t.Helper()
	if err := b.Put(context.Background(), key, bytes.NewReader(obj), int64(len(obj))); err != nil {
		t.Fatal(err)
	}
}

// readAll decodes the whole object through a bucket, one GET per frame.
func readAll(ctx context.Context, b tier.Bucket, key string, size int64) ([]byte, error) {
	f, err := segfile.ReadFooter(ctx, b.ReadAt, key, size)
	if err != nil {
		return nil, err
	}
	var out []byte
	for i := range f.Frames {
		fr, err := segfile.ReadFrames(ctx, b.ReadAt, key, f, i, i)
		if err != nil {
			return nil, err
		}
		out = append(out, fr[0]...)
	}
	return out, nil
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	const fs = 4096
	for _, n := range []int{0, 1, fs - 1, fs, fs + 1, 3*fs + 17, 40 * fs} {
		t.Run(fmt.Sprintf("size=%d", n), func(t *testing.T) {
			data := randBytes(uint64(n), n)
			obj, f := encode(t, data, segfile.Options{FrameSize: fs, Base: 1 << 40})
			if want := (n + fs - 1) / fs; len(f.Frames) != want {
				t.Fatalf("%d frames, want %d", len(f.Frames), want)
			}
			b := tier.NewMem()
			put(t, b, "k.seg", obj)
			got, err := readAll(ctx, b, "k.seg", int64(len(obj)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("decoded bytes differ")
			}
			rf, err := segfile.ReadFooter(ctx, b.ReadAt, "k.seg", int64(len(obj)))
			if err != nil {
				t.Fatal(err)
			}
			if rf.Base != 1<<40 || rf.LogicalSize != int64(n) || len(rf.Frames) != len(f.Frames) {
				t.Fatalf("footer %+v", rf)
			}
			// Find: every byte maps to the frame that holds it.
			for _, off := range []int64{0, int64(n) / 2, int64(n) - 1} {
				i := rf.Find(off)
				if n == 0 {
					if i != -1 {
						t.Fatalf("Find(%d) = %d on empty", off, i)
					}
					continue
				}
				if fr := rf.Frames[i]; off < fr.Off || off >= fr.End() {
					t.Fatalf("Find(%d) = frame %d %+v", off, i, fr)
				}
			}
			if rf.Find(int64(n)) != -1 || rf.Find(-1) != -1 {
				t.Fatal("Find out of range should be -1")
			}
			if n > 0 && len(rf.Frames) > 1 {
				all, err := segfile.ReadFrames(ctx, b.ReadAt, "k.seg", rf, 0, len(rf.Frames)-1)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(bytes.Join(all, nil), data) {
					t.Fatal("multi-frame read differs")
				}
			}
		})
	}
}

// TestCutsKeepRecordsWhole writes records of random lengths, some longer
// than a frame, and checks every frame boundary is a record boundary.
func TestCutsKeepRecordsWhole(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var data []byte
	var cuts []int64
	for range 500 {
		n := 1 + r.IntN(900)
		if r.IntN(50) == 0 {
			n = 5000 // longer than a frame
		}
		data = append(data, randBytes(uint64(len(data)), n)...)
		cuts = append(cuts, int64(len(data)))
	}
	isCut := map[int64]bool{0: true}
	for _, c := range cuts {
		isCut[c] = true
	}
	// Write in odd-sized chunks to exercise the streaming path.
	var obj bytes.Buffer
	w, err := segfile.NewWriter(&obj, segfile.Options{FrameSize: 2048, Cuts: cuts})
	if err != nil {
		t.Fatal(err)
	}
	for p := data; len(p) > 0; {
		k := min(len(p), 1+r.IntN(3000))
		if _, err := w.Write(p[:k]); err != nil {
			t.Fatal(err)
		}
		p = p[k:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := w.Footer()
	oversized := 0
	for i, fr := range f.Frames {
		if !isCut[fr.Off] || !isCut[fr.End()] {
			t.Fatalf("frame %d [%d, %d) straddles a record", i, fr.Off, fr.End())
		}
		if fr.Len > 2048 {
			oversized++
		}
	}
	if oversized == 0 || len(f.Frames) < 50 {
		t.Fatalf("%d frames, %d oversized: the test did not exercise both cases", len(f.Frames), oversized)
	}
	b := tier.NewMem()
	put(t, b, "c.seg", obj.Bytes())
	got, err := readAll(context.Background(), b, "c.seg", int64(obj.Len()))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("round trip: err=%v equal=%v", err, bytes.Equal(got, data))
	}
}

func TestCutMethod(t *testing.T) {
	var obj bytes.Buffer
	w, err := segfile.NewWriter(&obj, segfile.Options{FrameSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"alpha", "beta", "", "gamma"} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		if err := w.Cut(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var lens []int64
	for _, fr := range w.Footer().Frames {
		lens = append(lens, fr.Len)
	}
	if fmt.Sprint(lens) != "[5 4 5]" {
		t.Fatalf("frame lengths %v, want [5 4 5]", lens)
	}
}

func TestCorruption(t *testing.T) {
	ctx := context.Background()
	data := randBytes(9, 5*4096+100)
	obj, f := encode(t, data, segfile.Options{FrameSize: 4096})
	size := int64(len(obj))
	mutate := func(fn func(o []byte) []byte) tier.Bucket {
		o := fn(bytes.Clone(obj))
		b := tier.NewMem()
		put(t, b, "x.seg", o)
		return b
	}
	flip := func(at int64) func([]byte) []byte {
		return func(o []byte) []byte { o[at] ^= 0x40; return o }
	}

	t.Run("frame-byte", func(t *testing.T) {
		fr := f.Frames[2]
		for _, at := range []int64{fr.CompOff, fr.CompOff + fr.CompLen/2, fr.CompOff + fr.CompLen - 1} {
			b := mutate(flip(at))
			rf, err := segfile.ReadFooter(ctx, b.ReadAt, "x.seg", size)
			if err != nil {
				t.Fatalf("footer should be intact: %v", err)
			}
			// Other frames still read.
			if _, err := segfile.ReadFrames(ctx, b.ReadAt, "x.seg", rf, 1, 1); err != nil {
				t.Fatalf("frame 1: %v", err)
			}
			got, err := segfile.ReadFrames(ctx, b.ReadAt, "x.seg", rf, 2, 2)
			if !errors.Is(err, segfile.ErrCorrupt) || got != nil {
				t.Fatalf("flip at %d: got %d frames, err %v; want ErrCorrupt and nothing", at, len(got), err)
			}
			if _, err := segfile.ReadFrames(ctx, b.ReadAt, "x.seg", rf, 1, 3); !errors.Is(err, segfile.ErrCorrupt) {
				t.Fatalf("range over the bad frame: %v", err)
			}
		}
	})
	t.Run("decode-frame-direct", func(t *testing.T) {
		fr := f.Frames[0]
		comp := bytes.Clone(obj[fr.CompOff : fr.CompOff+fr.CompLen])
		if _, err := segfile.DecodeFrame(nil, fr, comp[:len(comp)-1]); !errors.Is(err, segfile.ErrCorrupt) {
			t.Fatalf("short frame: %v", err)
		}
		bad := fr
		bad.Len++
		if _, err := segfile.DecodeFrame(nil, bad, comp); !errors.Is(err, segfile.ErrCorrupt) {
			t.Fatalf("wrong length: %v", err)
		}
		comp[3] ^= 1
		if _, err := segfile.DecodeFrame(nil, fr, comp); !errors.Is(err, segfile.ErrCorrupt) {
			t.Fatalf("flipped: %v", err)
		}
	})
	t.Run("footer", func(t *testing.T) {
		for name, at := range map[string]int64{
			"footer-body-first":  f.DataSize,
			"footer-entry":       f.DataSize + 24 + 32 + 5,
			"footer-body-last":   f.DataSize + f.FooterLen - 1,
			"trailer-footer-len": size - segfile.TrailerSize,
			"trailer-sum":        size - segfile.TrailerSize + 8,
			"trailer-version":    size - 16,
			"trailer-magic":      size - 1,
		} {
			b := mutate(flip(at))
			if _, err := segfile.ReadFooter(ctx, b.ReadAt, "x.seg", size); !errors.Is(err, segfile.ErrCorrupt) {
				t.Errorf("%s: %v, want ErrCorrupt", name, err)
			}
		}
	})
	t.Run("truncated", func(t *testing.T) {
		for _, n := range []int64{0, 10, segfile.TrailerSize, f.DataSize, size - 1} {
			b := mutate(func(o []byte) []byte { return o[:n] })
			if _, err := segfile.ReadFooter(ctx, b.ReadAt, "x.seg", n); !errors.Is(err, segfile.ErrCorrupt) {
				t.Errorf("truncated to %d: %v, want ErrCorrupt", n, err)
			}
		}
	})
	t.Run("wrong-size", func(t *testing.T) {
		// A stale size from a manifest: the bytes before the real tail are
		// not a trailer, or the sizes do not add up.
		b := mutate(func(o []byte) []byte { return append(o, make([]byte, 100)...) })
		if _, err := segfile.ReadFooter(ctx, b.ReadAt, "x.seg", size+100); !errors.Is(err, segfile.ErrCorrupt) {
			t.Errorf("padded: %v", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, err := segfile.ReadFooter(ctx, tier.NewMem().ReadAt, "nope.seg", size); !errors.Is(err, tier.ErrNotExist) {
			t.Errorf("missing: %v, want ErrNotExist", err)
		}
	})
}

// TestLongFooterTwoReads: a footer longer than TailReadSize takes a second
// GET and still parses.
func TestLongFooterTwoReads(t *testing.T) {
	data := randBytes(3, 3000*64)
	obj, f := encode(t, data, segfile.Options{FrameSize: 64})
	if f.FooterLen+segfile.TrailerSize <= segfile.TailReadSize {
		t.Fatalf("footer %d bytes fits one read; make more frames", f.FooterLen)
	}
	b := tier.NewMem()
	put(t, b, "l.seg", obj)
	reads := 0
	readAt := func(ctx context.Context, key string, p []byte, off int64) error {
		reads++
		return b.ReadAt(ctx, key, p, off)
	}
	rf, err := segfile.ReadFooter(context.Background(), readAt, "l.seg", int64(len(obj)))
	if err != nil {
		t.Fatal(err)
	}
	if reads != 2 || len(rf.Frames) != 3000 {
		t.Fatalf("%d reads, %d frames", reads, len(rf.Frames))
	}
}

func TestOptionsRejected(t *testing.T) {
	for _, o := range []segfile.Options{{FrameSize: -1}, {FrameSize: segfile.MaxFrameSize + 1}, {Cuts: []int64{5, 5}}} {
		if _, err := segfile.NewWriter(&bytes.Buffer{}, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestCompressionRatio is the goal: ≥ 3x on realistic JSON at the
// default frame size.
func TestCompressionRatio(t *testing.T) {
	data := loadCorpus(t)
	obj, _ := encode(t, data, segfile.Options{})
	ratio := float64(len(data)) / float64(len(obj))
	t.Logf("corpus %d bytes -> object %d bytes: %.2fx", len(data), len(obj), ratio)
	if ratio < 3 {
		t.Fatalf("compression ratio %.2fx < 3x", ratio)
	}
}

// TestRawFrames: frames zstd would shrink by less than 1/RawSavingDiv are
// stored as is (FlagRaw, trailer version 2) and read back without a
// decode, as slices of the fetched bytes; an object of compressible
// frames only is version 1, as before raw frames; a mixed object reads
// back whole; and without the flag a raw frame is not taken for zstd
// data (it fails as corrupt).
func TestRawFrames(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 3*4096)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	json := loadCorpus(t)[:3*4096]
	trailer := func(obj []byte) (version, flags uint16) {
		tr := obj[len(obj)-segfile.TrailerSize:]
		return binary.LittleEndian.Uint16(tr[16:]), binary.LittleEndian.Uint16(tr[18:])
	}
	for _, tc := range []struct {
		name           string
		data           []byte
		raw            []bool
		version, flags uint16
	}{
		{"noise", noise, []bool{true, true, true}, 2, segfile.FlagRaw},
		{"json", json, []bool{false, false, false}, 1, 0},
		{"mixed", append(append(bytes.Clone(json[:4096]), noise[:4096]...), json[4096:8192]...), []bool{false, true, false}, 2, segfile.FlagRaw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, f := encode(t, tc.data, segfile.Options{FrameSize: 4096})
			for i, fr := range f.Frames {
				if fr.Raw != tc.raw[i] || fr.Raw != (fr.CompLen == fr.Len) && fr.Raw {
					t.Fatalf("frame %d: %+v, want raw %v", i, fr, tc.raw[i])
				}
			}
			if v, fl := trailer(obj); v != tc.version || fl != tc.flags {
				t.Fatalf("trailer version %d flags %#x, want %d %#x", v, fl, tc.version, tc.flags)
			}
			b := tier.NewMem()
			put(t, b, "x.seg", obj)
			got, err := readAll(ctx, b, "x.seg", int64(len(obj)))
			if err != nil || !bytes.Equal(got, tc.data) {
				t.Fatalf("read back: %v (equal %v)", err, bytes.Equal(got, tc.data))
			}
			rf, err := segfile.ReadFooter(ctx, b.ReadAt, "x.seg", int64(len(obj)))
			if err != nil {
				t.Fatal(err)
			}
			for i, fr := range rf.Frames {
				if fr.Raw != tc.raw[i] {
					t.Fatalf("footer read back: frame %d raw %v, want %v", i, fr.Raw, tc.raw[i])
				}
				comp := obj[fr.CompOff : fr.CompOff+fr.CompLen]
				d, err := segfile.DecodeFrame(nil, fr, comp)
				if err != nil {
					t.Fatal(err)
				}
				if fr.Raw && &d[0] != &comp[0] {
					t.Fatalf("frame %d: a raw frame was copied", i)
				}
			}
			if tc.flags == 0 {
				return
			}
			// The flag cleared (and the trailer back at version 1): the
			// raw frames are read as zstd and fail.
			o := bytes.Clone(obj)
			binary.LittleEndian.PutUint16(o[len(o)-segfile.TrailerSize+16:], 1)
			binary.LittleEndian.PutUint16(o[len(o)-segfile.TrailerSize+18:], 0)
			put(t, b, "y.seg", o)
			if _, err := readAll(ctx, b, "y.seg", int64(len(o))); !errors.Is(err, segfile.ErrCorrupt) {
				t.Fatalf("raw frames read without the flag: %v, want ErrCorrupt", err)
			}
		})
	}
}

// layoutOf is a queue-major layout of data cut into records of the given
// lengths, record i belonging to group groups[i%len(groups)]: each group's
// records in logical order, groups one after another.
func layoutOf(lens []int, groups []int64) []segfile.Run {
	type rec struct{ off, n, g int64 }
	var recs []rec
	off := int64(0)
	for i, n := range lens {
		recs = append(recs, rec{off, int64(n), groups[i%len(groups)]})
		off += int64(n)
	}
	var out []segfile.Run
	pos := int64(0)
	seen := map[int64]bool{}
	for _, g0 := range groups {
		if seen[g0] {
			continue
		}
		seen[g0] = true
		for _, r := range recs {
			if r.g != g0 {
				continue
			}
			if k := len(out) - 1; k >= 0 && out[k].Group == g0 && out[k].Off+out[k].Len == r.off {
				out[k].Len += r.n // adjacent in the log too: one run
			} else {
				out = append(out, segfile.Run{Off: r.off, Len: r.n, Pos: pos, Group: g0})
			}
			pos += r.n
		}
	}
	return out
}

// TestLayoutRoundTrip: an object written in another order than the
// logical one (a queue-major layout) maps every logical offset back to
// its bytes (Locate, then Find on the stream position), starts a frame at
// each group big enough to have its own, marks those GroupStart, and
// refuses a footer whose layout does not cover the input exactly once.
func TestLayoutRoundTrip(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(8, 9))
	var lens []int
	size := 0
	for size < 200<<10 {
		n := 100 + rng.IntN(3000)
		lens = append(lens, n)
		size += n
	}
	data := randBytes(4, size)
	layout := layoutOf(lens, []int64{0, 1, 2, 1, 3, 0, 0, 2})
	obj, f := encode(t, data, segfile.Options{FrameSize: 16 << 10, Layout: layout})
	b := tier.NewMem()
	put(t, b, "l.seg", obj)
	rf, err := segfile.ReadFooter(ctx, b.ReadAt, "l.seg", int64(len(obj)))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := segfile.ReadLayout(ctx, b.ReadAt, "l.seg", rf)
	if err != nil {
		t.Fatal(err)
	}
	if len(sec) != len(layout)*segfile.LayoutEntrySize || len(rf.Frames) != len(f.Frames) {
		t.Fatalf("read back: %d runs, %d frames; want %d, %d", len(sec)/segfile.LayoutEntrySize, len(rf.Frames), len(layout), len(f.Frames))
	}
	frames := make([][]byte, len(rf.Frames))
	for i, fr := range rf.Frames {
		if frames[i], err = segfile.DecodeFrame(nil, fr, obj[fr.CompOff:fr.CompOff+fr.CompLen]); err != nil {
			t.Fatal(err)
		}
	}
	// Every logical byte, run by run.
	for off := int64(0); off < int64(size); {
		pos, n := rf.Locate(sec, off)
		fi := rf.Find(pos)
		fr := rf.Frames[fi]
		k := min(n, fr.Off+fr.Len-pos)
		if !bytes.Equal(frames[fi][pos-fr.Off:pos-fr.Off+k], data[off:off+k]) {
			t.Fatalf("logical %d (stream %d, frame %d): bytes differ", off, pos, fi)
		}
		off += k
	}
	// Groups of FrameSize/64 bytes or more start frames.
	starts := map[int64]bool{}
	for _, fr := range rf.Frames {
		if fr.GroupStart {
			starts[fr.Off] = true
		}
	}
	for i, r := range layout {
		if (i == 0 || r.Group != layout[i-1].Group) && !starts[r.Pos] {
			t.Fatalf("group %d starts at stream position %d inside a frame", r.Group, r.Pos)
		}
	}
	if len(starts) != 4 {
		t.Fatalf("%d frames start groups, want 4 (four groups)", len(starts))
	}
	// A layout that stores a range twice is refused, when writing and
	// when reading.
	bad := append([]segfile.Run(nil), layout...)
	bad[1].Pos = bad[0].Pos
	if _, err := segfile.Encode(&bytes.Buffer{}, bytes.NewReader(data), int64(size), segfile.Options{Layout: bad}); err == nil {
		t.Fatal("a layout storing a range twice was written")
	}
	// A section storing a range twice, or missing one, is refused.
	var dup, short []byte
	for i, r := range layout {
		pos := r.Pos
		if i == 1 {
			pos = layout[0].Pos // twice
		}
		dup = binary.AppendUvarint(binary.AppendUvarint(dup, uint64(r.Len)), uint64(pos))
	}
	sorted := append([]segfile.Run(nil), layout...)
	slices.SortFunc(sorted, func(a, b segfile.Run) int { return cmp.Compare(a.Off, b.Off) })
	for _, r := range sorted[:len(sorted)-1] {
		short = binary.AppendUvarint(binary.AppendUvarint(short, uint64(r.Len)), uint64(r.Pos))
	}
	if _, err := segfile.ExpandLayout(dup, len(layout), int64(size)); !errors.Is(err, segfile.ErrCorrupt) {
		t.Fatalf("a layout storing a range twice: %v", err)
	}
	if _, err := segfile.ExpandLayout(short, len(layout)-1, int64(size)); !errors.Is(err, segfile.ErrCorrupt) {
		t.Fatalf("a layout missing a run: %v", err)
	}
	// A flipped byte in the section fails its checksum.
	o := bytes.Clone(obj)
	o[rf.Layout.CompOff+3] ^= 1
	put(t, b, "bad.seg", o)
	if _, err := segfile.ReadLayout(ctx, b.ReadAt, "bad.seg", rf); !errors.Is(err, segfile.ErrCorrupt) {
		t.Fatalf("a damaged layout section read back: %v", err)
	}
}
