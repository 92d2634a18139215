package simtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/infra/vfs/errorfs"
	"github.com/stratamq/stratamq/tier"
)

// brokerName is the one brokerName the simulator runs.
const brokerName = "broker-a"

// cluster is the brokerName's nodes over one shared bucket and network.
type cluster struct {
	opt    Options
	net    *Net
	bucket tier.Bucket // the shared bucket, unwrapped
	nodes  []*simNode
	logger *slog.Logger

	// diskLost: when each node lost what it had not synced (a power loss
	// or a new disk), for the checker's async_master allowance.
	diskLost map[int][]time.Time
	// life: when each node's process started (true) and stopped or died
	// (false), for the checker: a node down when a message was
	// acknowledged never held it.
	life map[int][]lifeEvent
	// snaps: every node's log end (-1: down) at each loss, taken just
	// before it, for the checker: a node whose log never reached an
	// acknowledged record while a copy of it lived never held it.
	snaps []lossSnap

	mu      sync.Mutex
	zombies []*incarnation // killed or stopped incarnations still winding down
	notes   []string       // processes that exited on their own and were started again, skipped ranges
	// takeovers: when a master generation started (guarded by mu): a
	// replay point for the at-least-once bounds (nearFault).
	takeovers []time.Time
	// backstops: exits of broker.New's last check (a violation).
	backstops []string
}

// lossSnap: the nodes' log ends when one of them lost its disk or its
// unsynced bytes.
type lossSnap struct {
	at   time.Time
	ends []int64
}

// snapEnds records every node's log end now (a loss is about to happen).
func (c *cluster) snapEnds() {
	s := lossSnap{at: time.Now(), ends: make([]int64, len(c.nodes))}
	for i, n := range c.nodes {
		s.ends[i] = -1
		if b := n.broker(); b != nil {
			s.ends[i] = b.Store().MaxPhysOffset()
		}
	}
	c.snaps = append(c.snaps, s)
}

// lifeEvent: a node's process started (up) or stopped or died at at.
type lifeEvent struct {
	at time.Time
	up bool
}

// simNode is one machine: its disk (a vfs.Mem, replaced by a crash clone
// on power loss or a new one on a disk swap), its host on the network and
// its link to the bucket, across process incarnations.
type simNode struct {
	c    *cluster
	idx  int
	ip   string
	host *Host
	mem  *vfs.Mem
	link *bucketLink
	cfg  broker.Config
	inc  *incarnation // nil while down; the executor's (one goroutine's)
	// live is inc's Node for the workload's goroutines (role).
	live atomic.Pointer[broker.Node]
	rate float64 // the node's clock rate (ClockSkew); 0: 1
	boot int     // the machine's boot: a power loss or a new disk (machine) starts another
	// stopping is an incarnation stopping gracefully (CleanStop): the
	// node starts again only once it ended.
	stopping *incarnation
}

// incarnation is one process run on a node.
type incarnation struct {
	n      *broker.Node
	clock  *skewClock
	stack  *Stack
	fsOff  *errorfs.Toggle
	dead   atomic.Bool
	cancel context.CancelFunc
	done   chan error // Run's result
	err    error      // Run's result once done closed
}

