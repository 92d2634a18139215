package simtest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// finalState is what the checker compares the run with: the simulated
// topic as the healed cluster's master serves it, and the bytes every
// node set aside under diverged/.
type finalState struct {
	log      map[qkey]string
	sync     bool
	bucket   bool // every topic bucket-durable: no acknowledgement may be lost
	diverged []byte
	diskLost map[int][]time.Time // per node: power losses and disk swaps
	life     map[int][]lifeEvent // per node: process starts and ends
	snaps    []lossSnap          // the nodes' log ends at each loss
	// phys is where each acknowledged body's record starts in the
	// commitlog (from SEND_OK's msgId), when the workload knows it.
	phys  map[string]int64
	start time.Time // the workload's start (ack times are since it)
	nodes int

	known     []string    // violation kinds of open bugs (Options.KnownOpen)
	m         *simNode    // the healed master (workloads read their topics from it)
	steps     []Step      // the schedule's faults (nearFault)
	takeovers []time.Time // when master generations started (nearFault)
	ckpt, ttl time.Duration
}

// lostAsync reports whether an async_master acknowledgement of body by
// node at at (since the workload started) may be lost: it is kept in some
// node's diverged/ (a failover cut it), or the node lost its unsynced
// bytes after it (flush=async: a power loss loses the flush interval).
// A sync_master one only when every node lost its disk (everyDiskLost).
// Counted, not a violation.
func (f *finalState) lostAsync(body string, node int, at time.Duration) bool {
	if f.bucket {
		return false // answered once the bucket held it
	}
	if f.sync {
		if phys, ok := f.phys[body]; ok {
			return f.everyHolderLost(at, phys)
		}
		return f.everyDiskLost(at)
	}
	if bytes.Contains(f.diverged, []byte(body)) {
		return true
	}
	for _, t := range f.diskLost[node] {
		if t.After(f.start.Add(at)) {
			return true
		}
	}
	return false
}

// everyDiskLost reports whether every copy that may have held what was
// acknowledged at at is gone: each node up then lost its unsynced bytes
// or its disk after at, and each node down then either did too or stayed
// down until the last of those losses (it never had the bytes, and had
// nobody to copy them from). As many faults as copies, which even
// sync_master does not survive (a machine loss loses what was not
// uploaded).
func (f *finalState) everyDiskLost(at time.Duration) bool {
	a := f.start.Add(at)
	firstLoss := func(i int) (time.Time, bool) {
		for _, t := range f.diskLost[i] {
			if t.After(a) {
				return t, true
			}
		}
		return time.Time{}, false
	}
	last := a
	for i := range f.nodes {
		if !f.upAt(i, a) {
			continue
		}
		t, ok := firstLoss(i)
		if !ok {
			return false
		}
		last = maxTime(last, t)
	}
	for i := range f.nodes {
		if f.upAt(i, a) {
			continue
		}
		if _, ok := firstLoss(i); ok {
			continue
		}
		for _, e := range f.life[i] {
			if e.up && e.at.After(a) && !e.at.After(last) {
				return false // started before the last copy was lost
			}
		}
	}
	return true
}

// everyHolderLost is everyDiskLost for a record known to start at phys:
// every node that did not lose its disk (or unsynced bytes) after at
// never held the record while a copy lived: at each loss from at to the
// last one its log ended at or before phys. A node up but not yet
// following (a slave still restoring) held nothing to lose.
func (f *finalState) everyHolderLost(at time.Duration, phys int64) bool {
	a := f.start.Add(at)
	last, lost := a, map[int]bool{}
	for i := range f.nodes {
		for _, t := range f.diskLost[i] {
			if t.After(a) {
				lost[i], last = true, maxTime(last, t)
				break
			}
		}
	}
	if len(lost) == 0 {
		return false
	}
	for i := range f.nodes {
		if lost[i] {
			continue
		}
		for _, s := range f.snaps {
			if s.at.Before(a) || s.at.After(last) {
				continue
			}
			if i >= len(s.ends) || s.ends[i] > phys {
				return false
			}
		}
		// Started after the last copy was lost: nothing to copy from.
	}
	return true
}

