package store

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestCutLog: a log cut at a record boundary, across several segments,
// keeps the bytes before it, hands the bytes after it to the keep file, and
// reopens with consumequeues that end at the cut; new writes go on from it.
func TestCutLog(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	s := mustOpen(t, o)
	var res []PutResult
	for i := range 300 { // ~3 segments of 64 KiB
		res = append(res, mustPut(t, s, msg("T", int32(i%2), fmt.Sprintf("m%03d-%s", i, bytes.Repeat([]byte("x"), 500))))...)
	}
	end := s.MaxPhysOffset()
	mustClose(t, s)

	at := res[120].PhysOffset // a record boundary in a middle segment
	keep := "/data/diverged/cut"
	n, err := CutLog(fs, o.Dir, at, keep)
	if err != nil {
		t.Fatal(err)
	}
	if n != end-at {
		t.Fatalf("cut %d bytes, want %d", n, end-at)
	}
	kept, err := vfs.ReadFile(fs, keep)
	if err != nil || int64(len(kept)) < end-at {
		t.Fatalf("keep file: %d bytes, err %v; want at least %d", len(kept), err, end-at)
	}
	if !bytes.Contains(kept, []byte("m120-")) || !bytes.Contains(kept, []byte("m299-")) || bytes.Contains(kept, []byte("m119-")) {
		t.Fatal("keep file does not hold exactly the records from the cut on")
	}
	if n, err := CutLog(fs, o.Dir, at, keep); err != nil || n != 0 {
		t.Fatalf("second cut: %d, %v; want 0, nil", n, err)
	}

	s = mustOpen(t, o)
	defer mustClose(t, s)
	if got := s.MaxPhysOffset(); got != at {
		t.Fatalf("reopened log ends at %d, want the cut %d", got, at)
	}
	for q := int32(0); q < 2; q++ {
		recs := readQueue(t, s, "T", q)
		if len(recs) != 60 {
			t.Fatalf("queue %d: %d records after the cut, want 60", q, len(recs))
		}
		if want := fmt.Sprintf("m%03d-", 118+q); !bytes.HasPrefix(recs[len(recs)-1].Body, []byte(want)) {
			t.Fatalf("queue %d ends with %.5s, want %s", q, recs[len(recs)-1].Body, want)
		}
	}
	r := mustPut(t, s, msg("T", 0, "after"))
	if r[0].PhysOffset != at || r[0].QueueOffset != 60 {
		t.Fatalf("first write after the cut at phys %d queue offset %d, want %d and 60", r[0].PhysOffset, r[0].QueueOffset, at)
	}
	if _, err := CutLog(fs, o.Dir, -1, ""); err == nil {
		t.Fatal("a cut below the first segment was accepted")
	}
}
