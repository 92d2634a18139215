package segfile_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/stratamq/stratamq/tier/segfile"
)

// writeRunsOneByOne encodes data queue-major the plain way: each run
// written from its own slice (what WriteFrom did with one read per run).
func writeRunsOneByOne(t *testing.T, data []byte, layout []segfile.Run, fs int) []byte {
	t.Helper()
	var obj bytes.Buffer
	w, err := segfile.NewWriter(&obj, segfile.Options{FrameSize: fs, Layout: layout})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range layout {
		if i == 0 || r.Group != layout[i-1].Group {
			var g int64
			for _, r2 := range layout[i:] {
				if r2.Group != r.Group {
					break
				}
				g += r2.Len
			}
			if err := w.CutGroup(g); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Write(data[r.Off : r.Off+r.Len]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return obj.Bytes()
}

// TestWriteFromLayoutCoalescedReads: WriteFrom reads close runs of a group
// together, and the object is byte for byte the one written run by run:
// round robin over few and many queues, runs bigger than the read buffer,
// and a layout whose groups are not in queue order.
func TestWriteFromLayoutCoalescedReads(t *testing.T) {
	for _, tc := range []struct {
		name           string
		n, size, queue int
		big            bool
		maxReads       int64
	}{
		{"4 queues", 3000, 1100, 4, false, 100},
		{"8 queues", 3000, 1100, 8, false, 200},
		{"64 queues", 3000, 1100, 64, false, 3000},
		{"big records", 200, 1100, 3, true, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			big := 0
			if tc.big {
				big = 7 // past WriteFrom's 256 KiB buffer
			}
			f, size, runs := layoutSegment(t, tc.n, tc.size, tc.queue, big)
			data, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			want := writeRunsOneByOne(t, data, runs, 64<<10)
			cf := &countingFile{f: f}
			var obj bytes.Buffer
			w, err := segfile.NewWriter(&obj, segfile.Options{FrameSize: 64 << 10, Layout: runs})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.WriteFrom(cf, size); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(obj.Bytes(), want) {
				t.Fatalf("object differs from the one written run by run (%d vs %d bytes)", obj.Len(), len(want))
			}
			if r := cf.reads.Load(); r > tc.maxReads {
				t.Fatalf("%d reads for %d runs, want at most %d", r, len(runs), tc.maxReads)
			}
		})
	}
}
