package store

import (
	"errors"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestStoreReservationRefusesPastMarks: with a reservation set, a Put that
// would hand out a queue offset at or past its queue's mark, or end past
// the log mark, fails with ErrReserved and stores nothing; the other
// queues and a later, larger reservation carry on (issue 9 item 4).
func TestStoreReservationRefusesPastMarks(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	s.SetReservation(&Reservation{Log: 1 << 30, Queues: map[string]map[int32]int64{"T": {0: 3}}, Default: 2})

	mustPut(t, s, msg("T", 0, "a"), msg("T", 0, "b"))
	mustPut(t, s, msg("T", 0, "c"))
	if _, err := s.Put(t.Context(), []Message{msg("T", 0, "d")}); !errors.Is(err, ErrReserved) {
		t.Fatalf("Put past queue T/0's mark: %v, want ErrReserved", err)
	}
	// An unlisted queue gets Default; a batch that would cross it fails whole.
	if _, err := s.Put(t.Context(), []Message{msg("T", 1, "x"), msg("T", 1, "y"), msg("T", 1, "z")}); !errors.Is(err, ErrReserved) {
		t.Fatalf("batch past the default mark: %v, want ErrReserved", err)
	}
	if got := s.MaxQueueOffset("T", 1); got != 0 {
		t.Fatalf("a refused batch left queue offsets behind: max %d", got)
	}
	mustPut(t, s, msg("T", 1, "x"), msg("T", 1, "y"))

	// The log mark.
	end := s.MaxPhysOffset()
	s.SetReservation(&Reservation{Log: end + 10, Default: 100})
	if _, err := s.Put(t.Context(), []Message{msg("U", 0, "too long for ten bytes")}); !errors.Is(err, ErrReserved) {
		t.Fatalf("Put past the log mark: %v, want ErrReserved", err)
	}
	if s.MaxPhysOffset() != end {
		t.Fatalf("a refused Put moved the log end from %d to %d", end, s.MaxPhysOffset())
	}

	// A new reservation lets writes resume; nil removes the bound.
	s.SetReservation(&Reservation{Log: end + 1<<20, Queues: map[string]map[int32]int64{"T": {0: 10}}, Default: 100})
	res := mustPut(t, s, msg("T", 0, "d"))
	if res[0].QueueOffset != 3 {
		t.Fatalf("after the new reservation T/0 got offset %d, want 3", res[0].QueueOffset)
	}
	s.SetReservation(nil)
	for range 20 {
		mustPut(t, s, msg("T", 0, "e"))
	}
	if got := s.FlushedPhysOffset(); got > s.MaxPhysOffset() {
		t.Fatalf("FlushedPhysOffset %d past MaxPhysOffset %d", got, s.MaxPhysOffset())
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := s.FlushedPhysOffset(); got != s.MaxPhysOffset() {
		t.Fatalf("after Flush, FlushedPhysOffset %d, want %d", got, s.MaxPhysOffset())
	}
}

// TestStoreReservationOnNear: a write within LogNear of the log mark, or
// QueueNear of a queue's mark, calls OnNear once, before the mark refuses
// anything.
func TestStoreReservationOnNear(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	calls := 0
	s.SetReservation(&Reservation{Log: 1 << 30, Default: 10, QueueNear: 4, LogNear: 1 << 20, OnNear: func() { calls++ }})
	for range 5 {
		mustPut(t, s, msg("N", 0, "a"))
	}
	if calls != 0 {
		t.Fatalf("OnNear called %d times with 5 of 10 used and a gap of 4", calls)
	}
	mustPut(t, s, msg("N", 0, "b")) // offset 5: next+1 = 6 > 10-4
	mustPut(t, s, msg("N", 0, "c"))
	if calls != 1 {
		t.Fatalf("OnNear called %d times past the near mark, want once", calls)
	}
	end := s.MaxPhysOffset()
	calls = 0
	s.SetReservation(&Reservation{Log: end + 1<<20 + 100, Default: 1 << 20, LogNear: 1 << 20, OnNear: func() { calls++ }})
	mustPut(t, s, msg("N", 1, "x"))
	if calls != 1 {
		t.Fatalf("a write within LogNear of the log mark: OnNear called %d times, want 1", calls)
	}
}
