package broker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// lossNode is a Node on an in-memory disk whose bucket access can be cut,
// for tests that crash it: kill stands for kill -9 or a power loss.
type lossNode struct {
	slowLease atomic.Int64 // ns each write of the lease object takes
	cpDown    atomic.Bool  // writes of the bucket checkpoint fail
	t         *testing.T
	n         *Node
	cfg       Config
	disk      *vfs.Mem
	bucket    *faultBucket
	cancel    context.CancelFunc
	done      chan error
	dead      bool
}

// startLossNode runs a Node with cfg on disk over bucket until it is
// killed or stopped (or the test ends).
// boot names the machine boot it runs in (a power loss starts another).
func startLossNode(t *testing.T, cfg Config, disk *vfs.Mem, bucket tier.Bucket, boot string) *lossNode {
	t.Helper()
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 2 * time.Second // a killed node's stop fails against the cut bucket
	}
	ln := &lossNode{t: t, cfg: cfg, disk: disk, done: make(chan error, 1)}
	ln.bucket = &faultBucket{Bucket: &slowLeaseBucket{Bucket: bucket, delay: &ln.slowLease, cpDown: &ln.cpDown}}
	ln.n = NewNode(cfg, Deps{FS: disk, Bucket: ln.bucket, Logger: discardLogger(), BootID: boot}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ln.cancel = cancel
	go func() { ln.done <- ln.n.Run(ctx) }()
	t.Cleanup(func() {
		if !ln.dead {
			ln.cancel()
			ln.dead = true
			select {
			case <-ln.done:
			case <-time.After(60 * time.Second):
				t.Errorf("node %s did not stop", cfg.Listen)
			}
		}
	})
	waitCond(t, 30*time.Second, "the node's first broker", func() bool { return ln.n.Broker() != nil })
	return ln
}

// kill takes the disk as a crash leaves it (powerLoss: only what was
// synced; else everything written, the page cache surviving a process
// crash), then cuts the node off the bucket and stops it without waiting
// (what it does while it stops reaches neither the image nor the bucket).
// It returns the image; a node restarted on it takes fresh ports
// (restartConfig), as the dying one may still hold its own for a moment.
func (ln *lossNode) kill(powerLoss bool) *vfs.Mem {
	ln.t.Helper()
	var img *vfs.Mem
	if powerLoss {
		img = ln.disk.CrashClone()
	} else {
		img = ln.disk.ProcessCrashClone()
	}
	ln.bucket.down.Store(true)
	ln.cancel()
	return img
}

// restartConfig is cfg with fresh ports, for a node restarted on a killed
// one's disk image.
func restartConfig(t *testing.T, cfg Config) Config {
	cfg.Listen, cfg.HAListen = haTestAddr(t), haTestAddr(t)
	return cfg
}

// stop stops the node gracefully and waits for it; it returns Run's error.
func (ln *lossNode) stop() error {
	ln.t.Helper()
	ln.dead = true
	ln.cancel()
	select {
	case err := <-ln.done:
		return err
	case <-time.After(60 * time.Second):
		ln.t.Fatalf("node %s did not stop", ln.cfg.Listen)
		return nil
	}
}

// slowLeaseBucket makes every write of the lease object take *delay: a
// node whose takeover lands later than another's.
type slowLeaseBucket struct {
	tier.Bucket
	delay  *atomic.Int64
	cpDown *atomic.Bool // and writes of the checkpoint fail while set
}

func (s *slowLeaseBucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if s.cpDown.Load() && strings.Contains(key, "meta/checkpoint") {
		return errUnreachable
	}
	return s.Bucket.Put(ctx, key, r, size)
}

func (s *slowLeaseBucket) PutIf(ctx context.Context, key string, r io.Reader, size int64, c tier.Cond) (string, error) {
	if d := time.Duration(s.delay.Load()); d > 0 && strings.HasSuffix(key, "meta/lease.json") {
		time.Sleep(d)
	}
	if s.cpDown.Load() && strings.Contains(key, "meta/checkpoint") {
		return "", errUnreachable
	}
	return s.Bucket.PutIf(ctx, key, r, size, c)
}

// ackedMsg is a message a broker answered SEND_OK.
type ackedMsg struct {
	topic string
	queue int
	off   int64
	body  []byte
}

// sendAcked sends body to topic/queue on node and returns its ack (ok
// false when it was not SEND_OK).
func sendAcked(t *testing.T, cl *remoting.Client, n *Node, topic string, queue int, body string) (ackedMsg, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cl.Invoke(ctx, n.cfg.Listen, sendReq(topic, queue, []byte(body), ""))
	if err != nil || r.Code != int32(remoting.Success) {
		return ackedMsg{}, false
	}
	off, _ := strconv.ParseInt(r.ExtFields["queueOffset"], 10, 64)
	return ackedMsg{topic: topic, queue: queue, off: off, body: []byte(body)}, true
}

