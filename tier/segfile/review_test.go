package segfile_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/stratamq/stratamq/tier/segfile"
)

// reviewInput is a segment-like input that moves between incompressible
// and compressible stretches, and has a stretch that a 64 KiB sample
// cannot see is compressible (one random 40 KiB body repeated).
func reviewInput() []byte {
	rng := rand.New(rand.NewPCG(3, 9))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	var out []byte
	out = append(out, rnd(9<<20)...) // raw frames, sampled
	for i := 0; len(out) < 13<<20; i++ {
		out = fmt.Appendf(out, `{"id":%d,"name":"user-%d","tags":["a","b"]}`, i, i%97)
	}
	out = append(out, rnd(5<<20+12345)...)
	body := rnd(40 << 10)
	for len(out) < 30<<20 {
		out = append(out, body...)
	}
	return append(out, rnd(777)...)
}

// decodeAll decodes every frame of obj and returns the stored stream.
func decodeAll(t *testing.T, obj []byte) ([]byte, *segfile.Footer) {
	t.Helper()
	ctx := context.Background()
	readAt := func(_ context.Context, _ string, p []byte, off int64) error {
		if off < 0 || off+int64(len(p)) > int64(len(obj)) {
			return io.ErrUnexpectedEOF
		}
		copy(p, obj[off:])
		return nil
	}
	f, err := segfile.ReadFooter(ctx, readAt, "x", int64(len(obj)))
	if err != nil {
		t.Fatal(err)
	}
	frames, err := segfile.ReadFrames(ctx, readAt, "x", f, 0, len(f.Frames)-1)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Join(frames, nil), f
}

