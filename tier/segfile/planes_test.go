package segfile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPlanesRoundTrip: toPlanes and fromPlanes are inverses for every
// stride and length, tails that are not a whole group included.
func TestPlanesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for p := 2; p <= MaxPlanes; p++ {
		// Lengths around a group, and around blocks of planesBlock groups.
		for _, n := range []int{0, 1, p - 1, p, p + 1, 3*p + 2, 1000,
			(planesBlock-1)*p + p - 1, planesBlock * p, planesBlock*p + 1, (2*planesBlock+7)*p + 3} {
			src := randomBytes(rng, n)
			planes := toPlanes([]byte("x"), src, p)
			if planes[0] != 'x' || len(planes) != n+1 {
				t.Fatalf("p %d n %d: toPlanes did not append", p, n)
			}
			if n >= 2*p && p > 2 && bytes.Equal(planes[1:], src) {
				t.Fatalf("p %d n %d: planes equal the input", p, n)
			}
			back := fromPlanes(nil, planes[1:], p)
			if !bytes.Equal(back, src) {
				t.Fatalf("p %d n %d: round trip differs", p, n)
			}
		}
	}
}

// TestPlanesObject: an object of fixed-size entries encoded with Planes
// stores its compressed frames as byte planes (FlagPlanes, each such
// frame's Planes the stride) and smaller than without; a frame zstd does
// not shrink is stored raw, as it is; every frame decodes to its input.
// Strides outside [2, MaxPlanes] are refused by the Writer, and a footer
// that claims one is corrupt.
func TestPlanesObject(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	data := append(keyIndexLike(rng, 200000), randomBytes(rng, 3<<20)...)
	encode := func(planes int) ([]byte, *Footer) {
		var obj bytes.Buffer
		f, err := Encode(&obj, bytes.NewReader(data), int64(len(data)), Options{FrameSize: 64 << 10, Planes: planes})
		if err != nil {
			t.Fatal(err)
		}
		return obj.Bytes(), f
	}
	plain, _ := encode(0)
	obj, f := encode(20)
	if len(obj) >= len(plain) {
		t.Fatalf("planes: %d bytes, without: %d", len(obj), len(plain))
	}
	tr := obj[len(obj)-TrailerSize:]
	if _, _, flags, err := ParseTrailer(tr); err != nil || flags&FlagPlanes == 0 {
		t.Fatalf("trailer flags %#x, %v: want FlagPlanes", flags, err)
	}
	readAt := func(_ context.Context, key string, p []byte, off int64) error {
		copy(p, obj[off:])
		return nil
	}
	got, err := ReadFooter(context.Background(), readAt, "obj", int64(len(obj)))
	if err != nil {
		t.Fatal(err)
	}
	planar, raw := 0, 0
	for i, fr := range got.Frames {
		if fr != f.Frames[i] {
			t.Fatalf("frame %d read back as %+v, written as %+v", i, fr, f.Frames[i])
		}
		switch {
		case fr.Raw && fr.Planes == 0:
			raw++
			if !bytes.Equal(obj[fr.CompOff:fr.CompOff+fr.CompLen], data[fr.Off:fr.End()]) {
				t.Fatalf("raw frame %d is not its input as it is", i)
			}
		case !fr.Raw && fr.Planes == 20:
			planar++
		default:
			t.Fatalf("frame %d: raw %v, planes %d", i, fr.Raw, fr.Planes)
		}
		out, err := DecodeFrame(nil, fr, obj[fr.CompOff:fr.CompOff+fr.CompLen])
		if err != nil || !bytes.Equal(out, data[fr.Off:fr.End()]) {
			t.Fatalf("frame %d decodes wrong: %v", i, err)
		}
	}
	if planar == 0 || raw == 0 {
		t.Fatalf("%d frames in planes, %d raw: want both", planar, raw)
	}
	t.Logf("%d bytes in planes, %d without; %d frames in planes, %d raw", len(obj), len(plain), planar, raw)
	for _, p := range []int{1, -1, MaxPlanes + 1} {
		if _, err := NewWriter(io.Discard, Options{Planes: p}); err == nil {
			t.Fatalf("Planes %d accepted", p)
		}
	}
	// A footer whose trailer lost FlagPlanes (a flipped bit: the trailer
	// has no checksum) is corrupt, not read as plain frames.
	foot := AppendFooter(nil, f)
	fl, sum, flags, err := ParseTrailer(foot[len(foot)-TrailerSize:])
	if err != nil || flags&FlagPlanes == 0 {
		t.Fatalf("flags %#x, %v", flags, err)
	}
	body := foot[len(foot)-TrailerSize-int(fl) : len(foot)-TrailerSize]
	if _, err := ParseFooter(body, sum, flags&^FlagPlanes, f.ObjectSize()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("footer read without FlagPlanes: %v, want ErrCorrupt", err)
	}
	for _, p := range []uint8{1, MaxPlanes + 1} {
		bad := *f
		bad.Frames = slices.Clone(f.Frames)
		for i := range bad.Frames {
			if !bad.Frames[i].Raw {
				bad.Frames[i].Planes = p
			}
		}
		foot := AppendFooter(nil, &bad)
		fl, sum, flags, err := ParseTrailer(foot[len(foot)-TrailerSize:])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseFooter(foot[len(foot)-TrailerSize-int(fl):len(foot)-TrailerSize], sum, flags, bad.ObjectSize()); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("footer with stride %d: %v, want ErrCorrupt", p, err)
		}
	}
}

