package simtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// Options are the cluster's settings shared by every schedule.
type Options struct {
	Nodes         int           // set from the schedule
	Sync          bool          // set from the schedule
	Masters       int           // set from the schedule (0 counts as 1)
	Bucket        bool          // set from the schedule
	LeaseTTL      time.Duration // default 2 s
	SegmentMaxAge time.Duration // default 3 s: the master seals by age, a slave never does
	Queues        int           // default 2
	Producers     int           // default 2
	// Logger receives the brokers' logs (default: discarded).
	Logger *slog.Logger
	// FakeAck: the self-test's broken workload, which records an ack no
	// broker gave; the checker must catch it.
	FakeAck bool
	// NoRestartCheck skips check 4's restarts (every node on its disk, a
	// fresh one on an empty disk).
	NoRestartCheck bool
	// Workloads names the workloads beside the queue one (delay, tx,
	// retry, pop; "none" for none); empty: the seed draws them
	// (drawWorkloads, workload.go).
	Workloads []string
	// KnownOpen are violation kinds of bugs still open (knownOpen in
	// sim_test.go): reported in Result.Known, not as violations, and the
	// workloads' settle phases do not wait for what they hold up.
	KnownOpen []string
	// TxCheckInterval is STRATAMQ_TRANSACTION_CHECK_INTERVAL (default 2 s:
	// the broker's 60 s would never check during a schedule of seconds).
	TxCheckInterval time.Duration
}

func (o Options) withDefaults() Options {
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 2 * time.Second
	}
	if o.SegmentMaxAge <= 0 {
		o.SegmentMaxAge = 3 * time.Second
	}
	if o.Queues <= 0 {
		o.Queues = 2
	}
	if o.Producers <= 0 {
		o.Producers = 2
	}
	if o.Logger == nil {
		o.Logger = discardLogger()
	}
	if o.TxCheckInterval <= 0 {
		o.TxCheckInterval = 2 * time.Second
	}
	return o
}

// Violation is one broken invariant.
type Violation struct {
	Kind   string
	Detail string
}

func (v Violation) String() string { return v.Kind + ": " + v.Detail }

// Result is what one schedule did.
type Result struct {
	Schedule   *Schedule
	Violations []Violation
	Acks       int // SEND_OKs recorded
	Sends      int // send attempts
	AsyncLost  int // async_master acks found only in a diverged/ directory
	Applied    []string
	Skipped    int           // steps not applicable when their time came (node down or busy)
	Notes      []string      // processes that exited on their own during the heal and were restarted; ranges reads skipped
	LateLanded int           // bucket writes that landed late (LateWrite)
	Virtual    time.Duration // virtual time the schedule took
	Workloads  []string      // what each workload did (names, then summaries after the checks)
	Known      []Violation   // violations of the kinds Options.KnownOpen names
}

func (r *Result) violate(kind, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)})
}

