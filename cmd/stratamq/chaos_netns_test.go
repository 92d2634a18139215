package main

// The netns chaos run (issue 29, "Real binaries, real partitions"): three
// `stratamq broker` processes of one brokerName with failover on, a name
// server and versitygw, each in a network namespace of its own, joined by a
// bridge in another namespace, under producers and a consumer of
// rocketmq-client-go. Faults drawn from a seed: kill -9 (restart on the same
// data dir), SIGSTOP/SIGCONT, a node's link down, and cuts between a node
// and the bucket, another node or the clients. After each round everything
// heals, the cluster must settle (one routed master, /readyz, both other
// nodes its in-sync slaves, sends acknowledged again), and the checker reads
// every queue of the master from offset 0.
//
// This file sets up and tears down the namespaces (the "outer" test); the
// run itself (chaos_netns_run_test.go) is the same test binary re-executed
// inside the clients' namespace, so the official client and every helper
// of this package reach the nodes through the bridge, and every link the
// test takes down separates the clients too.

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stratamq/stratamq/tier/tiertest"
)

var (
	chaosRoundsFlag = flag.Int("chaos.rounds", 0, "TestChaosNetns: fault rounds (0: the CI form's 3, or STRATAMQ_CHAOS_ROUNDS)")
	chaosSingleFlag = flag.Bool("chaos.single", false, "TestChaosNetns: one fault per round, never several at once (or STRATAMQ_CHAOS_SINGLE=1)")
	chaosSeedFlag   = flag.Uint64("chaos.seed", 0, "TestChaosNetns: the seed of the fault schedule (0: drawn from the clock, or STRATAMQ_CHAOS_SEED)")
)

// chaosInnerEnv carries the run's chaosConfig (JSON) to the test binary
// re-executed inside the clients' namespace.
const chaosInnerEnv = "STRATAMQ_CHAOS_NETNS_RUN"

// chaosHosts are the namespaces of a run (besides the bridge's, "br"),
// with the last octet of each one's address.
var chaosHosts = []struct {
	name  string
	octet int
}{{"s3", 2}, {"ns", 3}, {"cl", 4}, {"n0", 11}, {"n1", 12}, {"n2", 13}}

// chaosNodes are the broker hosts.
var chaosNodes = []string{"n0", "n1", "n2"}

// chaosConfig is what the outer test hands the run.
type chaosConfig struct {
	Prefix    string // namespace names are Prefix-<host>
	Net       int    // the run's subnet is 10.231.Net.0/24
	Bin       string // the stratamq binary
	VersityGW string // the versitygw binary
	Rounds    int
	Seed      uint64
	Single    bool // one fault per round
}

func (c chaosConfig) ns(host string) string { return c.Prefix + "-" + host }

func (c chaosConfig) ip(host string) string {
	for _, h := range chaosHosts {
		if h.name == host {
			return fmt.Sprintf("10.231.%d.%d", c.Net, h.octet)
		}
	}
	panic("unknown chaos host " + host)
}

