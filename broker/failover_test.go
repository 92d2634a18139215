package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// failoverConfig is a node of brokerName "broker-a" with failover, fixed
// ports (a generation rebinds them), a short lease and quick checkpoints.
func failoverConfig(t *testing.T, role string) Config {
	return Config{DataDir: t.TempDir(), Listen: haTestAddr(t), HAListen: haTestAddr(t), Role: role, HAFailover: true,
		SegmentSize: 1 << 20, MaxMessageSize: 256 << 10, AutoCreateTopic: true, HATimeout: 2 * time.Second,
		LeaseTTL: 2 * time.Second, CheckpointInterval: 200 * time.Millisecond, RegisterInterval: time.Hour,
		ReserveLogMin: 1 << 20, ReserveQueueMin: 1 << 10}
}

// runNode runs a Node until the test ends.
func runNode(t *testing.T, cfg Config, deps Deps) *Node {
	t.Helper()
	if deps.Logger == nil {
		deps.Logger = discardLogger()
	}
	n := NewNode(cfg, deps, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("node %s: %v", cfg.Listen, err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("node %s did not stop", cfg.Listen)
		}
	})
	waitCond(t, 30*time.Second, "the node's first broker", func() bool { return n.Broker() != nil })
	return n
}

// haSlaves is how many slaves the running HA master sees (0 without one).
func (b *Broker) haSlaves() int {
	if m := b.repl.Master(); m != nil {
		return len(m.Slaves())
	}
	return 0
}

// role is the running generation's role ("" while between generations).
func (n *Node) role() string {
	if b := n.Broker(); b != nil && !b.closing.Load() {
		return b.cfg.Role
	}
	return ""
}

// TestBrokerFailoverThroughTheLease (issue 10 item 4 and the "Fencing"
// Done-when line): a sync_master and a failover slave share a bucket. The
// master is cut off from the bucket (a partition): it stops acknowledging
// before its lease can lapse, the slave takes the lease with a higher
// epoch once it stayed unchanged for a TTL and becomes sync_master, and
// the old master, healed, finds itself fenced and rejoins as the new
// master's slave. Every message either master acknowledged is readable on
// the new master, no queue offset is handed out twice, and the old master
// acknowledged nothing once the new epoch began.
func TestBrokerFailoverThroughTheLease(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	cut := &faultBucket{Bucket: mem}
	a := runNode(t, failoverConfig(t, RoleSyncMaster), Deps{Bucket: cut})
	b := runNode(t, failoverConfig(t, RoleSlave), Deps{Bucket: mem})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()

	type ack struct {
		body  []byte
		queue int
		off   string
		at    time.Time
	}
	var acks []ack
	seq := 0
	// send sends one message to n's broker and records it if acknowledged.
	send := func(n *Node) *remoting.Command {
		t.Helper()
		seq++
		body := []byte(fmt.Sprintf("m%05d", seq))
		q := seq % 2
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cl.Invoke(ctx, n.cfg.Listen, sendReq("FO", q, body, ""))
		if err != nil {
			return nil
		}
		if resp.Code == int32(remoting.Success) {
			acks = append(acks, ack{body, q, resp.ExtFields["queueOffset"], time.Now()})
		}
		return resp
	}
	waitCond(t, 20*time.Second, "the slave to follow the master", func() bool {
		m := a.Broker()
		hm := m.haSlaves()
		return hm == 1
	})
	for range 20 {
		if r := send(a); r == nil || r.Code != int32(remoting.Success) {
			t.Fatalf("send to the master with its slave: %+v", r)
		}
	}
	firstEpoch := a.Broker().epoch()

	// Partition the master from the bucket; keep sending to it.
	cut.down.Store(true)
	waitCond(t, 30*time.Second, "the slave to take over", func() bool {
		send(a)
		return b.role() == RoleSyncMaster
	})
	nb := b.Broker()
	if nb.epoch() <= firstEpoch {
		t.Fatalf("new master's epoch %d, want above %d", nb.epoch(), firstEpoch)
	}
	rec, _, err := offsets.ReadLease(context.Background(), newCheckpointStore(nb.scoped))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range acks {
		if !k.at.Before(rec.AcquiredAt) {
			t.Fatalf("the old master acknowledged %s at %v, after the new epoch began at %v", k.body, k.at, rec.AcquiredAt)
		}
	}
	if rec.Role != RoleSyncMaster || rec.HAAddr == "" {
		t.Fatalf("new lease record role %q HA address %q; want sync_master and an address", rec.Role, rec.HAAddr)
	}
	// The old master, still partitioned, refuses sends.
	if r := send(a); r != nil && r.Code == int32(remoting.Success) {
		t.Fatal("the partitioned old master acknowledged a send")
	}

	// Heal: the old master finds itself fenced and rejoins as a slave.
	cut.down.Store(false)
	waitCond(t, 30*time.Second, "the old master to rejoin as a slave", func() bool { return a.role() == RoleSlave })
	waitCond(t, 30*time.Second, "the new master to see its slave", func() bool {
		m := b.Broker()
		return m != nil && m.haSlaves() == 1
	})
	for range 10 {
		if r := send(b); r == nil || r.Code != int32(remoting.Success) {
			t.Fatalf("send to the new master with the old one as slave: %+v", r)
		}
	}
	if a.RoleChanges() != 1 || b.RoleChanges() != 1 {
		t.Fatalf("role changes: old master %d, new master %d; want 1 each", a.RoleChanges(), b.RoleChanges())
	}

	// Every acknowledged message is on the new master, at the offset its
	// ack named, and on its slave; no offset was handed out twice.
	nb = b.Broker()
	seen := map[string]bool{}
	for _, k := range acks {
		key := fmt.Sprintf("%d/%s", k.queue, k.off)
		if seen[key] {
			t.Fatalf("queue offset %s acknowledged twice", key)
		}
		seen[key] = true
	}
	for _, who := range []*Broker{nb, a.Broker()} {
		byQueue := map[int]map[int64][]byte{}
		for q := range 2 {
			n := int(who.store.MaxQueueOffset("FO", int32(q)))
			got, bad := readAt(t, who, cl, "FO", q, n)
			if bad != nil {
				t.Fatalf("%s: pull FO/%d: %d %s", who.cfg.Role, q, bad.Code, bad.Remark)
			}
			byQueue[q] = byOffset(got)
		}
		waitCond(t, 10*time.Second, "the slave to hold the master's log", func() bool {
			return a.Broker().store.MaxPhysOffset() == nb.store.MaxPhysOffset()
		})
		for _, k := range acks {
			var off int64
			fmt.Sscan(k.off, &off)
			if got, ok := byQueue[k.queue][off]; !ok || !bytes.Equal(got, k.body) {
				t.Fatalf("%s: acknowledged %s at FO/%d offset %d is not there", who.cfg.Role, k.body, k.queue, off)
			}
		}
	}
}

