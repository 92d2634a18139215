package store

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// ReadLog returns the same bytes across segment and cold/local boundaries,
// never past MaxPhysOffset, and ErrNotFound outside [MinPhysOffset, end].
func TestReadLogAcrossSegmentsAndCold(t *testing.T) {
	fs, cold, _, s, _ := openTiered(t, 150)
	defer mustClose(t, s)
	ctx := context.Background()
	end := s.MaxPhysOffset()
	want := make([]byte, end+100)
	n, err := s.ReadLog(ctx, 0, want)
	if err != nil || int64(n) != end {
		t.Fatalf("ReadLog(0, %d bytes) = %d, %v; want the %d bytes of the log", len(want), n, err, end)
	}
	want = want[:n]
	segs := s.SealedSegments()
	for _, sg := range segs[:3] {
		copyAndDrop(t, s, fs, cold, sg)
	}
	// Read in odd-sized chunks so reads cross the cold/local and segment boundaries.
	var got []byte
	buf := make([]byte, 7777)
	for off := int64(0); off < end; {
		n, err := s.ReadLog(ctx, off, buf)
		if err != nil || n == 0 {
			t.Fatalf("ReadLog(%d) after dropping 3 segments (local from %d) = %d, %v", off, segs[3].Base, n, err)
		}
		got = append(got, buf[:n]...)
		off += int64(n)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("ReadLog bytes changed after segments moved to the cold tier")
	}
	if n, err := s.ReadLog(ctx, end, buf); n != 0 || err != nil {
		t.Fatalf("ReadLog at the end = %d, %v; want 0, nil", n, err)
	}
	if _, err := s.ReadLog(ctx, end+1, buf); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadLog past the end: %v, want ErrNotFound", err)
	}
	if err := s.SetMinPhysOffset(segs[1].Base); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadLog(ctx, segs[1].Base-1, buf); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadLog below the retention floor: %v, want ErrNotFound", err)
	}
}