// TestChaosNetns is the netns chaos run over real processes; see the top
// of this file. CI form: 3 rounds. By hand: -chaos.rounds=50 (or
// STRATAMQ_CHAOS_ROUNDS=50), -chaos.seed=N to replay a schedule (the same
// faults against the same roles at the same times; the processes' timing
// differs), -chaos.single for one fault per round. It needs root and
// `ip netns` (skipped otherwise) and versitygw. A failed run keeps its
// logs, data dirs and bucket in $TMPDIR/stratamq-chaos-<seed>-*.
func TestChaosNetns(t *testing.T) {
	if raw := os.Getenv(chaosInnerEnv); raw != "" {
		var cfg chaosConfig
		if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
			t.Fatalf("%s: %v", chaosInnerEnv, err)
		}
		runChaos(t, cfg)
		return
	}
	// In parallel with the other end-to-end tests (it ran first, alone,
	// ~55-90 s of the package's wall time): this process only runs `ip`
	// and the run re-executed in the clients' namespace; the nodes,
	// versitygw and the clients live in namespaces of their own (their
	// own addresses and ports), and nothing process-wide (environment,
	// the official client's TLS switch, serve hooks) is touched here.
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary and runs for minutes")
	}
	if os.Geteuid() != 0 {
		t.Skip("TestChaosNetns needs root: it creates network namespaces (ip netns)")
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		t.Skipf("TestChaosNetns needs `ip netns`: %v: %s", err, out)
	}
	cfg := chaosConfig{VersityGW: tiertest.RequireVersityGW(t), Rounds: 3, Seed: uint64(time.Now().UnixNano())}
	if v := os.Getenv("STRATAMQ_CHAOS_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("STRATAMQ_CHAOS_ROUNDS=%q: want a count ≥ 1", v)
		}
		cfg.Rounds = n
	}
	if *chaosRoundsFlag > 0 {
		cfg.Rounds = *chaosRoundsFlag
	}
	if v := os.Getenv("STRATAMQ_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("STRATAMQ_CHAOS_SEED=%q: %v", v, err)
		}
		cfg.Seed = n
	}
	if *chaosSeedFlag != 0 {
		cfg.Seed = *chaosSeedFlag
	}
	cfg.Single = *chaosSingleFlag || os.Getenv("STRATAMQ_CHAOS_SINGLE") != ""
	t.Logf("chaos seed %d (replay: -chaos.seed=%d -chaos.rounds=%d -chaos.single=%v)", cfg.Seed, cfg.Seed, cfg.Rounds, cfg.Single)
	cfg.Bin = buildBinary(t)
	removeDeadChaosNetns(t)
	cfg.Prefix = fmt.Sprintf("smqchaos%d", os.Getpid())
	cfg.Net = chaosSubnet(t, os.Getpid())
	setupChaosNetns(t, cfg)

	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The run gets a deadline of its own, before this test's, so that it
	// fails with its logs and this test still tears the namespaces down.
	timeout := 2 * time.Hour
	if d, ok := t.Deadline(); ok {
		timeout = time.Until(d) - 30*time.Second
		if timeout < time.Minute {
			t.Fatalf("too little time left for the run: %v", timeout)
		}
	}
	args := []string{"netns", "exec", cfg.ns("cl"), os.Args[0], "-test.run=^TestChaosNetns$", "-test.count=1",
		"-test.timeout=" + timeout.String()}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), chaosInnerEnv+"="+string(raw))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		t.Fatalf("the chaos run (seed %d, %d rounds) failed: %v; its output is above", cfg.Seed, cfg.Rounds, err)
	}
}

// ipCmd runs `ip args...`.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// killNetnsPids kill -9s every process in namespace ns.
func killNetnsPids(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// deleteChaosNetns kills the processes in the run's namespaces, then
// deletes them (the veths go with them).
func deleteChaosNetns(prefix string) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			names = append(names, f[0])
		}
	}
	for _, n := range names {
		killNetnsPids(n)
	}
	for _, n := range names {
		_ = ipCmd("netns", "del", n)
	}
}

// removeDeadChaosNetns deletes namespaces a run of this test left behind
// when it was killed before its cleanup (smqchaos<pid>-*, that pid gone).
func removeDeadChaosNetns(t *testing.T) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	seen := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "smqchaos") {
			continue
		}
		prefix, _, _ := strings.Cut(f[0], "-")
		pid, err := strconv.Atoi(strings.TrimPrefix(prefix, "smqchaos"))
		if err != nil || seen[prefix] || syscall.Kill(pid, 0) == nil {
			continue
		}
		seen[prefix] = true
		t.Logf("removing the namespaces of a dead chaos run: %s-*", prefix)
		deleteChaosNetns(prefix)
	}
}

// chaosSubnet picks X of 10.231.X.0/24 from pid, skipping any X an
// existing namespace already has an address in.
func chaosSubnet(t *testing.T, pid int) int {
	out, _ := exec.Command("ip", "netns", "list").Output()
	var used strings.Builder
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			a, _ := exec.Command("ip", "-n", f[0], "-4", "addr").Output()
			used.Write(a)
		}
	}
	for i := range 200 {
		x := 20 + (pid+i)%200
		if !strings.Contains(used.String(), fmt.Sprintf("10.231.%d.", x)) {
			return x
		}
	}
	t.Fatal("no free 10.231.X.0/24 for the chaos run")
	return 0
}

// setupChaosNetns makes the run's namespaces: a bridge in Prefix-br and,
// for each host, a namespace whose eth0 is a veth into the bridge (port
// p<host> on the bridge's side), with its address in the run's /24. The
// cleanup kills every process in them and deletes them, also when the
// test fails.
func setupChaosNetns(t *testing.T, cfg chaosConfig) {
	t.Helper()
	t.Cleanup(func() { deleteChaosNetns(cfg.Prefix) })
	br := cfg.ns("br")
	steps := [][]string{
		{"netns", "add", br},
		{"-n", br, "link", "add", "br0", "type", "bridge"},
		{"-n", br, "link", "set", "br0", "up"},
	}
	for _, h := range chaosHosts {
		ns := cfg.ns(h.name)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", "p" + h.name, "netns", br},
			[]string{"-n", ns, "addr", "add", cfg.ip(h.name) + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
			[]string{"-n", br, "link", "set", "p" + h.name, "master", "br0"},
			[]string{"-n", br, "link", "set", "p" + h.name, "up"},
		)
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			t.Fatal(err)
		}
	}
}
