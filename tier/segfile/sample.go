package segfile

import "github.com/klauspost/compress/s2"

// Raw-frame sampling: after a frame was stored raw (FlagRaw), the next
// frame of at least sampleMinFrame bytes is first judged by a sample:
// samplePieces pieces of samplePiece bytes spread evenly over it (64
// KiB, a 32nd of a 2 MiB frame), whose saving S2's match finder estimates
// (s2.EstimateBlockSize: no output, a quarter of a zstd compression of
// the sample). When it saves less than 1/RawSavingDiv, the frame is
// stored raw without compressing it whole; otherwise it is compressed and
// stored raw or not as always. Incompressible input (random or already
// compressed payloads) then costs a sample's estimate per frame instead
// of a whole compression, and compressible input leaves the path at its
// first frame: the decision depends only on the input, so the same input
// gives the same object.
//
// What zstd saves here is repeats (at its fastest level it stores text
// with no repeats, hex or base64, as it is: it entropy-codes literals only
// beside matches), which is what the estimate counts. On record-like data
// it decides as zstd would: 1 KiB random bodies behind ~170-byte headers
// save 9.2% by the sample's estimate, 10.3% by zstd on the sample and
// about 11% on the whole frame (all under 1/RawSavingDiv); 1 KiB JSON
// bodies 66%, 81% and 82%. What a sample cannot see is redundancy
// only between bytes further apart than a piece (the same random 20 KiB
// body sent again and again). So some frames a sample would skip are
// checked whole: the 2nd, then the 4th after it, the 8th, and every
// sampleCheckEvery-th from then on. The first three checks compress the
// frame with zstd. A later one first estimates the whole frame's saving
// with S2's match finder (s2.EstimateBlockSize: it finds most repeats
// anywhere in the frame, at about a quarter of zstd's cost on such input,
// and writes nothing) and compresses with zstd only when that saves
// 1/RawSavingDiv or more, except every zstdCheckEvery-th, which zstd
// compresses whatever the estimate says: the estimate's small hash table
// misses some repeats of random blocks hundreds of KiB apart. When zstd
// saves that much on a checked frame, the samples were wrong for this
// input and the Writer compresses every frame from then on. Such input
// loses at most the saving of the frames stored raw before that check:
// one frame when it starts right after the first raw frame, up to
// sampleCheckEvery-1 later on when the estimate sees its redundancy, up to
// zstdCheckEvery*sampleCheckEvery-1 when only zstd does. Redundancy the
// estimate cannot see at all is entropy alone (hex or base64 text), which
// the samples see: zstd compresses them.
const (
	sampleMinFrame   = 256 << 10
	samplePieces     = 8
	samplePiece      = 8 << 10
	sampleCheckEvery = 16
	zstdCheckEvery   = 4
)

// skipCompress reports whether the frame being built is to be stored raw
// without compressing it whole: the last frame was stored raw, and this
// one's sample saves less than 1/RawSavingDiv, and, when the frame is
// due for a check, so does the estimate of the whole frame.
func (w *Writer) skipCompress() bool {
	w.sampled = false
	if !w.lastRaw || w.noSkip || len(w.buf) < sampleMinFrame || w.sampleSaves() {
		return false
	}
	if w.skipped+1 >= min(2<<w.checks, sampleCheckEvery) {
		if w.checks < 3 || w.checks%zstdCheckEvery == 3 || estimateSaves(w.buf) {
			w.sampled = true // compressed whole: checked decides
			return false
		}
		w.skipped = -1 // checked; flush counts this frame
		w.checks++
	}
	return true
}

// estimateSaves reports whether S2's estimate of b's compressed size (a
// sample, or a whole frame) saves 1/RawSavingDiv or more.
func estimateSaves(b []byte) bool {
	n := s2.EstimateBlockSize(b) // -1: saves nothing
	return n >= 0 && n < len(b)-len(b)/RawSavingDiv
}

// checked takes the outcome of a frame compressed whole: a frame the
// sample would have skipped, whose estimate saved enough, that zstd
// shrank enough proves the samples wrong for this input.
func (w *Writer) checked(raw bool) {
	if w.sampled {
		w.skipped = 0
		w.checks++
		if !raw {
			w.noSkip = true
		}
	}
	w.sampled = false
}

// sampleSaves reports whether S2's estimate of the sample of the frame
// being built (its size at least sampleMinFrame) saves 1/RawSavingDiv or
// more.
func (w *Writer) sampleSaves() bool {
	n := len(w.buf)
	w.sample = w.sample[:0]
	step := n / samplePieces
	for i := range samplePieces {
		w.sample = append(w.sample, w.buf[i*step:i*step+samplePiece]...)
	}
	return estimateSaves(w.sample)
}
