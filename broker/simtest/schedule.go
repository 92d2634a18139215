package simtest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Fault is a kind of fault the schedule draws.
type Fault int

const (
	Crash         Fault = iota // process crash (kill -9): the disk keeps its page cache
	PowerLoss                  // power loss: the disk keeps what was synced (crash clone)
	PowerLossTorn              // power loss with a torn tail (a random prefix of unsynced appends)
	BucketCut                  // the node cannot reach the bucket for a while
	NetCut                     // two nodes cannot reach each other for a while (HA links broken)
	FlakyBucket                // three bucket calls of the node in four fail (503 SlowDown) for a while
	LateWrite                  // the node's next bucket write lands seconds late
	CleanStop                  // graceful stop, restart later
	Promote                    // admin promote of the node (a slave)
	Demote                     // admin demote of the node (a master)
	EmptyDisk                  // the node's disk is replaced by an empty one (crash, new disk, restart)
	ClockSkew                  // the node's monotonic clock runs 0.9-1.1 times as fast for a while (within the lease margin)
	numFaults
)

var faultNames = [numFaults]string{"crash", "powerloss", "powerloss-torn", "bucket-cut", "net-cut", "flaky-bucket",
	"late-write", "clean-stop", "promote", "demote", "empty-disk", "clock-skew"}

func (f Fault) String() string {
	if f >= 0 && f < numFaults {
		return faultNames[f]
	}
	return fmt.Sprintf("fault(%d)", int(f))
}

// ParseFault is the fault named s.
func ParseFault(s string) (Fault, error) {
	for i, n := range faultNames {
		if n == s {
			return Fault(i), nil
		}
	}
	return 0, fmt.Errorf("simtest: no fault %q (have %s)", s, strings.Join(faultNames[:], ", "))
}

// Step is one fault of a schedule: at At (virtual time since the
// workload started) Fault hits Node (and Peer, for NetCut); it lasts, or
// the node stays down, for Dur.
type Step struct {
	At    time.Duration
	Fault Fault
	Node  int
	Peer  int
	Dur   time.Duration
	Rate  float64 // ClockSkew: the clock's rate
}

func (s Step) String() string {
	r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	switch s.Fault {
	case NetCut:
		return fmt.Sprintf("%8s %s n%d<->n%d for %s", r(s.At), s.Fault, s.Node, s.Peer, r(s.Dur))
	case Promote, Demote:
		return fmt.Sprintf("%8s %s n%d", r(s.At), s.Fault, s.Node)
	case LateWrite:
		return fmt.Sprintf("%8s %s n%d lands %s late", r(s.At), s.Fault, s.Node, r(s.Dur))
	case BucketCut, FlakyBucket:
		return fmt.Sprintf("%8s %s n%d for %s", r(s.At), s.Fault, s.Node, r(s.Dur))
	case ClockSkew:
		return fmt.Sprintf("%8s %s n%d at rate %.3f for %s", r(s.At), s.Fault, s.Node, s.Rate, r(s.Dur))
	}
	return fmt.Sprintf("%8s %s n%d, restart after %s", r(s.At), s.Fault, s.Node, r(s.Dur))
}

// Schedule is what a seed draws: the cluster's shape and its faults.
type Schedule struct {
	Seed  uint64
	Nodes int  // 2 or 3: a master and one or two failover slaves
	Sync  bool // sync_master (else async_master)
	// Masters is how many nodes are configured with the master role
	// (n0 first; at least 1): with failover the lease decides who is
	// master, so an operator may configure every node as one. A node so
	// configured that restarts tries to take a released or lapsed lease
	// in New, on its own copy of the log, not through a slave's watch.
	Masters int
	// Bucket: every topic is bucket-durable (STRATAMQ_DURABILITY=bucket):
	// a send is answered once a committed WAL object holds it, so no
	// acknowledged message may be lost however the nodes die, disks
	// included. Nodes may then be 1 (no slave: the serverless case).
	Bucket bool
	Steps  []Step
	// Tail is how long the workload runs after the last step before the
	// cluster is healed.
	Tail time.Duration
}

