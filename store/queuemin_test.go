package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestStoreRaiseQueueMins: a raised queue min hides the queue's older
// records (OffsetTooSmall pointing at it), leaves other queues alone,
// survives a reopen, is capped at the queue's max, and is forgotten when
// the topic is deleted.
func TestStoreRaiseQueueMins(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	s := mustOpen(t, o)
	for i := range 30 {
		mustPut(t, s, msg("A", 0, fmt.Sprint("a", i)), msg("B", 0, fmt.Sprint("b", i)))
	}
	if err := s.RaiseQueueMins([]QueueMin{{Topic: "A", QueueID: 0, Min: 10}, {Topic: "Nope", QueueID: 3, Min: 5}}); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		if got := s.MinQueueOffset("A", 0); got != 10 {
			t.Fatalf("A min %d, want 10", got)
		}
		if got := s.MinQueueOffset("B", 0); got != 0 {
			t.Fatalf("B min %d, want 0", got)
		}
		r, err := s.Get(context.Background(), GetRequest{Topic: "A", QueueID: 0, Offset: 3})
		if err != nil || r.Status != OffsetTooSmall || r.NextBeginOffset != 10 || r.MinOffset != 10 {
			t.Fatalf("get below the min: %v next %d min %d (%v)", r.Status, r.NextBeginOffset, r.MinOffset, err)
		}
		r, err = s.Get(context.Background(), GetRequest{Topic: "A", QueueID: 0, Offset: 10, MaxMsgs: 1})
		if err != nil || r.Status != Found {
			t.Fatalf("get at the min: %v %v", r.Status, err)
		}
		if rec, _, _ := DecodeRecord(r.Records[0]); string(rec.Body) != "a10" {
			t.Fatalf("record at the min: %q", rec.Body)
		}
	}
	check(s)
	// Never lowered.
	if err := s.RaiseQueueMins([]QueueMin{{Topic: "A", QueueID: 0, Min: 4}}); err != nil {
		t.Fatal(err)
	}
	check(s)
	mustClose(t, s)
	s = mustOpen(t, o)
	check(s)
	// Capped at max.
	if err := s.RaiseQueueMins([]QueueMin{{Topic: "B", QueueID: 0, Min: 1000}}); err != nil {
		t.Fatal(err)
	}
	if got := s.MinQueueOffset("B", 0); got != 30 {
		t.Fatalf("B min %d, want its max 30", got)
	}
	if err := s.DeleteTopic("A"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, msg("A", 0, "new"))
	mustClose(t, s)
	s = mustOpen(t, o)
	defer mustClose(t, s)
	// Created again, A/0 continues at the deleted queue's end (its
	// tombstone), not at the min raised before the deletion.
	if mn, mx := s.MinQueueOffset("A", 0), s.MaxQueueOffset("A", 0); mn != mx-1 {
		t.Fatalf("A created again: [%d, %d), want one message", mn, mx)
	}
	if got := s.MinQueueOffset("B", 0); got != 30 {
		t.Fatalf("B min %d after reopen, want 30", got)
	}
}

// TestStoreQueueOffsetAtTimeAndPhys: the lower bounds the broker's expiry
// moves a queue's min to.
func TestStoreQueueOffsetAtTimeAndPhys(t *testing.T) {
	s := mustOpen(t, testOpts(vfs.NewMem()))
	defer mustClose(t, s)
	var phys []int64
	for i := range 50 {
		res := mustPut(t, s, msg("A", 0, fmt.Sprint(i)), msg("B", 1, fmt.Sprint(i)))
		phys = append(phys, res[0].PhysOffset)
	}
	times := make([]int64, 50)
	for i, p := range phys {
		raw, err := s.ReadRecord(p)
		if err != nil {
			t.Fatal(err)
		}
		rec, _, _ := DecodeRecord(raw)
		times[i] = rec.StoreTimestamp
	}
	ctx := context.Background()
	for _, i := range []int{0, 1, 17, 49} {
		want := int64(i)
		for want > 0 && times[want-1] >= times[i] {
			want--
		}
		if got, err := s.QueueOffsetAtTime(ctx, "A", 0, times[i]); err != nil || got != want {
			t.Fatalf("at the time of %d: %d %v, want %d", i, got, err, want)
		}
		if got, err := s.QueueOffsetAtPhys(ctx, "A", 0, phys[i]); err != nil || got != int64(i) {
			t.Fatalf("at the offset of %d: %d %v", i, got, err)
		}
		if got, err := s.QueueOffsetAtPhys(ctx, "A", 0, phys[i]+1); err != nil || got != int64(i+1) {
			t.Fatalf("past the offset of %d: %d %v", i, got, err)
		}
	}
	if got, _ := s.QueueOffsetAtTime(ctx, "A", 0, times[49]+1); got != 50 {
		t.Fatalf("past every record: %d, want 50", got)
	}
	if got, _ := s.QueueOffsetAtTime(ctx, "A", 0, 0); got != 0 {
		t.Fatalf("before every record: %d, want 0", got)
	}
}