// mustAck is sendAcked that fails the test unless the send is
// acknowledged.
func mustAck(t *testing.T, cl *remoting.Client, n *Node, topic string, queue int, body string) ackedMsg {
	t.Helper()
	m, ok := sendAcked(t, cl, n, topic, queue, body)
	if !ok {
		t.Fatalf("send %s to %s/%d was not acknowledged", body, topic, queue)
	}
	return m
}

// checkAcked fails the test unless every message in acks is readable on
// b at the queue offset its ack named, with its body.
func checkAcked(t *testing.T, cl *remoting.Client, b *Broker, acks []ackedMsg) {
	t.Helper()
	type qk struct {
		topic string
		queue int
	}
	logs := map[qk]map[int64][]byte{}
	for _, a := range acks {
		k := qk{a.topic, a.queue}
		if _, ok := logs[k]; !ok {
			got, bad := readAt(t, b, cl, a.topic, a.queue, int(b.store.MaxQueueOffset(a.topic, int32(a.queue))))
			if bad != nil {
				t.Fatalf("pull %s/%d: %d %s", a.topic, a.queue, bad.Code, bad.Remark)
			}
			logs[k] = byOffset(got)
		}
		if got, ok := logs[k][a.off]; !ok || !bytes.Equal(got, a.body) {
			have := "nothing"
			if ok {
				have = fmt.Sprintf("%q", got)
			}
			t.Fatalf("acknowledged %q at %s/%d offset %d: the master (%s) has %s there (queue ends at %d)",
				a.body, a.topic, a.queue, a.off, b.cfg.Role, have, b.store.MaxQueueOffset(a.topic, int32(a.queue)))
		}
	}
}

// TestBrokerPromotedCopyJudgedByRecordEnds: a slave's active segment is
// zero-filled ahead of its records, and a crash leaves the zeros. The
// slave dies uncleanly, its master acknowledges five more messages and
// stops cleanly (uploads everything, releases the lease), and the slave's
// node restarts as master. Its copy lacks the five: it must restore them
// from the bucket and never hand their queue offsets out again. Judged by
// file sizes, the zeros made the copy look as long as the bucket's log.
func TestBrokerPromotedCopyJudgedByRecordEnds(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleAsyncMaster), failoverConfig(t, RoleSlave)
	a := startLossNode(t, acfg, vfs.NewMem(), bucket, "boot-a")
	b := startLossNode(t, bcfg, vfs.NewMem(), bucket, "boot-b")
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	var acks []ackedMsg
	send := func(n *Node, body string) { acks = append(acks, mustAck(t, cl, n, "ZT", 0, body)) }
	for i := range 10 {
		send(a.n, fmt.Sprintf("both-%02d", i))
	}
	waitCond(t, 20*time.Second, "the slave to hold the master's log", func() bool {
		return b.n.Broker().store.MaxPhysOffset() == a.n.Broker().store.MaxPhysOffset()
	})
	img := b.kill(false)
	for i := range 5 {
		send(a.n, fmt.Sprintf("master-only-%02d", i))
	}
	if err := a.stop(); err != nil {
		t.Fatalf("the master's clean stop: %v", err)
	}
	bcfg.Role = RoleAsyncMaster
	b2 := startLossNode(t, restartConfig(t, bcfg), img, bucket, "boot-b")
	waitCond(t, 30*time.Second, "the restarted node to be master", func() bool { return b2.n.role() == RoleAsyncMaster })
	checkAcked(t, cl, b2.n.Broker(), acks)
	m, ok := sendAcked(t, cl, b2.n, "ZT", 0, "after")
	if !ok || m.off < int64(len(acks)) {
		t.Fatalf("the new master's first send: ok %v at queue offset %d; want an offset past the %d acknowledged", ok, m.off, len(acks))
	}
}

