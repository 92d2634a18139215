package broker

import (
	"testing"
	"time"
)

// TestGenPace: generations that end at once are spaced out, doubling up
// to the cap, from the second quick restart in a row; one that lived long
// starts the count again; a generation that holds a lease never waits.
func TestGenPace(t *testing.T) {
	t.Parallel()
	var p genPace
	want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	for i, w := range want {
		if got := p.next(time.Millisecond, false); got != w {
			t.Fatalf("quick restart %d: wait %v, want %v", i+1, got, w)
		}
	}
	if got := p.next(time.Millisecond, true); got != 0 {
		t.Fatalf("a generation holding a lease waits %v", got)
	}
	for range 20 {
		p.next(0, false)
	}
	if got := p.next(0, false); got != genPaceMax {
		t.Fatalf("after many quick restarts: wait %v, want the cap %v", got, genPaceMax)
	}
	if got := p.next(genPaceQuick, false); got != 0 {
		t.Fatalf("after a generation that lived %v: wait %v", genPaceQuick, got)
	}
	if got := p.next(time.Millisecond, false); got != 0 {
		t.Fatalf("the first quick restart after a long one waits %v", got)
	}
}
