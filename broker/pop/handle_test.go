package pop

import "testing"

// TestPopHandleRoundTrip: handles parse back to what made them.
func TestPopHandleRoundTrip(t *testing.T) {
	for _, h := range []Handle{
		{Topic: "T", QueueID: 0, Offset: 0, PopMs: 1, InvisibleMs: 1, Nonce: 1},
		{Topic: "with_under_scores%RETRY%x", QueueID: 1023, Offset: 1 << 40, PopMs: 1767369600000, InvisibleMs: 43200000, Nonce: ^uint64(0)},
	} {
		got, err := ParseHandle(h.String())
		if err != nil || got != h {
			t.Fatalf("%q parsed to %+v, %v", h.String(), got, err)
		}
	}
}
