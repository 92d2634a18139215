package simtest

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// reviewScenarios are schedules of a review of the replica records: each
// aims at one way a takeover can go to a copy that lacks what a live node
// holds and a sync_master acknowledged.
var reviewScenarios = []scenario{
	{name: "late-replica-record-of-the-old-epoch",
		// n1 restarts with its next bucket write held: its replica
		// record of epoch 1 times out at the client and lands 7 s later.
		// Meanwhile n0 crashes and retakes its lease under epoch 2, n1
		// follows it and records epoch 2; the late epoch-1 record then
		// lands over it (one key per instance, unconditional PUT). n1
		// acknowledges epoch-2 sends; n0 loses power while n1 is cut from
		// the bucket: n0's contest finds no record of epoch 2 and takes the
		// lease on its shorter copy.
		s: Schedule{Nodes: 2, Sync: true, Tail: 4 * time.Second, Steps: []Step{
			{At: 1500 * time.Millisecond, Fault: Crash, Node: 1, Dur: 300 * time.Millisecond},
			{At: 1700 * time.Millisecond, Fault: LateWrite, Node: 1, Dur: 7 * time.Second},
			{At: 3 * time.Second, Fault: Crash, Node: 0, Dur: 200 * time.Millisecond},
			{At: 10 * time.Second, Fault: BucketCut, Node: 1, Dur: 4 * ttl},
			{At: 10 * time.Second, Fault: PowerLoss, Node: 0, Dur: ttl / 2},
		}}},
}

func TestReviewScenarios(t *testing.T) {
	if raceEnabled {
		t.Skip("no -race")
	}
	for _, sc := range reviewScenarios {
		t.Run(sc.name, func(t *testing.T) {
			opt := simOptions()
			opt.KnownOpen = nil
			opt.Workloads = append([]string{"none"}, sc.workloads...)
			for rep := range *flagReps {
				s := sc.s
				s.Seed = uint64(rep + 1)
				s.Steps = slices.Clone(sc.s.Steps)
				res := runSchedule(t, &s, opt)
				replay := fmt.Sprintf("go test ./broker/simtest -run 'TestReviewScenarios/%s$' -sim.v", sc.name)
				if testing.Verbose() {
					t.Logf("run %d:\n%s", rep+1, reportReplay(res, replay))
				}
				if len(res.Violations) > 0 {
					t.Fatalf("run %d of %d:\n%s", rep+1, *flagReps, reportReplay(res, replay))
				}
			}
		})
	}
}
