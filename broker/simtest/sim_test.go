package simtest

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

var (
	flagSeeds  = flag.Int("sim.seeds", 200, "schedules to run (TestSim)")
	flagSeed   = flag.Uint64("sim.seed", 0, "run only this seed (replay)")
	flagFirst  = flag.Uint64("sim.first", 1, "first seed of a TestSim run")
	flagBudget = flag.Duration("sim.budget", 2*time.Minute, "wall-time budget of TestSim")
	flagSteps  = flag.Int("sim.steps", 6, "most steps a schedule draws")
	flagAll    = flag.Bool("sim.all", false, "draw the known-open fault kinds too")
	flagVerb   = flag.Bool("sim.v", false, "log the brokers (replay)")
)

func TestSimSmoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opt := Options{}
		if *flagVerb {
			opt.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
		s := &Schedule{Seed: 1, Nodes: 2, Sync: true, Tail: 3 * time.Second}
		start := time.Now()
		res := Run(s, opt)
		t.Logf("virtual %v acks %d sends %d violations %v", time.Since(start), res.Acks, res.Sends, res.Violations)
	})
	_ = fmt.Sprint
	_ = strings.Join
}