// TestBrokerPowerCutSyncMasterLeavesTheLeaseToItsSlave: a sync_master
// with flush=async acknowledges once its slave holds a message, with the
// message only in its page cache. A power cut; the master's machine comes
// back within the lease's TTL. Its log lacks what the slave acknowledged,
// so it must not take its lease back: the slave, holding more, takes the
// lease, and the old master follows it. Every acknowledged message stays
// at its queue offset. (The master used to retake its own lease at once,
// start a new epoch at its shorter end, and the slave cut the
// acknowledged tail.)
func TestBrokerPowerCutSyncMasterLeavesTheLeaseToItsSlave(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	acfg.FlushInterval = time.Hour // acknowledged messages stay in the page cache
	a := startLossNode(t, acfg, vfs.NewMem(), bucket, "boot-a1")
	b := startLossNode(t, bcfg, vfs.NewMem(), bucket, "boot-b1")
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	waitCond(t, 20*time.Second, "the slave to connect", func() bool { return a.n.Broker().haSlaves() == 1 })
	var acks []ackedMsg
	for i := range 20 {
		m, ok := sendAcked(t, cl, a.n, "PC", i%2, fmt.Sprintf("acked-%02d", i))
		if !ok {
			t.Fatalf("send %d to the sync_master with its slave was not acknowledged", i)
		}
		acks = append(acks, m)
	}
	img := a.kill(true)
	a2 := startLossNode(t, restartConfig(t, acfg), img, bucket, "boot-a2")
	var master *Node
	waitCond(t, 30*time.Second, "a master with the other node as its slave", func() bool {
		for _, n := range []*Node{b.n, a2.n} {
			if n.role() == RoleSyncMaster && n.Broker().haSlaves() == 1 {
				master = n
				return true
			}
		}
		return false
	})
	checkAcked(t, cl, master.Broker(), acks)
	if master != b.n {
		t.Fatal("the restarted master took its lease back over the slave that holds more")
	}
	for i := range 4 {
		m, ok := sendAcked(t, cl, b.n, "PC", i%2, fmt.Sprintf("after-%02d", i))
		if !ok {
			t.Fatalf("send %d to the new sync_master was not acknowledged", i)
		}
		acks = append(acks, m)
	}
	checkAcked(t, cl, b.n.Broker(), acks)
	waitCond(t, 20*time.Second, "the old master to hold the new master's log", func() bool {
		return a2.n.Broker().store.MaxPhysOffset() == b.n.Broker().store.MaxPhysOffset()
	})
}

// TestBrokerLaggingSlaveNeverWinsOverOneThatAcked: a sync_master with two
// failover slaves; slave C stops receiving, slave B acknowledges every
// later send. The master dies. C, whose takeover would land first, must
// leave the lease to B: B holds what was acknowledged. The
// new master holds every acknowledged message, and C follows it.
func TestBrokerLaggingSlaveNeverWinsOverOneThatAcked(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	acfg := failoverConfig(t, RoleSyncMaster)
	a := startLossNode(t, acfg, vfs.NewMem(), bucket, "boot-a")
	b := startLossNode(t, failoverConfig(t, RoleSlave), vfs.NewMem(), bucket, "boot-b")
	c := startLossNode(t, failoverConfig(t, RoleSlave), vfs.NewMem(), bucket, "boot-c")
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	waitCond(t, 20*time.Second, "both slaves to connect", func() bool { return a.n.Broker().haSlaves() == 2 })
	var acks []ackedMsg
	send := func(body string) { acks = append(acks, mustAck(t, cl, a.n, "LS", 0, body)) }
	for i := range 5 {
		send(fmt.Sprintf("both-%02d", i))
	}
	waitCond(t, 20*time.Second, "C to hold the first messages", func() bool {
		return c.n.Broker().store.MaxPhysOffset() == a.n.Broker().store.MaxPhysOffset()
	})
	c.n.Broker().repl.Slave().Close() // C stops receiving
	for i := range 10 {
		send(fmt.Sprintf("b-only-%02d", i))
	}
	b.slowLease.Store(int64(500 * time.Millisecond)) // B's takeover lands after C's
	a.kill(true)
	var master *Node
	waitCond(t, 30*time.Second, "a new master with the other slave following", func() bool {
		for _, n := range []*Node{b.n, c.n} {
			if n.role() == RoleSyncMaster && n.Broker().haSlaves() == 1 {
				master = n
				return true
			}
		}
		return false
	})
	checkAcked(t, cl, master.Broker(), acks)
	if master != b.n {
		t.Fatal("the lagging slave C took the lease over B, which acknowledged more")
	}
	b.slowLease.Store(0)
	// It numbers the queue past every offset acknowledged before (past the
	// bucket checkpoint's reservation: the old master died uncleanly).
	m, ok := sendAcked(t, cl, b.n, "LS", 0, "after")
	if !ok || m.off < int64(len(acks)) {
		t.Fatalf("the new master's first send: ok %v at offset %d, want at or past %d", ok, m.off, len(acks))
	}
	checkAcked(t, cl, b.n.Broker(), append(acks, m))
}