func newCluster(opt Options, logger *slog.Logger) *cluster {
	c := &cluster{opt: opt, net: NewNet(), bucket: tier.NewMem(), logger: logger, diskLost: map[int][]time.Time{}, life: map[int][]lifeEvent{}}
	for i := range opt.Nodes {
		role := broker.RoleSlave
		if i == 0 || i < opt.Masters {
			role = broker.RoleAsyncMaster
			if opt.Sync {
				role = broker.RoleSyncMaster
			}
		}
		ip := fmt.Sprintf("10.0.0.%d", i+1)
		n := &simNode{c: c, idx: i, ip: ip, host: c.net.Host(ip), mem: vfs.NewMem(), link: &bucketLink{}}
		n.cfg = broker.Config{DataDir: "/data", Listen: ip + ":10911", HAListen: ip + ":10912", Role: role,
			Cluster: "sim", BrokerName: brokerName, HAFailover: true, HASecret: "sim-ha-secret", // its peers are not on loopback
			SegmentSize: 1 << 20, MaxMessageSize: 64 << 10, AutoCreateTopic: true,
			HATimeout: 2 * time.Second, LeaseTTL: opt.LeaseTTL, CheckpointInterval: opt.LeaseTTL / 10,
			SegmentMaxAge: opt.SegmentMaxAge, RegisterInterval: time.Hour, ShutdownTimeout: 20 * time.Second,
			ReserveLogMin: 1 << 20, ReserveQueueMin: 1 << 10,
			TransactionCheckInterval: opt.TxCheckInterval} // the workloads' services otherwise run with their defaults
		if opt.Bucket {
			n.cfg.Durability, n.cfg.WALLinger = broker.DurabilityBucket, 50*time.Millisecond
		}
		c.nodes = append(c.nodes, n)
	}
	return c
}

func (n *simNode) name() string { return fmt.Sprintf("n%d", n.idx) }