// TestBrokerRejoinCutsDivergentLog (issue 10 item 4, divergent-log
// truncation): an async_master acknowledges messages its slave never got;
// the slave takes over and writes other messages at those offsets. The
// old master rejoins as a slave: its log is cut where the new epoch took
// over, the cut bytes (the lost acknowledgements of async replication)
// are kept under diverged/, and its log then equals the new master's.
func TestBrokerRejoinCutsDivergentLog(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	cut := &faultBucket{Bucket: mem}
	acfg := failoverConfig(t, RoleAsyncMaster)
	a := runNode(t, acfg, Deps{Bucket: cut})
	b := runNode(t, failoverConfig(t, RoleSlave), Deps{Bucket: mem})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	send := func(n *Node, body string) {
		t.Helper()
		if r := invoke(t, cl, n.cfg.Listen, sendReq("DV", 0, []byte(body), "")); r.Code != int32(remoting.Success) {
			t.Fatalf("send %s: %d %s", body, r.Code, r.Remark)
		}
	}
	for i := range 10 {
		send(a, fmt.Sprintf("common-%02d", i))
	}
	waitCond(t, 20*time.Second, "the slave to catch up", func() bool {
		return b.Broker().store.MaxPhysOffset() == a.Broker().store.MaxPhysOffset()
	})
	common := a.Broker().store.MaxPhysOffset()
	b.Broker().repl.Slave().Close() // the slave stops receiving
	for i := range 5 {
		send(a, fmt.Sprintf("only-on-old-%02d", i))
	}
	cut.down.Store(true)
	waitCond(t, 30*time.Second, "the slave to take over", func() bool { return b.role() == RoleAsyncMaster })
	for i := range 7 {
		send(b, fmt.Sprintf("new-epoch-%02d", i))
	}
	cut.down.Store(false)
	waitCond(t, 30*time.Second, "the old master to rejoin as a slave", func() bool { return a.role() == RoleSlave })
	waitCond(t, 20*time.Second, "the rejoined slave to catch up", func() bool {
		return a.Broker().store.MaxPhysOffset() == b.Broker().store.MaxPhysOffset()
	})
	for _, who := range []*Broker{a.Broker(), b.Broker()} {
		got, bad := readAll(t, who, cl, "DV", 0, 17)
		if bad != nil {
			t.Fatalf("pull from %s: %d %s", who.cfg.Role, bad.Code, bad.Remark)
		}
		for i, body := range got {
			want := fmt.Sprintf("common-%02d", i)
			if i >= 10 {
				want = fmt.Sprintf("new-epoch-%02d", i-10)
			}
			if string(body) != want {
				t.Fatalf("%s: offset %d holds %q, want %q", who.cfg.Role, i, body, want)
			}
		}
	}
	names, err := a.Broker().fs.ReadDir(acfg.DataDir + "/diverged")
	if err != nil || len(names) != 1 {
		t.Fatalf("diverged/: %v, %v; want one file", names, err)
	}
	kept, err := os.ReadFile(acfg.DataDir + "/diverged/" + names[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(names[0], fmt.Sprintf("%020d-", common)) {
		t.Fatalf("diverged file %s does not start at the new epoch's offset %d", names[0], common)
	}
	for i := range 5 {
		if !bytes.Contains(kept, []byte(fmt.Sprintf("only-on-old-%02d", i))) {
			t.Fatalf("the kept bytes lack only-on-old-%02d", i)
		}
	}
	if bytes.Contains(kept, []byte("common-09")) {
		t.Fatal("the kept bytes include a record both logs share")
	}
}

// TestBrokerAdminPromoteDemote (issue 10 item 4, admin promote and
// demote): promote on the slave makes its master hand over — refuse
// sends, wait until the slave holds its log, release the lease — and the
// slave takes the lease at once (no TTL wait) and the old master follows
// it; demote on the new master swaps them back. No acknowledged message
// is lost across either handover.
func TestBrokerAdminPromoteDemote(t *testing.T) {
	mem := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	acfg.LeaseTTL, bcfg.LeaseTTL = time.Minute, time.Minute // a handover must not wait for it
	a := runNode(t, acfg, Deps{Bucket: mem})
	b := runNode(t, bcfg, Deps{Bucket: mem})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	var sent []string
	send := func(n *Node) {
		t.Helper()
		body := fmt.Sprintf("m%03d", len(sent))
		if r := invoke(t, cl, n.cfg.Listen, sendReq("PD", 0, []byte(body), "")); r.Code != int32(remoting.Success) {
			t.Fatalf("send %s to %s: %d %s", body, n.role(), r.Code, r.Remark)
		}
		sent = append(sent, body)
	}
	healthy := func(master, slave *Node) {
		t.Helper()
		waitCond(t, 20*time.Second, "the master to see its slave", func() bool {
			m := master.Broker()
			return master.role() == RoleSyncMaster && slave.role() == RoleSlave && m != nil && m.haSlaves() == 1
		})
	}
	healthy(a, b)
	for range 5 {
		send(a)
	}
	if r := invoke(t, cl, a.cfg.Listen, remoting.NewRequest(remoting.PromoteBroker, nil, nil)); r.Code == int32(remoting.Success) {
		t.Fatal("promote on a master succeeded")
	}
	start := time.Now()
	if r := invoke(t, cl, b.cfg.Listen, remoting.NewRequest(remoting.PromoteBroker, nil, nil)); r.Code != int32(remoting.Success) {
		t.Fatalf("promote on the slave: %d %s", r.Code, r.Remark)
	}
	healthy(b, a)
	if d := time.Since(start); d >= acfg.LeaseTTL {
		t.Fatalf("the handover took %v, a lease TTL", d)
	}
	for range 5 {
		send(b)
	}
	if r := invoke(t, cl, b.cfg.Listen, remoting.NewRequest(remoting.DemoteBroker, nil, nil)); r.Code != int32(remoting.Success) {
		t.Fatalf("demote on the new master: %d %s", r.Code, r.Remark)
	}
	healthy(a, b)
	for range 5 {
		send(a)
	}
	if a.RoleChanges() != 2 || b.RoleChanges() != 2 {
		t.Fatalf("role changes %d and %d, want 2 each", a.RoleChanges(), b.RoleChanges())
	}
	for _, who := range []*Broker{a.Broker(), b.Broker()} {
		waitCond(t, 10*time.Second, "the slave to catch up", func() bool { return who.store.MaxQueueOffset("PD", 0) == int64(len(sent)) })
		got, bad := readAll(t, who, cl, "PD", 0, len(sent))
		if bad != nil {
			t.Fatalf("pull from %s: %d %s", who.cfg.Role, bad.Code, bad.Remark)
		}
		for i, body := range got {
			if string(body) != sent[i] {
				t.Fatalf("%s offset %d: %q, want %q", who.cfg.Role, i, body, sent[i])
			}
		}
	}
}

// TestBrokerPromotedLaggingSlaveRestoresFromBucket: a slave whose copy
// of the log ends before what its async master already uploaded takes
// over. Its copy is set aside (renamed, not deleted) and it restores from
// the bucket: every uploaded message stays readable, and its own writes
// get offsets past everything the old master may have handed out.
func TestBrokerPromotedLaggingSlaveRestoresFromBucket(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	cut := &faultBucket{Bucket: mem}
	acfg, bcfg := failoverConfig(t, RoleAsyncMaster), failoverConfig(t, RoleSlave)
	a := runNode(t, acfg, Deps{Bucket: cut})
	b := runNode(t, bcfg, Deps{Bucket: mem})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	var sent [][]byte
	var lastOff int64
	send := func(n *Node, body []byte) {
		t.Helper()
		r := invoke(t, cl, n.cfg.Listen, sendReq("LG", 0, body, ""))
		if r.Code != int32(remoting.Success) {
			t.Fatalf("send to %s: %d %s", n.role(), r.Code, r.Remark)
		}
		fmt.Sscan(r.ExtFields["queueOffset"], &lastOff)
		sent = append(sent, body)
	}
	for i := range 5 {
		send(a, []byte(fmt.Sprintf("before-%d", i)))
	}
	waitCond(t, 20*time.Second, "the slave to catch up", func() bool {
		return b.Broker().store.MaxPhysOffset() == a.Broker().store.MaxPhysOffset()
	})
	b.Broker().repl.Slave().Close() // the slave falls behind
	for i := range 40 {             // 2.5 MiB: 1 MiB segments seal and upload
		send(a, append([]byte(fmt.Sprintf("lagged-%02d|", i)), bytes.Repeat([]byte{'x'}, 64<<10)...))
	}
	waitCond(t, 30*time.Second, "segments the slave lacks uploaded", func() bool {
		a.Broker().tier.Uploader().Flush()
		m := a.Broker().tier.Uploader().Manifest()
		if m == nil {
			return false
		}
		// From offset 0 on without a gap: segments upload in parallel, and
		// one listed before its predecessor leaves the log's start unread.
		run := m.Contiguous(nil)
		return len(run) > 0 && run[0].Base == 0 && run[len(run)-1].End() > b.Broker().store.MaxPhysOffset()
	})
	cut.down.Store(true)
	waitCond(t, 30*time.Second, "the lagging slave to take over", func() bool { return b.role() == RoleAsyncMaster })
	names, _ := os.ReadDir(bcfg.DataDir)
	stale := false
	for _, n := range names {
		stale = stale || strings.HasPrefix(n.Name(), "store.stale-")
	}
	if !stale {
		t.Fatalf("the lagging copy was not set aside: %v", names)
	}
	prev := lastOff
	send(b, []byte("new-master"))
	if lastOff <= prev {
		t.Fatalf("the new master's first send got queue offset %d, not past the old master's %d", lastOff, prev)
	}
	nb := b.Broker()
	// The bucket's part of the queue, from 0 until the jump past the old
	// master's reservation (the unuploaded tail is gone: async).
	var got [][]byte
	for off := int64(0); ; {
		r := invoke(t, cl, nb.Addr().String(), pullReq("reader", "LG", 0, off, 0, "*"))
		if r.Code != int32(remoting.Success) {
			break
		}
		for body := r.Body; len(body) > 0; {
			size := int(binary.BigEndian.Uint32(body))
			bl := int(binary.BigEndian.Uint32(body[84:]))
			got = append(got, append([]byte(nil), body[88:88+bl]...))
			body = body[size:]
		}
		fmt.Sscan(r.ExtFields["nextBeginOffset"], &off)
	}
	if len(got) < 6 || len(got) >= len(sent)-1 {
		t.Fatalf("%d messages readable from the bucket; want the uploaded part of the %d sent", len(got), len(sent)-1)
	}
	for i := range got {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("offset %d read back differs from what was sent", i)
		}
	}
	r := invoke(t, cl, nb.Addr().String(), pullReq("reader", "LG", 0, lastOff, 0, "*"))
	if r.Code != int32(remoting.Success) || !bytes.Contains(r.Body, []byte("new-master")) {
		t.Fatalf("the new master's message at offset %d: %d %s", lastOff, r.Code, r.Remark)
	}
	cut.down.Store(false)
	waitCond(t, 30*time.Second, "the old master to rejoin as a slave", func() bool { return a.role() == RoleSlave })
	// The new master's log starts past the old master's end (it resumed
	// from the bucket past every reservation): the old master starts its
	// log again there and follows it to its end.
	send(b, []byte("after-rejoin"))
	waitCond(t, 30*time.Second, "the rejoined slave to follow the new master to its end", func() bool {
		sa := a.Broker()
		return sa != nil && sa.store.MaxPhysOffset() == b.Broker().store.MaxPhysOffset()
	})
	if n := b.Broker().haSlaves(); n != 1 {
		t.Fatalf("the new master sees %d slaves, want the old master", n)
	}
}

// TestBrokerFailoverNodeRoles: with failover the lease, not
// STRATAMQ_ROLE, decides: a node configured as slave on a prefix nobody
// holds becomes the master (async_master: no holder recorded a role), and
// a node configured as master that finds the lease held becomes the
// holder's slave at once (brokerId 1).
func TestBrokerFailoverNodeRoles(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	s := runNode(t, failoverConfig(t, RoleSlave), Deps{Bucket: mem})
	waitCond(t, 20*time.Second, "the lone slave to take the free lease", func() bool { return s.role() == RoleAsyncMaster })
	m := runNode(t, failoverConfig(t, RoleSyncMaster), Deps{Bucket: mem})
	waitCond(t, 20*time.Second, "the master-configured node to follow the holder", func() bool {
		return m.role() == RoleSlave && s.Broker().haSlaves() == 1
	})
	if id := m.Broker().cfg.BrokerID; id != 1 {
		t.Fatalf("the follower registers as brokerId %d, want 1", id)
	}
	if s.RoleChanges() != 1 || m.RoleChanges() != 0 {
		t.Fatalf("role changes %d and %d; want 1 (slave to master) and 0 (started as slave)", s.RoleChanges(), m.RoleChanges())
	}
}

// gatedBucket holds every write while held is set, until released.
type gatedBucket struct {
	tier.Bucket
	held atomic.Bool
	gate chan struct{}
}

func (g *gatedBucket) wait() {
	if g.held.Load() {
		<-g.gate
	}
}

func (g *gatedBucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	g.wait()
	return g.Bucket.Put(ctx, key, r, size)
}

func (g *gatedBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, c tier.Cond) (string, error) {
	g.wait()
	return g.Bucket.PutIf(ctx, key, r, size, c)
}

// TestNodeStopDuringRoleChange: a stop (SIGTERM) that lands while a
// generation is stopping for a role change ends the node cleanly (the
// stopping generation stopped cleanly), not with the role change as an
// error.
func TestNodeStopDuringRoleChange(t *testing.T) {
	t.Parallel()
	g := &gatedBucket{Bucket: tier.NewMem(), gate: make(chan struct{})}
	n := NewNode(failoverConfig(t, RoleAsyncMaster), Deps{Bucket: g, Logger: discardLogger()}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	waitCond(t, 20*time.Second, "the first generation", func() bool { return n.role() == RoleAsyncMaster })
	b := n.Broker()
	g.held.Store(true) // the generation's final checkpoint waits
	b.requestRoleChange(&RoleChange{Role: RoleSlave, Reason: "test"})
	waitCond(t, 20*time.Second, "the generation to stop", func() bool { return b.closing.Load() })
	cancel()
	g.held.Store(false)
	close(g.gate)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Node.Run after a stop during a role change: %v; want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the node did not stop")
	}
}