// upAt reports whether node i's process was running at t (a node with no
// recorded start counts as up: the strict reading).
func (f *finalState) upAt(i int, t time.Time) bool {
	up := true
	for _, e := range f.life[i] {
		if e.at.After(t) {
			break
		}
		up = e.up
	}
	return up
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Check: (1) every SEND_OK is readable at its queue offset with its body
// (async_master: or kept in diverged/); (2) no queue offset was
// acknowledged or seen by consumers with two different bodies, and what
// consumers saw is what the final log holds.
func (q *queueWorkload) Check(f *finalState) []Violation {
	q.mu.Lock()
	defer q.mu.Unlock()
	if f.phys == nil {
		f.phys = map[string]int64{}
	}
	for body, phys := range q.seenPhys {
		f.phys[body] = phys
	}
	for _, a := range q.acks {
		if a.phys >= 0 {
			f.phys[a.body] = a.phys
		}
	}
	var out []Violation
	add := func(kind, format string, args ...any) {
		if len(out) < 20 {
			out = append(out, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)})
		}
	}
	// A message whose acknowledgement may be lost (below) may vanish from
	// what consumers saw too.
	ackedBy := map[string]ack{}
	for _, a := range q.acks {
		ackedBy[a.body] = a
	}
	lostSeen := func(s seen) bool {
		a, ok := ackedBy[s.body]
		return f.lostAsync(s.body, s.node, s.at) || ok && f.lostAsync(a.body, a.node, a.at)
	}
	// async_master: an offset named twice, the first body kept in
	// diverged/, is an async loss (the new master never had it), counted
	// with the losses below.
	for _, c := range q.clash {
		if !lostSeen(c.first) {
			add("offset-reused", "consumers saw %s/%s as %q (n%d at %v) and later as %q (n%d at %v)", q.topic, c.key,
				c.first.body, c.first.node, c.first.at.Round(time.Millisecond), c.second.body, c.second.node, c.second.at.Round(time.Millisecond))
		}
	}
	byKey := map[qkey]ack{}
	for _, a := range q.acks {
		if b, ok := byKey[a.key]; ok && b.body != a.body && !f.lostAsync(b.body, b.node, b.at) {
			add("offset-reused", "%s/%s acknowledged as %q (n%d at %v) and as %q (n%d at %v)", q.topic, a.key,
				b.body, b.node, b.at.Round(time.Millisecond), a.body, a.node, a.at.Round(time.Millisecond))
		}
		byKey[a.key] = a
	}
	asyncLost := 0
	for _, a := range q.acks {
		got, ok := f.log[a.key]
		switch {
		case ok && got == a.body:
		case f.lostAsync(a.body, a.node, a.at):
			asyncLost++
		case !ok:
			add("ack-lost", "%q acknowledged at %s/%s by n%d at %v is not in the final log", a.body, q.topic, a.key, a.node, a.at.Round(time.Millisecond))
		default:
			add("ack-lost", "%q acknowledged at %s/%s by n%d at %v: the final log holds %q there", a.body, q.topic, a.key, a.node, a.at.Round(time.Millisecond), got)
		}
	}
	q.asyncLost = asyncLost
	keys := make([]qkey, 0, len(q.seen))
	for k := range q.seen {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].queue != keys[j].queue {
			return keys[i].queue < keys[j].queue
		}
		return keys[i].off < keys[j].off
	})
	for _, k := range keys {
		s := q.seen[k]
		got, ok := f.log[k]
		switch {
		case ok && got == s.body:
		case lostSeen(s):
		case !ok:
			add("seen-vanished", "consumers saw %q at %s/%s (n%d at %v); the final log has no such offset", s.body, q.topic, k, s.node, s.at.Round(time.Millisecond))
		default:
			add("offset-reused", "consumers saw %q at %s/%s (n%d at %v); the final log holds %q there", s.body, q.topic, k, s.node, s.at.Round(time.Millisecond), got)
		}
	}
	return out
}

// checkAcks is check 1 against another reading of the log (after a
// restart, or from a fresh disk), async losses already counted skipped.
func (q *queueWorkload) checkAcks(kind string, log map[qkey]string, f *finalState) []Violation {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []Violation
	for _, a := range q.acks {
		if got := log[a.key]; got != a.body && !f.lostAsync(a.body, a.node, a.at) {
			out = append(out, Violation{Kind: kind, Detail: fmt.Sprintf("%q acknowledged at %s/%s: now %q", a.body, q.topic, a.key, got)})
			if len(out) >= 10 {
				break
			}
		}
	}
	return out
}