// sameLogs fails the test unless a's and b's commitlogs hold the same
// bytes where both have them, and end at the same offset.
func sameLogs(t *testing.T, a, b *Broker) {
	t.Helper()
	end := a.store.MaxPhysOffset()
	if e := b.store.MaxPhysOffset(); e != end {
		t.Fatalf("logs end at %d and %d", end, e)
	}
	from := max(a.store.MinPhysOffset(), b.store.MinPhysOffset())
	pa, pb := make([]byte, end-from), make([]byte, end-from)
	for _, x := range []struct {
		b *Broker
		p []byte
	}{{a, pa}, {b, pb}} {
		if _, err := x.b.store.ReadLog(context.Background(), from, x.p); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(pa, pb) {
		i := 0
		for i < len(pa) && pa[i] == pb[i] {
			i++
		}
		t.Fatalf("the slave's log differs from its master's at offset %d", from+int64(i))
	}
}

// TestBrokerRejoinBeforeTheNewEpochIsListed: an async master acknowledges
// messages its lagging slave never got; cut off from the bucket, it loses
// the lease to the slave, whose first checkpoint (listing where its epoch
// began) is late. The old master rejoins meanwhile. Its log past the new
// epoch's start was never the new master's: it must not be recorded as a
// replica of the new epoch and followed from its end; the master itself
// tells it where to cut. Its log then equals the new master's.
func TestBrokerRejoinBeforeTheNewEpochIsListed(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	a := startLossNode(t, failoverConfig(t, RoleAsyncMaster), vfs.NewMem(), bucket, "boot-a")
	b := startLossNode(t, failoverConfig(t, RoleSlave), vfs.NewMem(), bucket, "boot-b")
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	var acks []ackedMsg
	send := func(n *Node, body string) { acks = append(acks, mustAck(t, cl, n, "RJ", 0, body)) }
	for i := range 5 {
		send(a.n, fmt.Sprintf("both-%02d", i))
	}
	waitCond(t, 20*time.Second, "the slave to hold the first messages", func() bool {
		return b.n.Broker().store.MaxPhysOffset() == a.n.Broker().store.MaxPhysOffset()
	})
	b.n.Broker().repl.Slave().Close() // the slave stops receiving
	for i := range 5 {
		send(a.n, fmt.Sprintf("a-only-%02d", i)) // async: acknowledged, never replicated
	}
	acks = acks[:5] // an async master's unreplicated tail is what a failover may cut
	b.cpDown.Store(true)
	a.bucket.down.Store(true)
	waitCond(t, 30*time.Second, "the slave to take over", func() bool { return b.n.role() == RoleAsyncMaster })
	a.bucket.down.Store(false)
	waitCond(t, 30*time.Second, "the old master to rejoin as a slave", func() bool {
		return a.n.role() == RoleSlave && a.n.Broker().repl.Slave() != nil
	})
	b.cpDown.Store(false)
	waitCond(t, 30*time.Second, "the new master to acknowledge", func() bool {
		_, ok := sendAcked(t, cl, b.n, "RJ", 0, "probe")
		return ok
	})
	for i := range 10 {
		send(b.n, fmt.Sprintf("new-%02d", i))
	}
	waitCond(t, 30*time.Second, "the old master to follow the new one to its end", func() bool {
		sa := a.n.Broker()
		return sa != nil && sa.store.MaxPhysOffset() == b.n.Broker().store.MaxPhysOffset()
	})
	sameLogs(t, a.n.Broker(), b.n.Broker())
	checkAcked(t, cl, b.n.Broker(), acks)
}

// TestBrokerSlaveKeepsItsEpochWhenTheBucketIsUnreadable: a slave that
// cannot read the lease or the checkpoint at start must not record its
// data dir as agreeing with epoch 0 (a hello with epoch 0 used to pass the
// master's divergence check): it keeps the epoch it last agreed with.
func TestBrokerSlaveKeepsItsEpochWhenTheBucketIsUnreadable(t *testing.T) {
	t.Parallel()
	disk := vfs.NewMem()
	cfg := roleConfig(failoverConfig(t, RoleSlave))
	if err := vfs.MkdirAllDurable(disk, cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	path := cfg.DataDir + "/" + offsets.WriterStateFile
	if err := offsets.WriteWriterState(disk, path, offsets.WriterState{Broker: "broker-a", Instance: "0123456789abcdef", Epoch: 3, Replica: true}); err != nil {
		t.Fatal(err)
	}
	bucket := &faultBucket{Bucket: tier.NewMem(), match: func(key string) bool {
		return strings.HasSuffix(key, "meta/lease.json") || strings.Contains(key, "meta/checkpoint")
	}}
	bucket.down.Store(true)
	b, err := New(cfg, Deps{FS: disk, Bucket: bucket, Logger: discardLogger()})
	t.Logf("New: %v", err) // it may refuse: the manifest is readable, the rest is not
	if err == nil {
		defer b.Close()
		if got := b.fo.Agreed(); got != 3 {
			t.Fatalf("the slave's hello would say epoch %d, want the 3 it last agreed with", got)
		}
	}
	w, err := offsets.ReadWriterState(disk, path)
	if err != nil || w.Epoch != 3 {
		t.Fatalf("writer.json after a start with the bucket's lease and checkpoint unreadable: %+v %v; want epoch 3", w, err)
	}
}