func encodeFrom(t *testing.T, src io.ReaderAt, size int64, opts segfile.Options) []byte {
	t.Helper()
	var obj bytes.Buffer
	w, err := segfile.NewWriter(&obj, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFrom(src, size); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return obj.Bytes()
}

// TestReviewSampledMappedRoundTrip: with sampling (default frames), the
// object encoded from a mapping equals the one encoded by reading the
// file (same key, same bytes: a retried upload is idempotent whichever
// path it takes), is the same on a second encode, and decodes, frame by
// frame and through its layout, to exactly the input, in log order and
// queue-major. Holds.
func TestReviewSampledMappedRoundTrip(t *testing.T) {
	data := reviewInput()
	path := filepath.Join(t.TempDir(), "seg")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size := int64(len(data))
	// A layout of 3 groups taking 1 MiB + a bit at a time, round robin.
	var layout []segfile.Run
	var byGroup [3][]segfile.Run
	for off, i := int64(0), 0; off < size; i++ {
		n := min(int64(1<<20+i*977), size-off)
		byGroup[i%3] = append(byGroup[i%3], segfile.Run{Off: off, Len: n, Group: int64(i % 3)})
		off += n
	}
	var pos int64
	for _, g := range byGroup {
		for _, r := range g {
			r.Pos = pos
			pos += r.Len
			layout = append(layout, r)
		}
	}
	for _, lay := range [][]segfile.Run{nil, layout} {
		opts := segfile.Options{Layout: lay}
		m, err := segfile.MapFile(f, size)
		if err != nil {
			t.Skipf("not mapped: %v", err)
		}
		mapped := encodeFrom(t, m, size, opts)
		again := encodeFrom(t, m, size, opts)
		m.Close()
		read := encodeFrom(t, f, size, opts)
		if !bytes.Equal(mapped, read) || !bytes.Equal(mapped, again) {
			t.Fatalf("layout %v: objects differ: mapped %d, again %d, read %d bytes", lay != nil, len(mapped), len(again), len(read))
		}
		stream, ft := decodeAll(t, mapped)
		raw := 0
		for _, fr := range ft.Frames {
			if fr.Raw {
				raw++
			}
		}
		if raw == 0 || raw == len(ft.Frames) {
			t.Fatalf("layout %v: %d of %d frames raw: want a mix", lay != nil, raw, len(ft.Frames))
		}
		got := stream
		if lay != nil {
			ctx := context.Background()
			readAt := func(_ context.Context, _ string, p []byte, off int64) error { copy(p, mapped[off:]); return nil }
			entries, err := segfile.ReadLayout(ctx, readAt, "x", ft)
			if err != nil {
				t.Fatal(err)
			}
			got = make([]byte, size)
			for e := entries; len(e) > 0; e = e[segfile.LayoutEntrySize:] {
				off, n, p := binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint32(e[8:]), binary.LittleEndian.Uint64(e[12:])
				copy(got[off:off+uint64(n)], stream[p:p+uint64(n)])
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("layout %v: decoded object differs from the input", lay != nil)
		}
		t.Logf("layout %v: %d frames, %d raw, object %d of %d bytes", lay != nil, len(ft.Frames), raw, len(mapped), size)
	}
}

type panicWriter struct{ n int }

func (p *panicWriter) Write(b []byte) (int, error) {
	if p.n++; p.n > 2 {
		panic("destination exploded")
	}
	return len(b), nil
}

// TestReviewMappedGuardRestoresAndRepanics: WriteFrom and ReadAt of a
// mapping turn panic-on-fault back off on every path (success, fault),
// and a panic that is not a fault on the mapping (here: the destination
// writer's) is not swallowed as ErrFault. Holds.
func TestReviewMappedGuardRestoresAndRepanics(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	path := filepath.Join(t.TempDir(), "seg")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := segfile.MapFile(f, int64(len(data)))
	if err != nil {
		t.Skipf("not mapped: %v", err)
	}
	defer m.Close()
	encodeFrom(t, m, int64(len(data)), segfile.Options{FrameSize: 64 << 10})
	if debug.SetPanicOnFault(false) {
		t.Fatal("panic-on-fault left on after WriteFrom")
	}
	func() {
		defer func() {
			r := recover()
			if r == nil || fmt.Sprint(r) != "destination exploded" {
				t.Fatalf("recovered %v, want the destination's panic", r)
			}
		}()
		w, err := segfile.NewWriter(&panicWriter{}, segfile.Options{FrameSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		err = w.WriteFrom(m, int64(len(data)))
		t.Fatalf("WriteFrom returned %v, want the destination's panic", err)
	}()
	if debug.SetPanicOnFault(false) {
		t.Fatal("panic-on-fault left on after a panic")
	}
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	w, err := segfile.NewWriter(io.Discard, segfile.Options{FrameSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFrom(m, int64(len(data))); !errors.Is(err, segfile.ErrFault) {
		t.Fatalf("WriteFrom of a cut mapping: %v, want ErrFault", err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Fatal("Writer usable after a fault")
	}
	if debug.SetPanicOnFault(false) {
		t.Fatal("panic-on-fault left on after a fault")
	}
	// A layout that does not cover the input exactly once fails, mapped.
	os.WriteFile(path, data, 0o600)
	m2, err := segfile.MapFile(f, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	for _, lay := range [][]segfile.Run{
		{{Off: 0, Len: 1 << 19, Pos: 0}, {Off: 0, Len: 1 << 19, Pos: 1 << 19}},         // twice, a gap
		{{Off: 1 << 19, Len: 1<<62 + 1, Pos: 0}},                                       // past the end
		{{Off: -1, Len: 1 << 20, Pos: 0}},                                              // before the start
		{{Off: 0, Len: 1<<20 - 1, Pos: 0}},                                             // short
		{{Off: 0, Len: 1 << 19, Pos: 0}, {Off: 1 << 19, Len: 1 << 19, Pos: 1<<19 + 1}}, // stream gap
	} {
		w, err := segfile.NewWriter(io.Discard, segfile.Options{FrameSize: 64 << 10, Layout: lay})
		if err != nil {
			continue
		}
		err = w.WriteFrom(m2, int64(len(data)))
		if err == nil {
			err = w.Close()
		}
		if err == nil {
			t.Fatalf("layout %v accepted", lay)
		}
	}
}