// Run runs the schedule over a fresh cluster and checks it. It must run
// inside a testing/synctest bubble (RunSeed does that) so that time is
// virtual; outside one it runs in real time.
func Run(s *Schedule, opt Options) *Result {
	opt.Nodes, opt.Sync, opt.Masters, opt.Bucket = s.Nodes, s.Sync, s.Masters, s.Bucket
	opt = opt.withDefaults()
	res := &Result{Schedule: s}
	t0 := time.Now()
	c := newCluster(opt, opt.Logger)
	w := &world{c: c, client: c.net.Host("10.0.9.1").NewStack()}
	wl := newQueueWorkload(opt.Queues, opt.Producers)
	wl.fakeAck = opt.FakeAck
	workloads := append([]Workload{wl}, drawWorkloads(s.Seed, opt.Workloads)...)
	for _, wk := range workloads[1:] {
		res.Workloads = append(res.Workloads, wk.Name())
	}

	// The configured master first, then its slaves: a failover slave
	// started with it can take the never-written lease first and run the
	// brokerName as async_master whatever the master's role (a finding of
	// this simulator, see the package doc); the schedule's mode must hold.
	c.nodes[0].start()
	for deadline := time.Now().Add(30 * time.Second); c.nodes[0].role() != c.nodes[0].cfg.Role && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for _, n := range c.nodes[1:] {
		n.start()
	}
	if err := c.waitHealthy(60 * time.Second); err != nil {
		res.violate("no-start", "the cluster did not come up before any fault: %v", err)
		c.shutdown(res)
		return res
	}
	wctx, wcancel := context.WithCancel(context.Background())
	var wwg sync.WaitGroup
	for _, wk := range workloads {
		wwg.Go(func() { wk.Run(wctx, w) })
	}
	x := &executor{c: c, w: w, res: res, rng: rand.New(rand.NewPCG(s.Seed, 7))}
	x.run(s)

	// Heal: every fault ends, every node runs, one master with its slaves
	// in sync.
	x.healAll()
	// The workload runs on through the heal for a lease TTL, then stops:
	// the checks need a quiet log, and a cluster that does not recover
	// would otherwise produce for the whole wait.
	time.Sleep(opt.LeaseTTL)
	wcancel()
	wwg.Wait()
	if err := c.waitHealthy(2 * time.Minute); err != nil {
		res.violate("no-recovery", "after healing: %v", err)
	}
	for _, wk := range workloads {
		if q, ok := wk.(*queueWorkload); ok {
			res.Acks, res.Sends = len(q.acks), q.sends
		}
	}
	if len(res.Violations) == 0 {
		c.finalChecks(w, wl, workloads, res)
	}
	for _, wk := range workloads {
		if s, ok := wk.(interface{ stop() }); ok {
			s.stop() // clients that outlive Run (a producer answering transaction checks)
		}
	}
	c.shutdown(res)
	for _, b := range c.backstops {
		// The last line of defence fired: the code before it handed this
		// data dir a log that ends below what the bucket holds (recovery
		// should have restored the rest); the node cannot start on it
		// without an operator.
		res.violate("backstop", "%s", b)
	}
	res.Notes = c.notes
	for _, n := range c.nodes {
		res.LateLanded += int(n.link.lateN.Load())
	}
	res.Virtual = time.Since(t0)
	return res
}

// executor applies a schedule's steps at their times, and the heals and
// restarts they imply.
type executor struct {
	c     *cluster
	w     *world
	res   *Result
	rng   *rand.Rand
	evs   []event
	wg    sync.WaitGroup // admin requests in flight
	start time.Time
}

type event struct {
	at time.Duration
	fn func()
}

func (x *executor) at(d time.Duration, fn func()) {
	x.evs = append(x.evs, event{d, fn})
}

func (x *executor) run(s *Schedule) {
	x.start = time.Now()
	start := x.start
	for _, st := range s.Steps {
		x.at(st.At, func() { x.apply(st, time.Since(start)) })
	}
	end := time.Duration(0)
	if len(s.Steps) > 0 {
		end = s.Steps[len(s.Steps)-1].At
	}
	end += s.Tail
	for {
		sort.SliceStable(x.evs, func(i, j int) bool { return x.evs[i].at < x.evs[j].at })
		if len(x.evs) == 0 || x.evs[0].at > end {
			break
		}
		ev := x.evs[0]
		x.evs = x.evs[1:]
		if d := ev.at - time.Since(start); d > 0 {
			time.Sleep(d)
		}
		ev.fn()
	}
	if d := end - time.Since(start); d > 0 {
		time.Sleep(d)
	}
	x.evs = nil // heals and restarts still due: healAll does them
	x.wg.Wait()
}