// start runs a new incarnation of the node's process on its disk.
func (n *simNode) start() {
	if n.inc != nil {
		panic("simtest: start of a running node")
	}
	n.c.life[n.idx] = append(n.c.life[n.idx], lifeEvent{at: time.Now(), up: true})
	inc := &incarnation{stack: n.host.NewStack(), done: make(chan error, 1)}
	inc.fsOff = &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(errorfs.Op, string) error { return errProcessDead })}
	fs := errorfs.Wrap(n.mem, inc.fsOff)
	bkt := &nodeBucket{Bucket: n.c.bucket, link: n.link, dead: &inc.dead}
	rate := n.rate
	if rate == 0 {
		rate = 1
	}
	inc.clock = newSkewClock(rate)
	inc.n = broker.NewNode(n.cfg, broker.Deps{FS: fs, Logger: n.c.logger.With("node", n.name()), Bucket: bkt, Net: inc.stack,
		Mono: inc.clock, BootID: fmt.Sprintf("%s-boot-%d", n.name(), n.boot)}, func(b *broker.Broker) {
		if b.Epoch() > 0 { // a master generation: it replays its schedule and transaction queues
			n.c.mu.Lock()
			n.c.takeovers = append(n.c.takeovers, time.Now())
			n.c.mu.Unlock()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	inc.cancel = cancel
	go func() {
		err := inc.n.Run(ctx)
		inc.err = err
		inc.done <- err
		close(inc.done)
	}()
	n.inc = inc
	n.live.Store(inc.n)
}

// kill ends the process at once: its disk and bucket calls fail from now
// on, its sockets close; it winds down in the background. With power
// loss the disk keeps only what was synced (torn: a random prefix of
// unsynced appends may survive).
func (n *simNode) kill(powerLoss bool, rng *rand.Rand) {
	inc := n.inc
	if inc == nil {
		return
	}
	n.c.life[n.idx] = append(n.c.life[n.idx], lifeEvent{at: time.Now()})
	inc.dead.Store(true)
	inc.fsOff.On()
	inc.stack.Kill()
	inc.cancel()
	if powerLoss {
		n.c.snapEnds()
		n.c.diskLost[n.idx] = append(n.c.diskLost[n.idx], time.Now())
		n.boot++
		if rng != nil {
			n.mem = n.mem.CrashCloneTorn(rng)
		} else {
			n.mem = n.mem.CrashClone()
		}
	}
	n.inc = nil
	n.live.Store(nil)
	n.c.mu.Lock()
	n.c.zombies = append(n.c.zombies, inc)
	n.c.mu.Unlock()
}

// stop stops the process gracefully and waits for it (up to its
// shutdown budget); it returns Run's error.
func (n *simNode) stop() error {
	inc := n.inc
	if inc == nil {
		return nil
	}
	n.c.life[n.idx] = append(n.c.life[n.idx], lifeEvent{at: time.Now()})
	inc.cancel()
	var err error
	t := time.NewTimer(2 * n.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case err = <-inc.done:
	case <-t.C:
		err = fmt.Errorf("%s did not stop within %v", n.name(), 2*n.cfg.ShutdownTimeout)
	}
	inc.dead.Store(true)
	inc.fsOff.On()
	inc.stack.Kill()
	n.inc = nil
	n.live.Store(nil)
	n.c.mu.Lock()
	n.c.zombies = append(n.c.zombies, inc)
	n.c.mu.Unlock()
	return err
}

// beginStop starts a graceful stop (the process drains and uploads).
func (n *simNode) beginStop() {
	inc := n.inc
	if inc == nil {
		return
	}
	n.c.life[n.idx] = append(n.c.life[n.idx], lifeEvent{at: time.Now()})
	inc.cancel()
	n.inc, n.stopping = nil, inc
	n.live.Store(nil)
}

// stopDone reports whether the stopping incarnation ended; force kills it
// when it did not.
func (n *simNode) stopDone(force bool) bool {
	inc := n.stopping
	if inc == nil {
		return true
	}
	select {
	case <-inc.done:
	default:
		if !force {
			return false
		}
	}
	inc.dead.Store(true)
	inc.fsOff.On()
	inc.stack.Kill()
	n.stopping = nil
	n.c.mu.Lock()
	n.c.zombies = append(n.c.zombies, inc)
	n.c.mu.Unlock()
	return true
}

// setRate sets the node's clock rate (its running process's too).
func (n *simNode) setRate(r float64) {
	n.rate = r
	if n.inc != nil {
		n.inc.clock.setRate(r)
	}
}

// note records something the report shows that is not a violation.
func (c *cluster) note(format string, args ...any) {
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
}

// reap forgets an incarnation that exited on its own.
func (n *simNode) reap() {
	inc := n.inc
	inc.dead.Store(true)
	inc.fsOff.On()
	inc.stack.Kill()
	n.inc = nil
	n.live.Store(nil)
	n.c.mu.Lock()
	n.c.zombies = append(n.c.zombies, inc)
	n.c.mu.Unlock()
}

// newDisk replaces the node's disk by an empty one.
func (n *simNode) newDisk() {
	n.c.snapEnds()
	n.c.diskLost[n.idx] = append(n.c.diskLost[n.idx], time.Now())
	n.mem = vfs.NewMem()
	n.boot++
}

// broker is the node's running generation, or nil.
func (n *simNode) broker() *broker.Broker {
	if n.inc == nil {
		return nil
	}
	return n.inc.n.Broker()
}

func (n *simNode) role() string {
	if bn := n.live.Load(); bn != nil {
		return bn.Role()
	}
	return ""
}

// exited reports whether the running incarnation's Run returned (a
// failed start) and with what.
func (n *simNode) exited() (bool, error) {
	if n.inc == nil {
		return false, nil
	}
	select {
	case <-n.inc.done:
		return true, n.inc.err
	default:
		return false, nil
	}
}

// waitZombies waits for every killed incarnation to wind down.
func (c *cluster) waitZombies(d time.Duration) error {
	c.mu.Lock()
	zs := c.zombies
	c.zombies = nil
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	for i, z := range zs {
		select {
		case <-z.done:
		case <-t.C:
			return fmt.Errorf("%d of %d dead processes still running after %v", len(zs)-i, len(zs), d)
		}
	}
	for _, n := range c.nodes {
		n.link.late.Wait()
	}
	return nil
}

// errProcessDead is what a dead process's disk calls return.
var errProcessDead = errors.New("simtest: the process is dead")

// discardLogger drops every record before it is formatted.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