func (s *Schedule) String() string {
	mode := "async_master"
	if s.Sync {
		mode = "sync_master"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d nodes, %s, %d steps", s.Seed, s.Nodes, mode, len(s.Steps))
	if s.Masters > 1 {
		fmt.Fprintf(&b, ", %d nodes configured as master", s.Masters)
	}
	if s.Bucket {
		b.WriteString(", every topic bucket-durable")
	}
	b.WriteString("\n")
	for _, st := range s.Steps {
		fmt.Fprintf(&b, "  %s\n", st)
	}
	return b.String()
}

// Draw draws the schedule of seed from the faults allowed, with the
// lease TTL the cluster runs with and at most maxSteps steps.
func Draw(seed uint64, allowed []Fault, ttl time.Duration, maxSteps int) *Schedule {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &Schedule{Seed: seed, Nodes: 2 + rng.IntN(2), Sync: rng.IntN(2) == 0}
	n := 1 + rng.IntN(maxSteps)
	at := time.Duration(0)
	dur := func(lo, hi float64) time.Duration {
		return time.Duration((lo + rng.Float64()*(hi-lo)) * float64(ttl))
	}
	// down is how long a node stays down: half the time back within the
	// lease TTL (it may retake its own lease), else after it.
	down := func() time.Duration {
		if rng.IntN(2) == 0 {
			return dur(0.05, 0.9)
		}
		return dur(1, 3)
	}
	for range n {
		at += dur(0.2, 2)
		st := Step{At: at, Fault: allowed[rng.IntN(len(allowed))], Node: rng.IntN(s.Nodes)}
		switch st.Fault {
		case Crash, PowerLoss, PowerLossTorn, CleanStop, EmptyDisk:
			st.Dur = down()
		case BucketCut, FlakyBucket:
			st.Dur = dur(0.3, 3)
		case NetCut:
			st.Peer = (st.Node + 1 + rng.IntN(s.Nodes-1)) % s.Nodes
			st.Dur = dur(0.3, 3)
		case LateWrite:
			st.Dur = dur(0.5, 4)
		case ClockSkew:
			st.Rate = 0.9 + 0.2*rng.Float64()
			st.Dur = dur(1, 5)
		}
		s.Steps = append(s.Steps, st)
	}
	s.Tail = dur(0.5, 2)
	// Drawn last, so the rest of a seed's schedule is what it was before.
	s.Masters = 1 + rng.IntN(s.Nodes)
	return s
}

// Durability modes of DrawDurability.
const (
	DurabilityDrawn  = "drawn"  // a quarter of the seeds bucket-durable, a third of those on one node
	DurabilityLocal  = "local"  // never
	DurabilityBucket = "bucket" // always (a third on one node)
)

// DrawDurability sets s.Bucket by mode, from a generator of its own (the
// rest of the seed's draw is unchanged). A bucket-durable schedule runs
// on one node a third of the time: its steps all fall on n0, a network
// cut becomes a bucket cut and a promote or demote a crash.
func DrawDurability(s *Schedule, mode string) {
	rng := rand.New(rand.NewPCG(s.Seed, 0xb0c4e7d0ab1e))
	switch mode {
	case DurabilityLocal:
		return
	case DurabilityBucket:
		s.Bucket = true
	default:
		s.Bucket = rng.IntN(4) == 0
	}
	if !s.Bucket || rng.IntN(3) != 0 {
		return
	}
	s.Nodes, s.Masters, s.Sync = 1, 1, false // a sync_master needs a slave to answer SEND_OK
	for i := range s.Steps {
		st := &s.Steps[i]
		st.Node, st.Peer = 0, 0
		switch st.Fault {
		case NetCut:
			st.Fault = BucketCut
		case Promote, Demote:
			st.Fault, st.Dur = Crash, time.Duration(float64(s.Tail)/2)
		}
	}
}

// without is s minus step i (shrinking).
func (s *Schedule) without(i int) *Schedule {
	c := *s
	c.Steps = append(append([]Step(nil), s.Steps[:i]...), s.Steps[i+1:]...)
	return &c
}