// apply applies one step at now (since the schedule started).
func (x *executor) apply(st Step, now time.Duration) {
	c := x.c
	n := c.nodes[st.Node]
	down := n.inc == nil || n.stopping != nil
	skip := func() { x.res.Skipped++ }
	switch st.Fault {
	case Crash, PowerLoss, PowerLossTorn, EmptyDisk:
		if down {
			skip()
			return
		}
		var rng *rand.Rand
		if st.Fault == PowerLossTorn {
			rng = x.rng
		}
		n.kill(st.Fault != Crash && st.Fault != EmptyDisk, rng)
		if st.Fault == EmptyDisk {
			n.newDisk()
		}
		x.at(now+st.Dur, func() { x.restart(n) })
	case CleanStop:
		if down {
			skip()
			return
		}
		n.beginStop()
		x.at(now+st.Dur, func() { x.restart(n) })
	case BucketCut:
		n.link.down.Store(true)
		x.at(now+st.Dur, func() { n.link.down.Store(false) })
	case FlakyBucket:
		n.link.flaky.Store(true)
		x.at(now+st.Dur, func() { n.link.flaky.Store(false) })
	case LateWrite:
		n.link.holdNext.Store(int64(st.Dur))
	case ClockSkew:
		n.setRate(st.Rate)
		x.at(now+st.Dur, func() { n.setRate(1) })
	case NetCut:
		c.net.Cut(n.ip, c.nodes[st.Peer].ip, true)
		x.at(now+st.Dur, func() { c.net.Cut(n.ip, c.nodes[st.Peer].ip, false) })
	case Promote, Demote:
		if down {
			skip()
			return
		}
		code := remoting.PromoteBroker
		if st.Fault == Demote {
			code = remoting.DemoteBroker
		}
		x.wg.Go(func() {
			cl := x.w.newClient()
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = cl.Invoke(ctx, n.cfg.Listen, remoting.NewRequest(code, nil, nil))
		})
	}
	x.res.Applied = append(x.res.Applied, st.String())
}

// restart starts the node again once its last incarnation stopped.
func (x *executor) restart(n *simNode) {
	if n.inc != nil {
		return // already running (restarted by an earlier event)
	}
	if n.stopping != nil && !n.stopDone(false) {
		x.at(x.now()+100*time.Millisecond, func() { x.restart(n) })
		return
	}
	n.start()
}

func (x *executor) now() time.Duration { return time.Since(x.start) }

// healAll ends every fault and starts every node that is down.
func (x *executor) healAll() {
	c := x.c
	c.net.HealAll()
	for _, n := range c.nodes {
		n.link.down.Store(false)
		n.link.flaky.Store(false)
		n.link.holdNext.Store(0)
	}
	for _, n := range c.nodes {
		if n.stopping != nil {
			n.stopDone(true)
		}
		if n.inc == nil {
			n.start()
		}
	}
}

// takeoverTimes is when master generations started.
func (c *cluster) takeoverTimes() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.takeovers...)
}

// backstopMsg is how broker.New's last check refuses a data dir whose log
// ends below what the bucket holds.
const backstopMsg = "refusing to write: the local commitlog ends at offset"

