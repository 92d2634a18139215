package store

import (
	"context"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestFollowerColdHoleSurvivesRestarts: a follower whose queue has no local file (a cold
// start at 5) takes the master's record past its jump as a hole; the
// queue must come back the same after a clean restart, after a power loss
// before the flush, and after a power loss right after it, and a later
// promotion of the follower must jump past it.
func TestFollowerColdHoleSurvivesRestarts(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{"clean", "crash-before-flush", "crash-after-flush"} {
		t.Run(mode, func(t *testing.T) {
			fsX, fsY := vfs.NewMem(), vfs.NewMem()
			ox, oy := testOpts(fsX), testOpts(fsY)
			ox.CQEntriesPerFile, oy.CQEntriesPerFile = 1000, 1000
			x := mustOpen(t, ox)
			defer mustClose(t, x)
			y := mustOpen(t, oy)
			const to = 65_541
			if _, err := x.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: to}}}); err != nil {
				t.Fatal(err)
			}
			if _, err := y.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Min: 2, Max: 5}}}); err != nil {
				t.Fatal(err)
			}
			mustPut(t, x, msg("Q", 0, "past the jump"))
			mustPut(t, x, msg("Q", 0, "past the jump 2"))
			streamLog(t, x, fsX, y, 0, x.MaxPhysOffset())
			var fs2 vfs.FS
			switch mode {
			case "clean":
				mustClose(t, y)
				fs2 = fsY
			case "crash-before-flush":
				// The log durable (as the slave's ack requires), the queue not.
				if err := y.syncCommitlog(y.writePos.Load()); err != nil {
					t.Fatal(err)
				}
				fs2 = fsY.CrashClone()
				mustClose(t, y)
			case "crash-after-flush":
				if err := y.Flush(); err != nil {
					t.Fatal(err)
				}
				fs2 = fsY.CrashClone()
				mustClose(t, y)
			}
			oy2 := testOpts(fs2)
			oy2.CQEntriesPerFile = 1000
			y2 := mustOpen(t, oy2)
			defer mustClose(t, y2)
			if mn, mx := y2.MinQueueOffset("Q", 0), y2.MaxQueueOffset("Q", 0); mn != 2 || mx != to+2 {
				t.Errorf("after restart: Q [%d, %d), want [2, %d)", mn, mx, to+2)
			}
			checkAcked(t, y2, "Q", []acked{{0, to, "past the jump"}, {0, to + 1, "past the jump 2"}})
			r, err := y2.Get(ctx, GetRequest{Topic: "Q", QueueID: 0, Offset: 7, MaxMsgs: 1})
			if err != nil || r.NextBeginOffset != to {
				t.Errorf("a read in the hole after restart: %v next %d (%v), want next %d", r.Status, r.NextBeginOffset, err, to)
			}
			if got, err := y2.QueueOffsetAtTime(ctx, "Q", 0, 0); err != nil || got != 2 {
				t.Errorf("QueueOffsetAtTime(0): %d (%v), want the min 2", got, err)
			}
			if got, err := y2.QueueOffsetAtTime(ctx, "Q", 0, 1<<62); err != nil || got != to+2 {
				t.Errorf("QueueOffsetAtTime(far future): %d (%v), want the max %d", got, err, to+2)
			}
			if got, err := y2.VisibleMaxQueueOffset(ctx, "Q", 0, 1); err != nil || got > to {
				t.Errorf("VisibleMaxQueueOffset with nothing visible: %d (%v), want <= %d", got, err, to)
			}
			// Promoted: the queue jumps past the bucket's reservation.
			if n, err := y2.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: to + 1000}}}); err != nil || n != 1 {
				t.Fatalf("promotion: %d, %v", n, err)
			}
			if r := mustPut(t, y2, msg("Q", 0, "promoted")); r[0].QueueOffset != to+1000 {
				t.Errorf("promoted copy's first record at %d, want %d", r[0].QueueOffset, to+1000)
			}
		})
	}
}

// TestVisibleEndTwoHoles: visibleEnd over a queue with a hole in the middle and another
// at its end (two promotions), from lo = 0 and from lo > 0 (a Get's scan).
func TestVisibleEndTwoHoles(t *testing.T) {
	ctx := context.Background()
	o := testOpts(vfs.NewMem())
	o.CQEntriesPerFile = 1000
	s := mustOpen(t, o)
	defer mustClose(t, s)
	var res []PutResult
	for range 10 {
		res = append(res, mustPut(t, s, msg("Q", 0, "a"))...)
	}
	if _, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: 100}}}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		res = append(res, mustPut(t, s, msg("Q", 0, "b"))...)
	}
	if _, err := s.ResumeQueues(map[string]map[int32]QueueRange{"Q": {0: {Max: 200}}}); err != nil {
		t.Fatal(err)
	}
	end := func(i int) int64 { return res[i].PhysOffset + int64(res[i].Size) }
	for _, c := range []struct {
		held int64
		want int64
	}{
		{end(4), 5},
		{end(9), 10},   // records past the middle hole hidden: the hole is too
		{end(12), 103}, // qoff 100..102 held
		{end(14), 200}, // all held: the trailing hole is visible
	} {
		got, err := s.VisibleMaxQueueOffset(ctx, "Q", 0, c.held)
		if err != nil || got != c.want {
			t.Errorf("VisibleMaxQueueOffset(held %d): %d (%v), want %d", c.held, got, err, c.want)
		}
		for _, off := range []int64{0, 3, 9, 100} {
			if off >= c.want {
				continue
			}
			r, err := s.Get(ctx, GetRequest{Topic: "Q", QueueID: 0, Offset: off, MaxMsgs: 1, MaxPhys: c.held})
			if err != nil || r.MaxOffset != c.want {
				t.Errorf("Get(%d, held %d): MaxOffset %d (%v), want %d", off, c.held, r.MaxOffset, err, c.want)
			}
		}
	}
	// A reader at the hole's start while records after it are hidden.
	r, err := s.Get(ctx, GetRequest{Topic: "Q", QueueID: 0, Offset: 10, MaxMsgs: 1, MaxPhys: end(9)})
	t.Logf("Get(10, records past the hole hidden): %v next %d max %d (%v)", r.Status, r.NextBeginOffset, r.MaxOffset, err)
	r, err = s.Get(ctx, GetRequest{Topic: "Q", QueueID: 0, Offset: 300, MaxMsgs: 1, MaxPhys: end(9)})
	if err != nil || r.NextBeginOffset != 10 {
		t.Errorf("Get(300) overflow with records past the hole hidden: next %d (%v), want 10", r.NextBeginOffset, err)
	}
}
