package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Ports: every host has an address of its own, so the defaults' ports.
const (
	chaosS3Port    = 7070
	chaosNSPort    = 9876
	chaosBrokPort  = 10911
	chaosHAPort    = 10912
	chaosHTTPPort  = 5557
	chaosQueues    = 4
	chaosLeaseTTL  = 3 * time.Second
	chaosSettleBy  = 2 * time.Minute // heal → settled, at most
	chaosPerRound  = 30              // SEND_OKs from the settled cluster each round
	chaosAcksBy    = time.Minute     // settled → chaosPerRound more SEND_OKs, at most
	chaosBogusMAC  = "02:00:00:5e:00:01"
	chaosLogTailLn = 40
)

// chaosProc is one process of the run, started in a host's namespace.
type chaosProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// chaosNode is a broker: its env (data dir, addresses) stays across
// restarts.
type chaosNode struct {
	name    string
	env     map[string]string
	proc    *chaosProc
	paused  bool // SIGSTOP'd
	killed  bool // kill -9'd, not restarted yet
	starts  int
	logPath string
}

func (n *chaosNode) addr() string { return n.env["STRATAMQ_LISTEN"] }
func (n *chaosNode) ip() string   { h, _, _ := net.SplitHostPort(n.addr()); return h }

// chaosAck is a SEND_OK.
type chaosAck struct {
	id    int
	queue int
	off   int64
	msgID string // the SEND_OK's offset msg id
	body  string
	round int
}

// chaosRecord is what the clients saw: every send's outcome and every
// delivery to the consumer.
type chaosRecord struct {
	mu        sync.Mutex
	acks      []chaosAck
	sent      int
	notOK     map[string]int
	seen      map[[2]int64]string // (queue, offset) → body delivered there (first seen)
	seenTwice map[[2]int64][2]string
	deliver   map[string]int // body → deliveries
	round     int
}

// chaosFault is one fault of a round's schedule. target is relative to
// the roles when the round starts: 0 is the routed master, 1 and 2 the
// other nodes by name (so a replay with the same seed targets the same
// roles), peer the same for node-node cuts.
type chaosFault struct {
	kind   string        // kill9, pause, isolate, cut-bucket, cut-node, cut-clients
	target int           // 0: the master, 1, 2: the others
	peer   int           // cut-node: the other end
	at     time.Duration // after the round's start
}

// chaosRoundPlan is a round's schedule, drawn from the seed.
type chaosRoundPlan struct {
	faults   []chaosFault
	hold     time.Duration   // from the last fault to the first heal
	healGaps []time.Duration // before each heal step but the first
	restart  []bool          // per fault: a kill9 restarts before the others heal
}

// chaosDrawRound draws a round: one fault, or (unless single) two or
// three at once now and then (3 rounds in 10).
func chaosDrawRound(rng *rand.Rand, single bool) chaosRoundPlan {
	kinds := []string{"kill9", "pause", "isolate", "cut-bucket", "cut-node", "cut-clients"}
	n := 1
	if x := rng.IntN(10); x >= 7 && !single {
		n = 2
		if x == 9 {
			n = 3
		}
	}
	var p chaosRoundPlan
	var at time.Duration
	for range n {
		f := chaosFault{kind: kinds[rng.IntN(len(kinds))], at: at}
		// The master is the most interesting target: half of the faults.
		if rng.IntN(2) == 0 {
			f.target = 0
		} else {
			f.target = 1 + rng.IntN(2)
		}
		f.peer = (f.target + 1 + rng.IntN(2)) % 3
		p.faults = append(p.faults, f)
		p.restart = append(p.restart, rng.IntN(3) == 0)
		at += time.Duration(rng.Int64N(int64(2 * chaosLeaseTTL)))
	}
	// Hold from under a TTL (the lease survives) to three TTLs (it lapses).
	p.hold = chaosLeaseTTL/2 + time.Duration(rng.Int64N(int64(5*chaosLeaseTTL/2)))
	for range n {
		p.healGaps = append(p.healGaps, time.Duration(rng.Int64N(int64(1500*time.Millisecond))))
	}
	return p
}

