package store

import (
	"context"
	"errors"
	"testing"
)

// StoreTimeAt reads the STORETIMESTAMP of the record at a commitlog offset,
// local or cold; an offset inside a record is ErrCorrupt, the end of the log
// ErrNotFound.
func TestStoreTimeAt(t *testing.T) {
	fs, cold, _, s, puts := openTiered(t, 150)
	defer mustClose(t, s)
	for _, sg := range s.SealedSegments()[:3] {
		copyAndDrop(t, s, fs, cold, sg)
	}
	ctx := context.Background()
	for i, p := range puts {
		ts, err := s.StoreTimeAt(ctx, p.PhysOffset)
		if err != nil || ts != p.StoreTimestamp {
			t.Fatalf("record %d at %d: StoreTimeAt = %d, %v; want %d", i, p.PhysOffset, ts, err, p.StoreTimestamp)
		}
	}
	if _, err := s.StoreTimeAt(ctx, puts[5].PhysOffset+1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("StoreTimeAt inside a record: %v; want ErrCorrupt", err)
	}
	if _, err := s.StoreTimeAt(ctx, s.MaxPhysOffset()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("StoreTimeAt at the end of the log: %v; want ErrNotFound", err)
	}
}