// TestStoreResumeQueues: a queue the store holds no entry of starts at the
// given Max (its first new message there, its range [Min, Max) below it
// cold), durably across a reopen, even before a message lands; a queue
// with local entries below Max keeps them and continues at Max; a queue
// already at or past Max is left as it is.
func TestStoreResumeQueues(t *testing.T) {
	fs := vfs.NewMem()
	o := testOpts(fs)
	s := mustOpen(t, o)
	for i := range 3 {
		mustPut(t, s, msg("Held", 0, fmt.Sprint("h", i)))
	}
	n, err := s.ResumeQueues(map[string]map[int32]QueueRange{
		"Held":   {0: {Min: 0, Max: 1024}},
		"Unseen": {1: {Min: 7, Max: 1032}, 2: {Max: 0}},
	})
	if err != nil || n != 2 {
		t.Fatalf("ResumeQueues: %d resumed, %v; want 2", n, err)
	}
	check := func(s *Store) {
		t.Helper()
		if mn, mx := s.MinQueueOffset("Held", 0), s.MaxQueueOffset("Held", 0); mn != 0 || mx != 1024 {
			t.Fatalf("Held/0 is [%d, %d), want [0, 1024) (its local entries kept, its next offset past the bucket's)", mn, mx)
		}
		if mn, mx := s.MinQueueOffset("Unseen", 1), s.MaxQueueOffset("Unseen", 1); mn != 7 || mx != 1032 {
			t.Fatalf("Unseen/1 is [%d, %d), want [7, 1032)", mn, mx)
		}
	}
	check(s)
	mustClose(t, s)
	s = mustOpen(t, o) // no message landed: the range itself is durable
	check(s)
	if r := mustPut(t, s, msg("Unseen", 1, "first")); r[0].QueueOffset != 1032 {
		t.Fatalf("first message of Unseen/1 at queue offset %d, want 1032", r[0].QueueOffset)
	}
	if r := mustPut(t, s, msg("Held", 0, "after")); r[0].QueueOffset != 1024 {
		t.Fatalf("first new message of Held/0 at queue offset %d, want 1024", r[0].QueueOffset)
	}
	if n, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Unseen": {1: {Max: 1000}}, "Held": {0: {Max: 1025}}}); err != nil || n != 0 {
		t.Fatalf("ResumeQueues below queues' ends: %d resumed, %v; want 0", n, err)
	}
	mustClose(t, s)
	s = mustOpen(t, o)
	defer mustClose(t, s)
	if got := s.MaxQueueOffset("Unseen", 1); got != 1033 {
		t.Fatalf("Unseen/1 ends at %d after reopen, want 1033", got)
	}
	r, err := s.Get(context.Background(), GetRequest{Topic: "Unseen", QueueID: 1, Offset: 1032, MaxMsgs: 1})
	if err != nil || r.Status != Found {
		t.Fatalf("get the first message: %v %v", r.Status, err)
	}
	if got := s.MaxQueueOffset("Held", 0); got != 1025 {
		t.Fatalf("Held/0 ends at %d after reopen, want 1025", got)
	}
}
