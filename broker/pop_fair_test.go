package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPopInflightFairShare: groups that never ack take from the broker's
// total only while a share for one more group stays free, so each next
// group still receives; the one refused gets an error naming the bound;
// an ack makes room again.
func TestPopInflightFairShare(t *testing.T) {
	t.Parallel()
	cfg := popCfg(t)
	cfg.PopMaxInflight, cfg.PopMaxInflightPerGroup = 30, 30
	b, cl, _ := runBrokerWith(t, cfg, popDeps(), nil)
	popSend(t, b, cl, "PopF", 0, 0, 60, "")
	// total 30: a group takes while total/(n+2) stays free, n the groups
	// in flight with it.
	want := []int{20, 3, 1, 1, 1, 1}
	var first []PopMessage
	for i, w := range want {
		got := popRecv(t, b, PopRequest{Group: fmt.Sprintf("GF%d", i), Topic: "PopF", MaxMessages: 32})
		if len(got) != w {
			t.Fatalf("group %d received %d, want %d (in flight %d)", i, len(got), w, b.PopInflight(""))
		}
		if i == 0 {
			first = got
		}
	}
	_, err := b.PopReceive(context.Background(), PopRequest{Group: "GF6", Topic: "PopF", QueueID: -1, Invisible: time.Minute})
	if !errors.Is(err, ErrPopInflightLimit) || !strings.Contains(err.Error(), "free for other groups") {
		t.Fatalf("the seventh group: %v, want the share refusal", err)
	}
	if _, err := b.PopReceive(context.Background(), PopRequest{Group: "GF0", Topic: "PopF", QueueID: -1, Invisible: time.Minute}); !errors.Is(err, ErrPopInflightLimit) {
		t.Fatalf("the first group again: %v, want refused", err)
	}
	if err := b.PopAck("GF0", "PopF", first[0].Handle); err != nil {
		t.Fatal(err)
	}
	if got := popRecv(t, b, PopRequest{Group: "GF6", Topic: "PopF", MaxMessages: 32}); len(got) != 1 {
		t.Fatalf("the seventh group after an ack received %d, want 1", len(got))
	}
}

// TestPopInflightPerClient: a client past its bound is refused naming it
// while another client of the same group receives; messages delivered
// again count for the client that gets them.
func TestPopInflightPerClient(t *testing.T) {
	t.Parallel()
	clock := newPopClock()
	cfg := popCfg(t)
	cfg.PopMaxInflightPerClient = 5
	b, cl, _ := runBrokerWith(t, cfg, popDeps(), clock.hook())
	popSend(t, b, cl, "PopC", 0, 0, 12, "")
	if got := popRecv(t, b, PopRequest{Group: "GC", Topic: "PopC", MaxMessages: 32, Client: "c1", Invisible: time.Second}); len(got) != 5 {
		t.Fatalf("c1 received %d, want its bound 5", len(got))
	}
	_, err := b.PopReceive(context.Background(), PopRequest{Group: "GC2", Topic: "PopC", QueueID: -1, Invisible: time.Minute, Client: "c1"})
	if !errors.Is(err, ErrPopInflightLimit) || !strings.Contains(err.Error(), "STRATAMQ_POP_MAX_INFLIGHT_PER_CLIENT") {
		t.Fatalf("c1 in another group: %v, want the per-client refusal", err)
	}
	if got := popRecv(t, b, PopRequest{Group: "GC", Topic: "PopC", MaxMessages: 32, Client: "c2", Invisible: time.Minute}); len(got) != 5 {
		t.Fatalf("c2 received %d, want 5", len(got))
	}
	// c1's messages come back; c3 takes them, and they count for c3.
	clock.add(2 * time.Second)
	b.pop.Revive(context.Background())
	if got := popRecv(t, b, PopRequest{Group: "GC", Topic: "PopC", MaxMessages: 32, Client: "c3", Invisible: time.Minute}); len(got) != 5 {
		t.Fatalf("c3 received %d, want c1's 5 again", len(got))
	}
	if got := popRecv(t, b, PopRequest{Group: "GC2", Topic: "PopC", MaxMessages: 32, Client: "c1", Invisible: time.Minute}); len(got) != 5 {
		t.Fatalf("c1, its messages taken by c3, received %d in another group, want 5", len(got))
	}
}