func BenchmarkPlanes(b *testing.B) {
	src := make([]byte, 2<<20)
	for i := range src {
		src[i] = byte(i * 7)
	}
	var dst, back []byte
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		dst = toPlanes(dst[:0], src, 20)
		back = fromPlanes(back[:0], dst, 20)
	}
}

// TestPlanesDecodeAllocations: decoding a frame in byte planes into a
// buffer of its size allocates no more than a plain frame's decode (the
// planes are decoded into a pooled buffer).
func TestPlanesDecodeAllocations(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("allocation counts differ under -cover and -race")
	}
	rng := rand.New(rand.NewPCG(25, 26))
	data := keyIndexLike(rng, 3000)
	allocs := func(planes int) float64 {
		var obj bytes.Buffer
		f, err := Encode(&obj, bytes.NewReader(data), int64(len(data)), Options{FrameSize: len(data), Planes: planes})
		if err != nil {
			t.Fatal(err)
		}
		fr := f.Frames[0]
		if fr.Raw || int(fr.Planes) != planes {
			t.Fatalf("frame %+v", fr)
		}
		comp := obj.Bytes()[fr.CompOff : fr.CompOff+fr.CompLen]
		dst := make([]byte, 0, len(data))
		return testing.AllocsPerRun(50, func() {
			out, err := DecodeFrame(dst, fr, comp)
			if err != nil || !bytes.Equal(out, data) {
				t.Fatalf("decode: %v", err)
			}
		})
	}
	plain, planar := allocs(0), allocs(20)
	if planar > plain {
		t.Fatalf("a frame in planes decodes with %.0f allocations, a plain one with %.0f", planar, plain)
	}
	t.Logf("allocations per decode: plain %.0f, planes %.0f", plain, planar)
}

// keyIndexLike returns n key-index-like 20-byte entries: a hash, an
// offset, a time.
func keyIndexLike(rng *rand.Rand, n int) []byte {
	var data []byte
	for i := range n {
		data = binary.BigEndian.AppendUint32(data, rng.Uint32())
		data = binary.BigEndian.AppendUint64(data, uint64(1<<30+i*1200))
		data = binary.BigEndian.AppendUint64(data, uint64(1767225600000+i/50))
	}
	return data
}
