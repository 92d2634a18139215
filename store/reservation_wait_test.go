package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestStoreReservationWait: a write refused by a reservation with Wait
// waits for the next reservation and is stored under it (OnNear asked for
// it); Fail refuses the waiting write, and later ones at once, naming the
// reason; with neither it is refused once Wait has passed. Wanted tells
// what the refused writes needed (issue 29 item 9).
func TestStoreReservationWait(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	asked := make(chan struct{}, 1)
	onNear := func() { asked <- struct{}{} }

	// Replaced while the write waits: it is stored under the new marks.
	s.SetReservation(&Reservation{Log: 1 << 30, Default: 2, OnNear: onNear, Wait: time.Minute})
	type outcome struct {
		res []PutResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := s.Put(t.Context(), []Message{msg("W", 0, "a"), msg("W", 0, "b"), msg("W", 0, "c")})
		done <- outcome{res, err}
	}()
	<-asked // refused: the reservation asks for the next one
	rv := s.resv.Load()
	if _, q := rv.Wanted(); q["W"][0] != 3 {
		t.Fatalf("Wanted W/0 = %d, want 3", q["W"][0])
	}
	s.SetReservation(&Reservation{Log: 1 << 30, Default: 10, OnNear: onNear, Wait: time.Minute})
	if o := <-done; o.err != nil || len(o.res) != 3 || o.res[2].QueueOffset != 2 {
		t.Fatalf("the waiting write after a new reservation: %v, %v", o.res, o.err)
	}

	// Failed while the write waits: refused with the reason; later
	// refusals by it do not wait.
	s.SetReservation(&Reservation{Log: 1 << 30, Default: 4, OnNear: onNear, Wait: time.Minute})
	go func() {
		res, err := s.Put(t.Context(), []Message{msg("W", 0, "d"), msg("W", 0, "e")})
		done <- outcome{res, err}
	}()
	<-asked
	s.resv.Load().Fail(errors.New("the bucket is down"))
	o := <-done
	if !errors.Is(o.err, ErrReserved) || !strings.Contains(o.err.Error(), "the bucket is down") {
		t.Fatalf("the waiting write after Fail: %v, want ErrReserved naming the reason", o.err)
	}
	if _, err := s.Put(t.Context(), []Message{msg("W", 0, "f"), msg("W", 0, "g")}); !errors.Is(err, ErrReserved) {
		t.Fatalf("a write refused by a failed reservation: %v, want ErrReserved", err)
	}
	if got := s.MaxQueueOffset("W", 0); got != 3 {
		t.Fatalf("refused writes moved W/0 to %d, want 3", got)
	}

	// Nothing comes: refused once Wait has passed.
	s.SetReservation(&Reservation{Log: 1 << 30, Default: 3, Wait: time.Millisecond})
	if _, err := s.Put(t.Context(), []Message{msg("W", 0, "h")}); !errors.Is(err, ErrReserved) || !strings.Contains(err.Error(), "within") {
		t.Fatalf("a write no reservation came for: %v, want ErrReserved saying it waited", err)
	}
}