func (f chaosFault) String() string {
	role := func(i int) string {
		if i == 0 {
			return "master"
		}
		return "other" + strconv.Itoa(i)
	}
	if f.kind == "cut-node" {
		return fmt.Sprintf("%s(%s,%s)@%v", f.kind, role(f.target), role(f.peer), f.at.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s(%s)@%v", f.kind, role(f.target), f.at.Round(time.Millisecond))
}

// chaosRun is the run inside the clients' namespace.
type chaosRun struct {
	t       *testing.T
	cfg     chaosConfig
	rng     *rand.Rand
	logDir  string
	s3dir   string
	began   time.Time
	nsAddr  string
	nodes   []*chaosNode
	topic   string
	rec     *chaosRecord
	prodMu  sync.Mutex
	prod    rocketmq.Producer
	old     []rocketmq.Producer
	nextID  int
	stop    chan struct{}
	wg      sync.WaitGroup
	faults  map[string]int  // kind → count
	history []string        // per round: its schedule and outcome
	settles []time.Duration // per round: first heal step → settled
	moves   int             // rounds whose master differs from the one before
	logged  int             // violations logged
	// violations found by the checker, each once
	lost, reused, msgIDReuse, diverged map[string]bool
}

func runChaos(t *testing.T, cfg chaosConfig) {
	r := &chaosRun{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed)), logDir: t.TempDir(),
		faults: map[string]int{}, lost: map[string]bool{}, reused: map[string]bool{}, msgIDReuse: map[string]bool{},
		diverged: map[string]bool{},
		rec:      &chaosRecord{notOK: map[string]int{}, seen: map[[2]int64]string{}, seenTwice: map[[2]int64][2]string{}, deliver: map[string]int{}},
		stop:     make(chan struct{})}
	r.began = time.Now()
	r.startCluster()
	r.topic = fmt.Sprintf("Chaos%d", cfg.Seed%1_000_000)
	master := r.nodes[0]
	createTopicOn(t, r.nsAddr, master.addr(), r.topic, chaosQueues)
	if _, why := r.waitSettled(chaosSettleBy); why != "" {
		r.fail("the cluster did not settle at the start: %s", why)
	}
	r.startConsumer()
	r.prod = r.newProducer()
	for w := range 3 {
		r.wg.Add(1)
		go r.sender(w)
	}
	defer r.endLoad()
	r.waitAcks(chaosPerRound, "the first acknowledged sends")
	t.Logf("setup: 3 brokers, a name server and versitygw in %s-*, 10.231.%d.0/24, in %v; seed %d, %d rounds, one fault at a time: %v",
		cfg.Prefix, cfg.Net, time.Since(r.began).Round(time.Millisecond), cfg.Seed, cfg.Rounds, cfg.Single)

	for i := 1; i <= cfg.Rounds; i++ {
		r.round(i)
	}
	r.endLoad()
	master, why := r.waitSettled(chaosSettleBy)
	if why != "" {
		r.fail("the cluster did not settle after the last round: %s", why)
	}
	r.waitConsumer(master)
	r.check(master, cfg.Rounds, true)
	r.compareReplicas(master)
	r.summary(time.Since(r.began))
	if len(r.lost)+len(r.reused)+len(r.msgIDReuse)+len(r.diverged) > 0 {
		t.Errorf("seed %d: %d acknowledged messages lost, %d queue offsets reused, %d msgIds reused, %d offsets differ between replicas; schedule:\n%s\n%s",
			cfg.Seed, len(r.lost), len(r.reused), len(r.msgIDReuse), len(r.diverged), strings.Join(r.history, "\n"), r.keep())
	}
}

// fail ends the run with the schedule so far and every node's last logs.
func (r *chaosRun) fail(format string, args ...any) {
	r.t.Helper()
	var b strings.Builder
	for _, n := range r.nodes {
		fmt.Fprintf(&b, "\n--- %s (%s), last %d log lines:\n%s", n.name, n.addr(), chaosLogTailLn, logTail(n.logPath, chaosLogTailLn))
	}
	r.t.Fatalf("seed %d: %s\nschedule so far:\n%s%s\n%s", r.cfg.Seed, fmt.Sprintf(format, args...), strings.Join(r.history, "\n"), b.String(), r.keep())
}

// keep copies the logs, the data dirs and the bucket of a failed run out
// of the test's temporary directories (deleted when it ends).
func (r *chaosRun) keep() string {
	dir, err := os.MkdirTemp("", fmt.Sprintf("stratamq-chaos-%d-", r.cfg.Seed))
	if err != nil {
		return "logs not kept: " + err.Error()
	}
	srcs := map[string]string{"logs": r.logDir, "bucket": r.s3dir}
	for _, n := range r.nodes {
		srcs["data-"+n.name] = n.env["STRATAMQ_DATA_DIR"]
	}
	for name, src := range srcs {
		if src == "" {
			continue
		}
		if out, err := exec.Command("cp", "-a", "--sparse=always", src, filepath.Join(dir, name)).CombinedOutput(); err != nil {
			return fmt.Sprintf("logs partly kept in %s: cp %s: %v: %s", dir, src, err, out)
		}
	}
	return "logs, data dirs and bucket kept in " + dir
}