// finalChecks runs after the cluster healed: probe sends, the log
// checks, then (check 4) every node restarts on its disk and a fresh node
// restores from the bucket alone, and both read every acknowledged
// message. Check 3 (every listed object readable) is covered by the
// fresh node: it reads the whole log through the cold reader.
func (c *cluster) finalChecks(w *world, wl *queueWorkload, workloads []Workload, res *Result) {
	m := c.master()
	cl := w.newClient()
	for i := range 5 {
		body := fmt.Sprintf("probe-%02d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := cl.Invoke(ctx, m.cfg.Listen, sendReq(wl.topic, i%wl.queues, []byte(body)))
		cancel()
		if err != nil || resp.Code != int32(remoting.Success) {
			res.violate("no-service", "probe send to the healed master n%d: %v %v", m.idx, err, resp)
			continue
		}
		off, _ := strconv.ParseInt(resp.ExtFields["queueOffset"], 10, 64)
		qid, _ := strconv.Atoi(resp.ExtFields["queueId"])
		wl.record(ack{key: qkey{qid, off}, body: body, node: m.idx, at: wl.since(), phys: physOf(resp.ExtFields["msgId"])})
	}
	cl.Close()
	if err := c.waitHealthy(time.Minute); err != nil {
		res.violate("no-recovery", "after the probes: %v", err)
		return
	}
	f := &finalState{sync: c.opt.Sync, bucket: c.opt.Bucket, diverged: c.divergedBytes(), diskLost: c.diskLost, life: c.life, snaps: c.snaps, start: wl.start,
		nodes: len(c.nodes), m: m, steps: res.Schedule.Steps, takeovers: c.takeoverTimes(), ckpt: c.nodes[0].cfg.CheckpointInterval, ttl: c.opt.LeaseTTL, known: c.opt.KnownOpen}
	// Violations of known-open kinds are set aside, so that the restart
	// checks still run.
	split := func() {
		var keep []Violation
		for _, v := range res.Violations {
			if f.open(v.Kind) {
				res.Known = append(res.Known, v)
			} else {
				keep = append(keep, v)
			}
		}
		res.Violations = keep
	}
	defer split()
	// Where the other workloads' acknowledged records start (lostAsync's
	// finer model for sync_master).
	f.phys = map[string]int64{}
	for _, wk := range workloads {
		if p, ok := wk.(interface{ physs(map[string]int64) }); ok {
			p.physs(f.phys)
		}
	}
	// The other workloads' consumers go on until what they wait for came
	// (delayed messages due, transactions checked, retries delivered, POP
	// messages acked), or their deadline: no more faults now.
	var swg sync.WaitGroup
	for _, wk := range workloads {
		if s, ok := wk.(settler); ok {
			swg.Go(func() { s.Settle(w, f) })
		}
	}
	swg.Wait()
	if err := c.waitHealthy(time.Minute); err != nil {
		res.violate("no-recovery", "after the workloads settled: %v", err)
		return
	}
	if m = c.master(); m != f.m {
		res.violate("no-recovery", "the master moved from n%d to n%d while the workloads settled, with no fault", f.m.idx, m.idx)
		return
	}
	log, err := w.readLog(m, wl.topic, wl.queues)
	if err != nil {
		res.violate("unreadable", "the healed master: %v", err)
	}
	f.log = log
	for _, wk := range workloads {
		res.Violations = append(res.Violations, wk.Check(f)...)
	}
	split()
	res.AsyncLost = wl.asyncLost
	res.Acks = len(wl.acks)
	for _, wk := range workloads {
		if s, ok := wk.(summarizer); ok {
			res.Workloads = append(res.Workloads, s.Summary())
		}
	}
	// What the healed master holds of the other workloads' topics (delayed
	// messages delivered, commits, retries, dead letters) must be there
	// after every restart and on a fresh disk too.
	held := map[tq][]rec{}
	for _, wk := range workloads {
		if t, ok := wk.(topicser); ok {
			for _, q := range t.topics() {
				held[q], _ = readQueue(m, q.topic, q.queue)
			}
		}
	}
	if c.opt.NoRestartCheck || len(res.Violations) > 0 {
		return
	}

	// Check 4a: every node stops cleanly (slaves first) and restarts on
	// its own disk.
	for _, n := range c.nodes {
		if n != m {
			_ = n.stop()
		}
	}
	if err := m.stop(); err != nil {
		res.violate("unclean-stop", "the master n%d: %v", m.idx, err)
	}
	// The master first: slaves started with it could take the lease it
	// released (a promotion: the failover faults cover that).
	m.start()
	for deadline := time.Now().Add(time.Minute); c.master() == nil && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range c.nodes {
		if n != m {
			n.start()
		}
	}
	if err := c.waitHealthy(2 * time.Minute); err != nil {
		res.violate("no-restart", "every node restarted on its disk: %v", err)
		return
	}
	m = c.master()
	log2, err := w.readLog(m, wl.topic, wl.queues)
	if err != nil {
		res.violate("unreadable", "after a restart on the same disks: %v", err)
	}
	res.Violations = append(res.Violations, wl.checkAcks("lost-on-restart", log2, f)...)
	res.Violations = append(res.Violations, checkHeld("lost-on-restart", m, held)...)
	for _, n := range c.nodes {
		if n != m {
			_ = n.stop()
		}
	}
	if err := m.stop(); err != nil {
		res.violate("unclean-stop", "the master n%d after the restart: %v", m.idx, err)
	}

	// Check 4b: a fresh node on an empty disk restores from the bucket.
	fresh := &simNode{c: c, idx: len(c.nodes), ip: "10.0.0.9", host: c.net.Host("10.0.0.9"), link: &bucketLink{}}
	fresh.newDisk()
	fresh.cfg = c.nodes[0].cfg
	fresh.cfg.Listen, fresh.cfg.HAListen = fresh.ip+":10911", fresh.ip+":10912"
	fresh.cfg.Role = broker.RoleAsyncMaster // alone: a sync_master would refuse sends without a slave
	fresh.start()
	deadline := time.Now().Add(time.Minute)
	for fresh.role() != broker.RoleAsyncMaster {
		if done, err := fresh.exited(); done {
			res.violate("no-restore", "a fresh node on an empty disk did not start: %v", err)
			return
		}
		if !time.Now().Before(deadline) {
			res.violate("no-restore", "a fresh node on an empty disk is not master after a minute (role %q)", fresh.role())
			fresh.kill(false, nil)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	log3, err := w.readLog(fresh, wl.topic, wl.queues)
	if err != nil {
		res.violate("unreadable", "a fresh node restored from the bucket: %v", err)
	}
	res.Violations = append(res.Violations, wl.checkAcks("lost-on-restore", log3, f)...)
	res.Violations = append(res.Violations, checkHeld("lost-on-restore", fresh, held)...)
	if err := fresh.stop(); err != nil {
		res.violate("unclean-stop", "the fresh node: %v", err)
	}
}

// settler is a workload whose consumers go on after the heal until what
// they wait for came (Settle returns then, or at its own deadline).
type settler interface {
	Settle(w *world, f *finalState)
}

// summarizer is a workload that says what it did, for the report.
type summarizer interface {
	Summary() string
}

// topicser is a workload whose topics the restart checks compare: every
// record the healed master held must be at its queue offset, with its
// body, after every node restarted on its disk and on a fresh disk.
type topicser interface {
	topics() []tq
}

// checkHeld compares what n holds of each queue with held.
func checkHeld(kind string, n *simNode, held map[tq][]rec) []Violation {
	var out violations
	qs := make([]tq, 0, len(held))
	for q := range held {
		qs = append(qs, q)
	}
	sort.Slice(qs, func(i, j int) bool {
		return qs[i].topic < qs[j].topic || qs[i].topic == qs[j].topic && qs[i].queue < qs[j].queue
	})
	for _, q := range qs {
		rs, err := readQueue(n, q.topic, q.queue)
		if err != nil {
			out.add("unreadable", "%s/%d on n%d: %v", q.topic, q.queue, n.idx, err)
			continue
		}
		now := map[int64]string{}
		for _, r := range rs {
			now[r.qoff] = r.body
		}
		for _, r := range held[q] {
			if got, ok := now[r.qoff]; !ok || got != r.body {
				out.add(kind, "%s/%d offset %d held %q on the healed master; n%d has %q there", q.topic, q.queue, r.qoff, r.body, n.idx, got)
			}
		}
	}
	return out
}

// open reports whether violations of kind are of a known-open bug.
func (f *finalState) open(kind string) bool { return slices.Contains(f.known, kind) }