// waitHealthy waits until one running node is master, every other one
// its slave, and the master sees every slave caught up. A node whose
// process exited is started again, as a supervisor would, up to
// maxRestarts times per wait.
func (c *cluster) waitHealthy(d time.Duration) error {
	const maxRestarts = 3
	deadline := time.Now().Add(d)
	restarts := map[int]int{}
	for {
		for _, n := range c.nodes {
			if done, err := n.exited(); done && restarts[n.idx] < maxRestarts {
				restarts[n.idx]++
				c.note("n%d exited (%v) and was restarted", n.idx, err)
				if err != nil && strings.Contains(err.Error(), backstopMsg) {
					c.backstops = append(c.backstops, fmt.Sprintf("n%d: %v", n.idx, err))
				}
				n.reap()
				n.start()
			}
		}
		state, err := c.healthy()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%v (after %v: %s)", err, d, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cluster) healthy() (string, error) {
	var st []string
	masters := 0
	var master *simNode
	var failed error
	for _, n := range c.nodes {
		if done, err := n.exited(); done {
			st = append(st, fmt.Sprintf("n%d exited: %v", n.idx, err))
			failed = fmt.Errorf("node n%d stopped: %v", n.idx, err)
			continue
		}
		r := n.role()
		st = append(st, fmt.Sprintf("n%d %s", n.idx, r))
		switch r {
		case broker.RoleSyncMaster, broker.RoleAsyncMaster:
			masters++
			master = n
		case "":
			return strings.Join(st, ", "), errors.New("a node is between generations")
		}
	}
	if failed != nil {
		return strings.Join(st, ", "), failed
	}
	if masters != 1 {
		return strings.Join(st, ", "), fmt.Errorf("%d masters", masters)
	}
	b := master.broker()
	conn, caught := b.HASlaves()
	st = append(st, fmt.Sprintf("master n%d epoch %d sees %d slaves, %d caught up", master.idx, b.Epoch(), conn, caught))
	if caught < len(c.nodes)-1 {
		return strings.Join(st, ", "), errors.New("slaves not in sync")
	}
	return strings.Join(st, ", "), nil
}

// master is the running master node, or nil.
func (c *cluster) master() *simNode {
	for _, n := range c.nodes {
		if r := n.role(); r == broker.RoleSyncMaster || r == broker.RoleAsyncMaster {
			return n
		}
	}
	return nil
}

// shutdown stops every node and waits for every process to end.
func (c *cluster) shutdown(res *Result) {
	for _, n := range c.nodes {
		if n.stopping != nil {
			n.stopDone(true)
		}
		if n.inc != nil {
			n.kill(false, nil)
		}
	}
	if err := c.waitZombies(5 * time.Minute); err != nil {
		res.violate("hang", "%v", err)
	}
}

// divergedBytes is every node's diverged/ files, concatenated.
func (c *cluster) divergedBytes() []byte {
	var out []byte
	readDir := func(n *simNode, dir string) {
		names, err := n.mem.ReadDir(dir)
		if err != nil {
			return
		}
		for _, name := range names {
			f, err := n.mem.OpenFile(path.Join(dir, name), 0, 0)
			if err != nil {
				continue
			}
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(f)
			f.Close()
			out = append(out, buf.Bytes()...)
		}
	}
	for _, n := range c.nodes {
		readDir(n, path.Join(n.cfg.DataDir, "diverged"))
		// A data dir set aside (store.stale-<time>) keeps its log too.
		names, err := n.mem.ReadDir(n.cfg.DataDir)
		if err != nil {
			continue
		}
		for _, name := range names {
			if strings.HasPrefix(name, "store.stale-") {
				readDir(n, path.Join(n.cfg.DataDir, name, "commitlog"))
			}
		}
	}
	return out
}

// readLog reads the whole simulated topic from the node's broker.
func (w *world) readLog(n *simNode, topic string, queues int) (map[qkey]string, error) {
	b := n.broker()
	if b == nil {
		return nil, fmt.Errorf("n%d is not running", n.idx)
	}
	cl := w.newClient()
	defer cl.Close()
	out := map[qkey]string{}
	for q := range queues {
		max := b.Store().MaxQueueOffset(topic, int32(q))
		for off := int64(0); off < max; {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, err := cl.Invoke(ctx, n.cfg.Listen, pullReq(topic, q, off))
			cancel()
			if err != nil {
				return out, fmt.Errorf("pull %s/%d at %d from n%d: %w", topic, q, off, n.idx, err)
			}
			if resp.Code != int32(remoting.Success) {
				err := fmt.Errorf("pull %s/%d at %d from n%d (queue end %d): %s %s", topic, q, off, n.idx, max,
					remoting.ResponseCode(resp.Code), resp.Remark)
				// A range the broker says is gone (nextBeginOffset further
				// on) is noted and skipped: the message checks judge
				// whether anything in it had to be there.
				if next, _ := strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64); next > off {
					w.c.note("%v; read on from %d", err, next)
					off = next
					continue
				}
				return out, err
			}
			offs, _, bodies := decodeRecords(resp.Body)
			for i, o := range offs {
				out[qkey{q, o}] = bodies[i]
			}
			next, _ := strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64)
			if next <= off {
				return out, fmt.Errorf("pull %s/%d at %d from n%d did not advance", topic, q, off, n.idx)
			}
			off = next
		}
	}
	return out, nil
}