func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// spawn starts bin args... in host's namespace with env added, its output
// appended to logPath.
func (r *chaosRun) spawn(host, logPath string, env map[string]string, bin string, args ...string) *chaosProc {
	r.t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", r.cfg.ns(host), bin}, args...)...)
	cmd.Env = os.Environ()
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	// `ip netns exec` execs bin: the pid is bin's, for kill -9 and SIGSTOP.
	if err := cmd.Start(); err != nil {
		f.Close()
		r.t.Fatal(err)
	}
	p := &chaosProc{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.exited) }()
	r.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (r *chaosRun) startCluster() {
	t := r.t
	cfg := r.cfg
	s3dir := filepath.Join(t.TempDir(), "s3")
	r.s3dir = s3dir
	if err := os.MkdirAll(s3dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ak, sk := "AKCHAOS"+strconv.FormatUint(cfg.Seed%1_000_000, 10), fmt.Sprintf("sk%016x", cfg.Seed)
	s3addr := net.JoinHostPort(cfg.ip("s3"), strconv.Itoa(chaosS3Port))
	r.spawn("s3", filepath.Join(r.logDir, "versitygw.log"), nil, cfg.VersityGW,
		"--port", s3addr, "--access", ak, "--secret", sk, "--keep-alive", "--quiet", "posix", s3dir)
	hc := &http.Client{Timeout: time.Second}
	waitFor(t, 30*time.Second, "versitygw answering at "+s3addr, func() bool {
		resp, err := hc.Get("http://" + s3addr + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	r.nsAddr = net.JoinHostPort(cfg.ip("ns"), strconv.Itoa(chaosNSPort))
	r.spawn("ns", filepath.Join(r.logDir, "namesrv.log"), map[string]string{"STRATAMQ_NAMESRV_LISTEN": r.nsAddr, "STRATAMQ_HTTP_LISTEN": ""},
		cfg.Bin, "namesrv")
	waitFor(t, 30*time.Second, "the name server at "+r.nsAddr, func() bool {
		c, err := net.DialTimeout("tcp", r.nsAddr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	base := map[string]string{
		"AWS_ACCESS_KEY_ID":            ak,
		"AWS_SECRET_ACCESS_KEY":        sk,
		"AWS_REGION":                   "us-east-1",
		"STRATAMQ_BUCKET":              fmt.Sprintf("s3://chaos/run?endpoint=http://%s&region=us-east-1", s3addr),
		"STRATAMQ_NAMESRV":             r.nsAddr,
		"STRATAMQ_HA_FAILOVER":         "true",
		"STRATAMQ_LEASE_TTL":           chaosLeaseTTL.String(),
		"STRATAMQ_CHECKPOINT_INTERVAL": "500ms",
		"STRATAMQ_HA_ACK_TIMEOUT":      "2s",
		"STRATAMQ_HA_SYNC_INTERVAL":    "1s",
		"STRATAMQ_SEGMENT_SIZE":        "4MiB",
		"STRATAMQ_SEGMENT_MAX_AGE":     "10s", // seal and tier while the run goes on
		"STRATAMQ_LOG_LEVEL":           "info",
		"STRATAMQ_HA_SECRET":           "chaos-ha-secret", // the nodes' HA peers are not on loopback
	}
	for i, name := range chaosNodes {
		e := maps.Clone(base)
		ip := cfg.ip(name)
		e["STRATAMQ_ROLE"] = "slave"
		if i == 0 {
			e["STRATAMQ_ROLE"] = "sync_master"
		}
		e["STRATAMQ_BROKER_ID"] = strconv.Itoa(i + 1) // its id whenever it is a slave
		e["STRATAMQ_DATA_DIR"] = t.TempDir()
		e["STRATAMQ_LISTEN"] = net.JoinHostPort(ip, strconv.Itoa(chaosBrokPort))
		e["STRATAMQ_HA_LISTEN"] = net.JoinHostPort(ip, strconv.Itoa(chaosHAPort))
		e["STRATAMQ_HTTP_LISTEN"] = net.JoinHostPort(ip, strconv.Itoa(chaosHTTPPort))
		r.nodes = append(r.nodes, &chaosNode{name: name, env: e, logPath: filepath.Join(r.logDir, name+".log")})
	}
	r.startNode(r.nodes[0])
	waitFor(t, time.Minute, "n0 routed as the master", func() bool { return masterOf(r.nsAddr, "TBW102") == r.nodes[0].addr() })
	r.startNode(r.nodes[1])
	r.startNode(r.nodes[2])
}

func (r *chaosRun) startNode(n *chaosNode) {
	n.starts++
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintf(f, "=== chaos: start %d of %s at %s\n", n.starts, n.name, time.Now().Format(time.RFC3339Nano))
		f.Close()
	}
	n.proc = r.spawn(n.name, n.logPath, n.env, r.cfg.Bin, "broker")
	n.killed, n.paused = false, false
}

// newProducer is an official producer with the route of the moment
// (rocketmq-client-go refreshes routes only every 30 s).
func (r *chaosRun) newProducer() rocketmq.Producer {
	p, err := rocketmq.NewProducer(
		rmqproducer.WithNsResolver(primitive.NewPassthroughResolver([]string{r.nsAddr})),
		rmqproducer.WithGroupName("chaos-pg"),
		rmqproducer.WithInstanceName(fmt.Sprintf("chaos-p%d", time.Now().UnixNano())),
		rmqproducer.WithRetry(1),
		rmqproducer.WithSendMsgTimeout(4*time.Second),
	)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		r.t.Fatal(err)
	}
	return p
}

// freshProducer makes the senders use a new producer; producers two
// swaps old are shut down (no send of theirs is in flight any more).
func (r *chaosRun) freshProducer() {
	p := r.newProducer()
	r.prodMu.Lock()
	retire := r.old
	r.old = []rocketmq.Producer{r.prod}
	r.prod = p
	r.prodMu.Unlock()
	for _, o := range retire {
		_ = o.Shutdown()
	}
}

func (r *chaosRun) sender(w int) {
	defer r.wg.Done()
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		r.prodMu.Lock()
		id := r.nextID
		r.nextID++
		p := r.prod
		r.prodMu.Unlock()
		// A unique body, 60–560 bytes.
		body := fmt.Sprintf("s%d-m%07d-w%d-", r.cfg.Seed%1_000_000, id, w)
		body += strings.Repeat("x", 60+int(uint(id*7919)%500))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := p.SendSync(ctx, msgWithID(r.topic, id, []byte(body)))
		cancel()
		rec := r.rec
		rec.mu.Lock()
		rec.sent++
		ok := err == nil && res.Status == primitive.SendOK
		switch {
		case err != nil:
			rec.notOK["error"]++
		case ok:
			rec.acks = append(rec.acks, chaosAck{id, res.MessageQueue.QueueId, res.QueueOffset, res.OffsetMsgID, body, rec.round})
		default:
			rec.notOK[sendStatusName(res.Status)]++
		}
		rec.mu.Unlock()
		pause := 10 * time.Millisecond
		if !ok {
			pause = 100 * time.Millisecond
		}
		select {
		case <-r.stop:
			return
		case <-time.After(pause):
		}
	}
}

// endLoad stops the senders and shuts the producers down (idempotent).
func (r *chaosRun) endLoad() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	r.wg.Wait()
	r.prodMu.Lock()
	defer r.prodMu.Unlock()
	for _, p := range append(r.old, r.prod) {
		if p != nil {
			_ = p.Shutdown()
		}
	}
	r.old, r.prod = nil, nil
}

func (r *chaosRun) ackCount() int {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	return len(r.rec.acks)
}

// waitAcks waits until n more sends were acknowledged.
func (r *chaosRun) waitAcks(n int, what string) {
	r.t.Helper()
	target := r.ackCount() + n
	deadline := time.Now().Add(chaosAcksBy)
	for r.ackCount() < target {
		if time.Now().After(deadline) {
			r.rec.mu.Lock()
			notOK := fmt.Sprint(r.rec.notOK)
			r.rec.mu.Unlock()
			r.fail("%s: %d SEND_OKs did not come within %v (not OK so far: %s)", what, n, chaosAcksBy, notOK)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startConsumer starts an official push consumer that records what it
// saw at each (queue, offset); it runs for the whole run (shut down at
// the test's end).
func (r *chaosRun) startConsumer() {
	c, err := rocketmq.NewPushConsumer(
		rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver([]string{r.nsAddr})),
		rmqconsumer.WithGroupName("chaos-G"),
		rmqconsumer.WithInstance("chaos-c"),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset),
		noSpanFlowControl,
	)
	if err != nil {
		r.t.Fatal(err)
	}
	err = c.Subscribe(r.topic, rmqconsumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
		rec := r.rec
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, m := range msgs {
			key := [2]int64{int64(m.Queue.QueueId), m.QueueOffset}
			body := string(m.Body)
			if prev, ok := rec.seen[key]; !ok {
				rec.seen[key] = body
			} else if prev != body {
				rec.seenTwice[key] = [2]string{prev, body}
			}
			rec.deliver[body]++
		}
		return rmqconsumer.ConsumeSuccess, nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		quietGroup(r.nsAddr, r.topic, "chaos-G")
		_ = c.Shutdown()
	})
}

// haStatus asks the broker at addr for its HA status.
func chaosHAStatus(addr string) (broker.HAStatus, bool) {
	var st broker.HAStatus
	resp, ok := ask(addr, remoting.NewRequest(remoting.GetBrokerHAStatus, nil, nil), time.Second)
	if !ok || json.Unmarshal(resp.Body, &st) != nil {
		return st, false
	}
	return st, true
}

func chaosReady(n *chaosNode) bool {
	hc := &http.Client{Timeout: time.Second}
	resp, err := hc.Get("http://" + n.env["STRATAMQ_HTTP_LISTEN"] + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// settled is "" when the cluster is whole: the name server routes one
// node as the topic's master and the two others as its slaves; the master
// is a sync_master, ready (/readyz), with both others connected in sync
// (GET_BROKER_HA_STATUS); each of them follows it, and its log reaches
// need; all three have the topic. Otherwise it says what is missing. end
// is the master's log end.
func (r *chaosRun) settled(need int64) (m *chaosNode, why string, end int64) {
	ids := routeBrokerIDs(r.nsAddr, r.topic)
	for _, n := range r.nodes {
		if ids[0] == n.addr() {
			m = n
		}
	}
	if m == nil {
		return nil, fmt.Sprintf("no node routed as master (route %v)", ids), 0
	}
	routed := map[string]bool{}
	for id, a := range ids {
		if id != 0 {
			routed[a] = true
		}
	}
	st, ok := chaosHAStatus(m.addr())
	if !ok {
		return m, m.name + " does not answer GET_BROKER_HA_STATUS", 0
	}
	if st.Role != "sync_master" {
		return m, fmt.Sprintf("%s is routed as master but its role is %q", m.name, st.Role), 0
	}
	if !chaosReady(m) {
		return m, m.name + "'s /readyz is not 200", 0
	}
	for _, n := range r.nodes {
		if n == m {
			continue
		}
		if !routed[n.addr()] {
			return m, fmt.Sprintf("%s is not routed as a slave (route %v)", n.name, ids), 0
		}
		inSync := false
		for _, s := range st.Slaves {
			if h, _, _ := net.SplitHostPort(s.Addr); h == n.ip() && s.InSync {
				inSync = true
			}
		}
		if !inSync {
			return m, fmt.Sprintf("%s is not an in-sync slave of %s", n.name, m.name), 0
		}
		ns, ok := chaosHAStatus(n.addr())
		if !ok || ns.Follow == nil || !ns.Follow.Connected || ns.Follow.MasterBroker != m.addr() {
			return m, fmt.Sprintf("%s does not follow %s", n.name, m.name), 0
		}
		if ns.LocalEnd < need {
			return m, fmt.Sprintf("%s's log ends at %d, short of %d, where %s's ended when the rest had settled: its stream does not advance", n.name, ns.LocalEnd, need, m.name), 0
		}
	}
	for _, n := range r.nodes {
		if !hasTopic(n.addr(), r.topic) {
			return m, n.name + " lacks the topic", 0
		}
	}
	return m, "", st.LocalEnd
}

// waitSettled waits until settled holds twice: the second time with
// each slave's log reaching the master's end of the first (a slave whose
// connection looks up but carries nothing, as after a partition healed
// while TCP backs off, is not in sync: the master's inSync only bounds
// the lag in bytes).
func (r *chaosRun) waitSettled(d time.Duration) (*chaosNode, string) {
	deadline := time.Now().Add(d)
	var need int64
	var first *chaosNode
	for {
		m, why, end := r.settled(need)
		switch {
		case why == "" && first == m:
			return m, ""
		case why == "":
			first, need = m, end
		case m != first:
			first, need = nil, 0
		}
		if time.Now().After(deadline) {
			return m, why
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pairCut cuts (or heals) the link between hosts a and b both ways: each
// side's neighbour entry for the other points at a MAC nobody has, so
// their packets are dropped silently (the bridge floods them, no host
// takes them): connections time out, as across a real partition.
func (r *chaosRun) pairCut(a, b string, cut bool) {
	for _, p := range [][2]string{{a, b}, {b, a}} {
		var err error
		if cut {
			err = ipCmd("-n", r.cfg.ns(p[0]), "neigh", "replace", r.cfg.ip(p[1]), "lladdr", chaosBogusMAC, "dev", "eth0", "nud", "permanent")
		} else {
			err = ipCmd("-n", r.cfg.ns(p[0]), "neigh", "del", r.cfg.ip(p[1]), "dev", "eth0")
		}
		if err != nil && cut {
			r.t.Fatal(err)
		}
	}
}

// linkSet takes host's bridge port down (every link of the host) or up.
func (r *chaosRun) linkSet(host string, up bool) {
	state := "down"
	if up {
		state = "up"
	}
	if err := ipCmd("-n", r.cfg.ns("br"), "link", "set", "p"+host, state); err != nil {
		r.t.Fatal(err)
	}
}

// applied is one fault in force, and how to heal it.
type applied struct {
	what string
	heal func()
}

func (r *chaosRun) apply(f chaosFault, byRole []*chaosNode, restartEarly bool) applied {
	n := byRole[f.target]
	r.faults[f.kind]++
	switch f.kind {
	case "kill9":
		if n.killed {
			return applied{what: "kill9 " + n.name + " (already dead)", heal: func() {}}
		}
		if n.paused { // a stopped process dies of SIGKILL too
			n.paused = false
		}
		_ = n.proc.cmd.Process.Kill()
		<-n.proc.exited
		n.killed = true
		if restartEarly {
			r.startNode(n)
			return applied{what: "kill9+restart " + n.name, heal: func() {}}
		}
		return applied{what: "kill9 " + n.name, heal: func() {
			if n.killed {
				r.startNode(n)
			}
		}}
	case "pause":
		if n.killed || n.paused {
			return applied{what: "pause " + n.name + " (not running)", heal: func() {}}
		}
		_ = n.proc.cmd.Process.Signal(syscall.SIGSTOP)
		n.paused = true
		p := n.proc
		return applied{what: "pause " + n.name, heal: func() {
			if n.proc == p && n.paused {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
				n.paused = false
			}
		}}
	case "isolate":
		r.linkSet(n.name, false)
		return applied{what: "isolate " + n.name, heal: func() { r.linkSet(n.name, true) }}
	case "cut-bucket":
		r.pairCut(n.name, "s3", true)
		return applied{what: "cut " + n.name + "-s3", heal: func() { r.pairCut(n.name, "s3", false) }}
	case "cut-clients":
		r.pairCut(n.name, "cl", true)
		return applied{what: "cut " + n.name + "-clients", heal: func() { r.pairCut(n.name, "cl", false) }}
	case "cut-node":
		o := byRole[f.peer]
		r.pairCut(n.name, o.name, true)
		return applied{what: "cut " + n.name + "-" + o.name, heal: func() { r.pairCut(n.name, o.name, false) }}
	}
	panic("unknown fault " + f.kind)
}

// round runs round i: draw the schedule, apply it, heal everything, wait
// until the cluster settles and acknowledges again, then check.
func (r *chaosRun) round(i int) {
	t := r.t
	plan := chaosDrawRound(r.rng, r.cfg.Single)
	began := time.Now()
	r.rec.mu.Lock()
	r.rec.round = i
	acks0, sent0 := len(r.rec.acks), r.rec.sent
	r.rec.mu.Unlock()

	m, _, _ := r.settled(0)
	if m == nil {
		m = r.nodes[0]
	}
	byRole := []*chaosNode{m}
	for _, n := range r.nodes {
		if n != m {
			byRole = append(byRole, n)
		}
	}
	var desc []string
	for _, f := range plan.faults {
		desc = append(desc, f.String())
	}
	var inForce []applied
	var did []string
	for k, f := range plan.faults {
		if d := time.Until(began.Add(f.at)); d > 0 {
			time.Sleep(d)
		}
		a := r.apply(f, byRole, plan.restart[k])
		inForce = append(inForce, a)
		did = append(did, a.what)
	}
	time.Sleep(plan.hold)
	healed := time.Now() // the first heal step; settling is timed from here
	for k, a := range inForce {
		if k > 0 {
			time.Sleep(plan.healGaps[k])
		}
		a.heal()
	}
	m, why := r.waitSettled(chaosSettleBy)
	line := fmt.Sprintf("round %d: %s [%s] hold %v", i, strings.Join(desc, " "), strings.Join(did, "; "), plan.hold.Round(time.Millisecond))
	if why != "" {
		r.history = append(r.history, line+" → did not settle: "+why)
		if m != nil {
			// What the routed master serves, for the numbers.
			r.check(m, i, true)
		}
		r.summary(time.Since(r.began))
		r.fail("round %d: the cluster did not settle within %v after healing: %s", i, chaosSettleBy, why)
	}
	settle := time.Since(healed)
	r.settles = append(r.settles, settle)
	if m != byRole[0] {
		r.moves++
	}
	r.freshProducer()
	r.waitAcks(chaosPerRound, fmt.Sprintf("round %d, settled with master %s", i, m.name))
	r.check(m, i, false)
	r.rec.mu.Lock()
	acks, sent := len(r.rec.acks)-acks0, r.rec.sent-sent0
	total := len(r.rec.acks)
	r.rec.mu.Unlock()
	line += fmt.Sprintf(" → settled in %v, master %s→%s; sends %d, acks %d (total acks %d); lost %d, reused %d; %v",
		settle.Round(time.Millisecond), byRole[0].name, m.name, sent, acks, total, len(r.lost), len(r.reused), time.Since(began).Round(time.Millisecond))
	r.history = append(r.history, line)
	t.Log(line)
}

// violation logs one violation; past the first 20 it only counts them
// (the totals and the per-round lines carry the numbers).
func (r *chaosRun) violation(format string, args ...any) {
	r.t.Helper()
	r.logged++
	switch {
	case r.logged <= 20:
		r.t.Logf(format, args...)
	case r.logged == 21:
		r.t.Logf("(further violations counted, not logged)")
	}
}

// chaosLogRec is a record read back from the master.
type chaosLogRec struct {
	body string
	id   string
}

// readQueue reads queue q of the topic from the broker at addr, from
// offset 0 to its GET_MAX_OFFSET, with plain PULL_MESSAGE requests.
func (r *chaosRun) readQueue(addr string, q int) (map[int64]chaosLogRec, error) {
	return r.readQueueGaps(addr, q, new([1]int64))
}

// readQueueGaps is readQueue adding the offsets it stepped over to gaps[0].
func (r *chaosRun) readQueueGaps(addr string, q int, gaps *[1]int64) (map[int64]chaosLogRec, error) {
	end, ok := maxQueueOffset(addr, r.topic, q)
	if !ok {
		return nil, fmt.Errorf("GET_MAX_OFFSET of queue %d failed", q)
	}
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: 2 * time.Second})
	defer cl.Close()
	out := map[int64]chaosLogRec{}
	for off := int64(0); off < end; {
		h := remoting.PullMessageRequestHeader{ConsumerGroup: "chaos-check", Topic: r.topic, QueueID: int32(q), QueueOffset: off,
			MaxMsgNums: 64, SysFlag: remoting.PullFlagSubscription, Subscription: "*", ExpressionType: "TAG"}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cl.Invoke(ctx, addr, remoting.NewRequest(remoting.PullMessage, h.Encode(), nil))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("pull queue %d at %d: %v", q, off, err)
		}
		next, _ := strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64)
		if resp.Code != int32(remoting.Success) {
			// A hole the broker steps over (PULL_OFFSET_MOVED and the like,
			// after a restore that skipped offsets): read on past it.
			if next > off && resp.Code != int32(remoting.SystemError) {
				gaps[0] += next - off
				off = next
				continue
			}
			return nil, fmt.Errorf("pull queue %d at %d (of %d): code %d %s, next %d", q, off, end, resp.Code, resp.Remark, next)
		}
		for b := resp.Body; len(b) > 0; {
			rec, n, err := store.DecodeRecord(b)
			if err != nil {
				return nil, fmt.Errorf("pull queue %d at %d: %v", q, off, err)
			}
			b = b[n:]
			out[rec.QueueOffset] = chaosLogRec{body: string(rec.Body), id: replayProps(rec.Properties)["id"]}
		}
		if next <= off {
			return nil, fmt.Errorf("pull queue %d at %d: next offset %d does not advance", q, off, next)
		}
		off = next
	}
	return out, nil
}

// check compares what the clients saw with the master's log: every
// SEND_OK (as of now) is read at its queue offset with its body; no
// (queue, offset) was acknowledged or delivered with two bodies, nor
// holds on the master another body than one delivered there; no msgId
// acknowledged twice. final: also count deliveries.
func (r *chaosRun) check(m *chaosNode, round int, final bool) {
	r.t.Helper()
	r.rec.mu.Lock()
	acks := slices.Clone(r.rec.acks)
	r.rec.mu.Unlock()
	logs := make([]map[int64]chaosLogRec, chaosQueues)
	var records int
	var gaps [1]int64 // queue offsets the master steps over
	for q := range chaosQueues {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var g [1]int64
			var err error
			if logs[q], err = r.readQueueGaps(m.addr(), q, &g); err == nil {
				gaps[0] += g[0]
				break
			}
			if time.Now().After(deadline) {
				r.fail("round %d: reading the master %s: %v", round, m.name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		records += len(logs[q])
	}
	ackedAt := map[[2]int64]chaosAck{}
	byMsgID := map[string]chaosAck{}
	for _, a := range acks {
		key := [2]int64{int64(a.queue), a.off}
		if o, dup := ackedAt[key]; dup && o.body != a.body {
			k := fmt.Sprintf("q%d@%d", a.queue, a.off)
			if !r.reused[k] {
				r.reused[k] = true
				r.violation("VIOLATION round %d: queue %d offset %d acknowledged for m%d (round %d) and m%d (round %d)", round, a.queue, a.off, o.id, o.round, a.id, a.round)
			}
		}
		ackedAt[key] = a
		if o, dup := byMsgID[a.msgID]; dup && a.msgID != "" && o.id != a.id {
			if !r.msgIDReuse[a.msgID] {
				r.msgIDReuse[a.msgID] = true
				r.violation("VIOLATION round %d: msgId %s acknowledged for m%d (round %d) and m%d (round %d)", round, a.msgID, o.id, o.round, a.id, a.round)
			}
		}
		byMsgID[a.msgID] = a
		got, ok := logs[a.queue][a.off]
		if !ok || got.body != a.body {
			k := fmt.Sprintf("m%d", a.id)
			if !r.lost[k] {
				r.lost[k] = true
				what := "nothing"
				if ok {
					what = fmt.Sprintf("m%s (%.24q)", got.id, got.body)
				}
				r.violation("VIOLATION round %d: m%d acknowledged in round %d at queue %d offset %d: the master %s holds %s there",
					round, a.id, a.round, a.queue, a.off, m.name, what)
			}
		}
	}
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	for key, bodies := range r.rec.seenTwice {
		k := fmt.Sprintf("q%d@%d", key[0], key[1])
		if !r.reused[k] {
			r.reused[k] = true
			r.violation("VIOLATION round %d: the consumer got two bodies at queue %d offset %d: %.24q and %.24q", round, key[0], key[1], bodies[0], bodies[1])
		}
	}
	for key, body := range r.rec.seen {
		got, ok := logs[key[0]][key[1]]
		if ok && got.body != body {
			k := fmt.Sprintf("q%d@%d", key[0], key[1])
			if !r.reused[k] {
				r.reused[k] = true
				r.violation("VIOLATION round %d: the consumer got %.24q at queue %d offset %d, the master %s holds %.24q there", round, body, key[0], key[1], m.name, got.body)
			}
		}
	}
	if final {
		dups := 0
		for _, n := range r.rec.deliver {
			if n > 1 {
				dups++
			}
		}
		r.t.Logf("final check on master %s: %d records in %d queues (%d queue offsets stepped over); %d SEND_OKs checked; consumer saw %d distinct (queue, offset), %d messages delivered more than once",
			m.name, records, chaosQueues, gaps[0], len(acks), len(r.rec.seen), dups)
	}
}

// waitConsumer gives the consumer up to a minute to read every record the
// master holds (its route may be up to 30 s old), so that what it saw is
// compared with the whole log; it reports how far it got. The records are
// counted by reading the queues: a queue's end is not a count of its
// records (a promotion numbers a queue past the checkpoint's reservation,
// leaving a hole).
func (r *chaosRun) waitConsumer(m *chaosNode) {
	var total int64
	for q := range chaosQueues {
		recs, err := r.readQueue(m.addr(), q)
		if err != nil {
			r.t.Logf("count the master's records of queue %d: %v", q, err)
			continue
		}
		total += int64(len(recs))
	}
	deadline := time.Now().Add(time.Minute)
	for {
		r.rec.mu.Lock()
		seen := int64(len(r.rec.seen))
		r.rec.mu.Unlock()
		if seen >= total || time.Now().After(deadline) {
			r.t.Logf("the consumer saw %d of the master's %d records", seen, total)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// compareReplicas reads every queue from each slave (they serve pulls
// from their own log and the bucket) and compares each offset both hold
// with the master's record there.
func (r *chaosRun) compareReplicas(m *chaosNode) {
	r.t.Helper()
	for q := range chaosQueues {
		want, err := r.readQueue(m.addr(), q)
		if err != nil {
			r.fail("reading queue %d from the master %s: %v", q, m.name, err)
		}
		for _, n := range r.nodes {
			if n == m {
				continue
			}
			var got map[int64]chaosLogRec
			deadline := time.Now().Add(30 * time.Second)
			for got, err = r.readQueue(n.addr(), q); err != nil; got, err = r.readQueue(n.addr(), q) {
				if time.Now().After(deadline) {
					r.fail("reading queue %d from the slave %s: %v", q, n.name, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			same, differ := 0, 0
			for off, g := range got {
				w, ok := want[off]
				if !ok {
					continue
				}
				if w.body != g.body {
					differ++
					k := fmt.Sprintf("%s q%d@%d", n.name, q, off)
					if !r.diverged[k] {
						r.diverged[k] = true
						r.violation("VIOLATION: queue %d offset %d: the slave %s holds %.24q, the master %s %.24q", q, off, n.name, g.body, m.name, w.body)
					}
					continue
				}
				same++
			}
			r.t.Logf("queue %d: the slave %s holds %d records (the master %d): %d the same as the master's, %d different",
				q, n.name, len(got), len(want), same, differ)
		}
	}
}

func (r *chaosRun) summary(wall time.Duration) {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	var faults []string
	for _, k := range slices.Sorted(maps.Keys(r.faults)) {
		faults = append(faults, fmt.Sprintf("%s %d", k, r.faults[k]))
	}
	var notOK []string
	for _, k := range slices.Sorted(maps.Keys(r.rec.notOK)) {
		notOK = append(notOK, fmt.Sprintf("%s %d", k, r.rec.notOK[k]))
	}
	dups := 0
	for _, n := range r.rec.deliver {
		if n > 1 {
			dups++
		}
	}
	r.t.Logf("TOTAL seed %d: %d rounds (%d moved the master; settled after healing: %s) in %v; faults: %s; sends %d, acks %d, not OK: %s; acknowledged lost %d, offsets reused %d, msgIds reused %d, offsets differing between replicas %d, duplicates delivered %d",
		r.cfg.Seed, len(r.settles), r.moves, durStats(r.settles), wall.Round(time.Second), strings.Join(faults, ", "), r.rec.sent, len(r.rec.acks), strings.Join(notOK, ", "),
		len(r.lost), len(r.reused), len(r.msgIDReuse), len(r.diverged), dups)
}
