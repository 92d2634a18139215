package segfile

import (
	"bytes"
	"math/rand/v2"
	"os"
	"testing"
)

// records returns n bytes of record-like data: 1 KiB random bodies, each
// behind a 150-byte header of which most is the same from record to
// record (about 11% compressible: under 1/RawSavingDiv).
func records(rng *rand.Rand, n int) []byte {
	out := make([]byte, 0, n)
	for i := 0; len(out) < n; i++ {
		h := bytes.Repeat([]byte{0xda}, 150)
		h[0], h[1], h[2] = byte(i), byte(i>>8), byte(i>>16)
		out = append(out, h...)
		for range 1024 / 8 {
			v := rng.Uint64()
			out = append(out, byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
		}
	}
	return out[:n]
}

// encodeCounting encodes data in 2 MiB frames and returns the object and
// the Writer (its sampling state), with sampling on or off.
func encodeCounting(t *testing.T, data []byte, sampling bool) ([]byte, *Writer) {
	t.Helper()
	var obj bytes.Buffer
	w, err := NewWriter(&obj, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.noSkip = !sampling
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return obj.Bytes(), w
}

// TestSampledRawFrames: after a raw frame, a frame whose sample saves
// less than 1/RawSavingDiv is stored raw without a whole compression;
// the object is byte for byte the one compressing every frame gives, for
// incompressible records, for compressible JSON (never sampled: no raw
// frame) and for JSON after incompressible records (its first frame's
// sample saves, so it is compressed).
func TestSampledRawFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	corpus, err := os.ReadFile("testdata/orders.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	json := bytes.Repeat(corpus, 10)[:16<<20]
	for _, tc := range []struct {
		name    string
		data    []byte
		skipped bool
		whole   int // frames compressed whole
	}{
		// The first frame; the checks' estimates save too little.
		{"records", records(rng, 40<<20), true, 1},
		{"json", json, false, 8},
		// The first frame, the first JSON one (its sample saves) and on.
		{"records then json", append(records(rng, 8<<20), json...), true, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, _ := encodeCounting(t, tc.data, false)
			got, w := encodeCounting(t, tc.data, true)
			if !bytes.Equal(got, want) {
				t.Fatalf("sampled object differs from the one compressing every frame (%d vs %d bytes)", len(got), len(want))
			}
			raw := 0
			for _, fr := range w.Footer().Frames {
				if fr.Raw {
					raw++
				}
			}
			t.Logf("%d frames, %d raw, %d compressed whole, %d skipped since the last check, noSkip %v", len(w.Footer().Frames), raw, w.whole, w.skipped, w.noSkip)
			if w.whole != tc.whole {
				t.Fatalf("%d frames compressed whole, want %d", w.whole, tc.whole)
			}
			if w.noSkip {
				t.Fatal("a sample was found wrong")
			}
			if (w.skipped > 0) != tc.skipped {
				t.Fatalf("%d frames skipped since the last check, want some: %v", w.skipped, tc.skipped)
			}
			if tc.name == "json" && raw > 0 {
				t.Fatalf("%d raw JSON frames", raw)
			}
		})
	}
}

// TestSampleWrongTurnsSamplingOff: data whose redundancy lies further
// apart than a sample's pieces fools the sample after raw frames: a 276
// KiB random block repeated puts the eight 8 KiB pieces of a 2 MiB
// frame 20 KiB apart in the block, so they share nothing, while the
// frame holds seven copies of it. The next check estimates such a frame
// whole, compresses it, finds it saves, and every later frame is compressed: the checks
// come early (the 2nd, then the 4th skipped frame after it...), so here
// two frames are stored raw that would have compressed.
func TestSampleWrongTurnsSamplingOff(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	block := random(2<<20/samplePieces + 20<<10)
	data := random(8 << 20) // four raw frames, one of them a check
	for len(data) < 64<<20 {
		data = append(data, block...)
	}
	_, w := encodeCounting(t, data, true)
	if !w.noSkip {
		t.Fatal("sampling still on after a check found a frame the sample skipped compressible")
	}
	frames := w.Footer().Frames
	wrong := 0
	for i, fr := range frames[4:] {
		if fr.Raw && fr.Len >= int64(2*len(block)) { // the last frame may hold less than two copies
			wrong++
			if i >= 3 {
				t.Fatalf("frame %d of the repeated block stored raw after the check", i+4)
			}
		}
	}
	if wrong == 0 || wrong > 3 {
		t.Fatalf("%d frames of the repeated block stored raw, want 1 to 3", wrong)
	}
	whole, _ := encodeCounting(t, data, false)
	obj, _ := encodeCounting(t, data, true)
	t.Logf("%d frames, %d stored raw by a wrong sample; object %d bytes, %d compressing every frame", len(frames), wrong, len(obj), len(whole))
}
