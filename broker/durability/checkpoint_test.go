package durability

import (
	"testing"
	"time"
)

// TestBrokerReservationHeadroomFollowsRate (issue 29 item 9): the headroom
// a checkpoint reserves is four times what was written since the previous
// attempt (the rule for checkpoints at the interval) or, for an early
// checkpoint after a burst, four intervals at the burst's rate, that part
// bounded by 64 × the least; never below the least.
func TestBrokerReservationHeadroomFollowsRate(t *testing.T) {
	d := &Keeper{cfg: Config{CheckpointInterval: 10 * time.Second}}
	for _, tc := range []struct {
		grew    int64
		elapsed time.Duration
		want    int64
	}{
		{0, time.Second, 1000},                  // idle: the least
		{100, 10 * time.Second, 1000},           // slow: the least
		{50_000, 10 * time.Second, 200_000},     // at the interval: 4 × grew
		{50_000, 20 * time.Second, 200_000},     // late (failed attempts): 4 × grew
		{1_000, time.Second, 40_000},            // early: 4 intervals at 1,000/s
		{5_000, 100 * time.Millisecond, 64_000}, // a burst: its rate counts up to 64 × least
		{50_000, time.Millisecond, 200_000},     // a burst larger than that: 4 × grew
		{-5, 0, 1000},                           // a queue deleted, no time: the least
	} {
		if got := d.headroom(tc.grew, tc.elapsed, 1000); got != tc.want {
			t.Errorf("headroom(grew %d over %v, least 1000) = %d, want %d", tc.grew, tc.elapsed, got, tc.want)
		}
	}
}
