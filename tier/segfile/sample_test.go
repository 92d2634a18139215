package segfile

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/klauspost/compress/zstd"
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

// randomBytes returns n bytes from rng, one Uint32 a byte.
func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// encodeCounting encodes data in 2 MiB frames and returns the object and
// the Writer (its sampling state), with sampling on or off.
func encodeCounting(t *testing.T, data []byte, sampling bool) ([]byte, *Writer) {
	t.Helper()
	return encodeFrames(t, data, sampling, 0)
}

// encodeFrames is encodeCounting with frames of frameSize bytes (0: the
// default).
func encodeFrames(t *testing.T, data []byte, sampling bool, frameSize int) ([]byte, *Writer) {
	t.Helper()
	var obj bytes.Buffer
	w, err := NewWriter(&obj, Options{FrameSize: frameSize})
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
		// The first frame and the first three checks (zstd's).
		{"records", records(rng, 40<<20), true, 4},
		{"json", json, false, 8},
		// The first frame, the first check, and the JSON frames (the
		// first one's sample saves).
		{"records then json", append(records(rng, 8<<20), json...), true, 10},
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
	block := randomBytes(rng, 2<<20/samplePieces+20<<10)
	data := randomBytes(rng, 8<<20) // four raw frames, one of them a check
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

// TestSampleChecksEstimateThenZstd: past the first three checks, a check
// compresses a frame with zstd only when S2's estimate of it saves, or
// when it is every zstdCheckEvery-th check. Incompressible records in
// 120 frames (the first, then checks at the 3rd, 7th, 15th, 31st... frame)
// cost zstd on the first frame, the first three checks and the 4th and
// 8th (frames 31 and 95) only; the object is the one compressing every
// frame gives.
func TestSampleChecksEstimateThenZstd(t *testing.T) {
	data := records(rand.New(rand.NewPCG(7, 8)), 120*sampleMinFrame)
	want, _ := encodeFrames(t, data, false, sampleMinFrame)
	got, w := encodeFrames(t, data, true, sampleMinFrame)
	if !bytes.Equal(got, want) {
		t.Fatal("sampled object differs from the one compressing every frame")
	}
	t.Logf("%d frames, %d compressed whole, %d checks", len(w.Footer().Frames), w.whole, w.checks)
	if w.checks != 9 || w.whole != 6 || w.noSkip {
		t.Fatalf("%d checks, %d frames compressed whole (noSkip %v), want 9 checks and 6 (1 + 3 + 2)", w.checks, w.whole, w.noSkip)
	}
}

// TestSampleFarRepeatsCaughtByZstdCheck: repeats of a random block too far
// apart for S2's estimate (a 150 KiB block in 256 KiB frames), after
// incompressible records past the first three checks, are caught at the
// latest by the next check zstd runs whatever the estimate says: from
// then on every frame is compressed, and fewer than
// zstdCheckEvery*sampleCheckEvery of the repeated block's frames were
// stored raw.
func TestSampleFarRepeatsCaughtByZstdCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	block := randomBytes(rng, 150<<10)
	head := records(rng, 40*sampleMinFrame)
	data := slices.Clone(head)
	for len(data) < len(head)+100*sampleMinFrame {
		data = append(data, block...)
	}
	estimated := 0
	for off := len(head); off+sampleMinFrame <= len(data); off += sampleMinFrame {
		if estimateSaves(data[off : off+sampleMinFrame]) {
			estimated++
		}
	}
	_, w := encodeFrames(t, data, true, sampleMinFrame)
	raw := 0
	for _, fr := range w.Footer().Frames {
		if fr.Off >= int64(len(head)) && fr.Raw {
			raw++
		}
	}
	t.Logf("S2's estimate saves on %d of the repeated block's frames; %d of them stored raw, noSkip %v", estimated, raw, w.noSkip)
	if !w.noSkip || raw >= zstdCheckEvery*sampleCheckEvery {
		t.Fatalf("%d frames of the repeated block stored raw, noSkip %v: want sampling turned off within %d frames", raw, w.noSkip, zstdCheckEvery*sampleCheckEvery)
	}
}

// TestSampleEntropyOnlyTextAsZstd: text whose only redundancy is its
// alphabet (base64 and hex of random bytes) has no repeats for S2's
// estimate to count, and zstd at the level used stores it as it is too
// (it entropy-codes literals only beside matches): after raw frames such
// text is stored raw, the object byte for byte the one compressing every
// frame gives. Should zstd start to shrink such text, the first check
// fails and the samples' estimate needs another look.
func TestSampleEntropyOnlyTextAsZstd(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	b64 := []byte(base64.StdEncoding.EncodeToString(randomBytes(rng, 12<<20)))
	hx := []byte(hex.EncodeToString(randomBytes(rng, 8<<20)))
	enc, err := encoder(zstd.SpeedFastest)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range [][]byte{b64, hx} {
		frame := text[:DefaultFrameSize]
		if out := enc.EncodeAll(frame, nil); len(out) < len(frame)-len(frame)/RawSavingDiv {
			t.Fatalf("zstd now saves %d of %d bytes of entropy-only text: revisit the samples' estimate", len(frame)-len(out), len(frame))
		}
	}
	data := append(records(rng, 4<<20), b64...)
	data = append(data, hx...)
	want, _ := encodeCounting(t, data, false)
	got, w := encodeCounting(t, data, true)
	if !bytes.Equal(got, want) {
		t.Fatalf("sampled object (%d bytes) differs from the one compressing every frame (%d)", len(got), len(want))
	}
	t.Logf("%d frames, %d compressed whole", len(w.Footer().Frames), w.whole)
}
