package segfile_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/stratamq/stratamq/tier/segfile"
)

// TestWriteFromMappedSameObject: WriteFrom from a mapped file (each run
// copied from the mapping) writes byte for byte the object it writes
// reading the file, with a queue-major layout (few and many queues, runs
// bigger than the read buffer) and in log order.
func TestWriteFromMappedSameObject(t *testing.T) {
	for _, tc := range []struct {
		name           string
		n, size, queue int
		big            int
	}{
		{"4 queues", 3000, 1100, 4, 0},
		{"64 queues", 3000, 1100, 64, 0},
		{"big records", 200, 1100, 3, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, size, runs := layoutSegment(t, tc.n, tc.size, tc.queue, tc.big)
			for _, layout := range [][]segfile.Run{runs, nil} {
				opts := segfile.Options{FrameSize: 64 << 10, Layout: layout}
				var want, got bytes.Buffer
				w, err := segfile.NewWriter(&want, opts)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.WriteFrom(f, size); err != nil {
					t.Fatal(err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				m, err := segfile.MapFile(f, size)
				if err != nil {
					t.Fatal(err)
				}
				if m.Size() != size {
					t.Fatalf("mapped %d bytes, want %d", m.Size(), size)
				}
				if w, err = segfile.NewWriter(&got, opts); err != nil {
					t.Fatal(err)
				}
				if err := w.WriteFrom(m, size); err != nil {
					t.Fatal(err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Bytes(), want.Bytes()) {
					t.Fatalf("layout %v: object from the mapping differs (%d vs %d bytes)", layout != nil, got.Len(), want.Len())
				}
			}
		})
	}
}

// TestWriteFromMappedTruncated: a file cut shorter while it is mapped
// (reading its lost pages raises SIGBUS) fails WriteFrom and ReadAt with
// ErrFault instead of crashing the process, and the Writer stays failed.
func TestWriteFromMappedTruncated(t *testing.T) {
	f, size, runs := layoutSegment(t, 3000, 1100, 4, 0)
	m, err := segfile.MapFile(f, size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := os.Truncate(f.Name(), 100<<10); err != nil {
		t.Fatal(err)
	}
	w, err := segfile.NewWriter(io.Discard, segfile.Options{FrameSize: 64 << 10, Layout: runs})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFrom(m, size); !errors.Is(err, segfile.ErrFault) {
		t.Fatalf("WriteFrom of a file cut under its mapping: %v, want ErrFault", err)
	}
	if err := w.Close(); !errors.Is(err, segfile.ErrFault) {
		t.Fatalf("Close after the fault: %v, want ErrFault", err)
	}
	p := make([]byte, 4096)
	if _, err := m.ReadAt(p, 1<<20); !errors.Is(err, segfile.ErrFault) {
		t.Fatalf("ReadAt past the cut: %v, want ErrFault", err)
	}
	if _, err := m.ReadAt(p, 0); err != nil {
		t.Fatalf("ReadAt before the cut: %v", err)
	}
	// A file already shorter than asked is not mapped.
	if _, err := segfile.MapFile(f, size); err == nil {
		t.Fatal("mapped more bytes than the file holds")
	}
}
