package broker

import (
	"context"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// runNodeUntil runs a Node until stop is called (or the test ends); its
// Run error is ignored: a node cut off from the bucket stops uncleanly.
func runNodeUntil(t *testing.T, cfg Config, deps Deps) (n *Node, stop func()) {
	t.Helper()
	if deps.Logger == nil {
		deps.Logger = discardLogger()
	}
	n = NewNode(cfg, deps, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Errorf("node %s did not stop", cfg.Listen)
		}
	}
	t.Cleanup(stop)
	waitCond(t, 30*time.Second, "the node's first broker", func() bool { return n.Broker() != nil })
	return n, stop
}

// TestBrokerFailoverKeepsAcknowledgedTopic (issue 29 item 13): a topic
// auto-created and acknowledged on the master that the slave never copied
// (its follow sync ran before the topic existed) reaches the promoted
// master only through the bucket checkpoint. The promoted master must keep
// it on its own disk at once: killed right after the takeover (before its
// periodic config flush) and restarted on the same disk — it then retakes
// its own lease and reads only its local topic table — it still lists the
// topic, so it registers it and clients keep a route to it. Before the fix
// the adopted topic lived only in memory until the next config flush: the
// restarted master had no such topic, the name server no route for it, and
// a client holding a route without queues said "route info not found" for
// good.
func TestBrokerFailoverKeepsAcknowledgedTopic(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	aCut, bCut := &faultBucket{Bucket: mem}, &faultBucket{Bucket: mem}
	acfg := failoverConfig(t, RoleSyncMaster)
	bcfg := failoverConfig(t, RoleSyncMaster) // both prefer master, as the README's example: b starts as a's slave
	bcfg.HASyncInterval, bcfg.ConfigFlush, bcfg.ShutdownTimeout = time.Hour, time.Hour, 2*time.Second
	acfg.ShutdownTimeout = 2 * time.Second // it stops cut off from the bucket
	bfs := vfs.NewMem()
	a, _ := runNodeUntil(t, acfg, Deps{Bucket: aCut})
	waitCond(t, 20*time.Second, "a to be master", func() bool { return a.role() == RoleSyncMaster })
	b, stopB := runNodeUntil(t, bcfg, Deps{Bucket: bCut, FS: bfs})
	waitCond(t, 20*time.Second, "b to follow a", func() bool {
		return b.role() == RoleSlave && a.Broker().haSlaves() == 1
	})
	// The slave's first sync (it copies the master's topics) runs as it
	// starts; the next comes an hour later. Send only after it: one that
	// ran after the sends would copy the topic.
	waitCond(t, 20*time.Second, "b's first sync from a", func() bool { return b.Broker().follower().Rounds() >= 1 })
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	const topic = "AUTO_ACKED"
	for q := range 4 {
		if r := invoke(t, cl, acfg.Listen, sendReq(topic, q, []byte("acked"), "")); r.Code != int32(remoting.Success) {
			t.Fatalf("auto-creating send to queue %d: %d %s", q, r.Code, r.Remark)
		}
	}
	if _, ok := b.Broker().topics.Get(topic); ok {
		t.Fatal("the slave copied the topic from the master: the test needs it to come from the bucket alone")
	}

	// a is lost (cut off from the bucket): b takes over and adopts the
	// topic from the bucket checkpoint.
	aCut.down.Store(true)
	waitCond(t, 30*time.Second, "b to take over", func() bool { return b.role() == RoleSyncMaster })
	if _, ok := b.Broker().topics.Get(topic); !ok {
		t.Fatal("the promoted master does not list the acknowledged topic")
	}

	// b dies at once (kill -9: the disk as it is, nothing more reaches
	// the bucket) and comes back on the same disk.
	bCut.down.Store(true)
	disk := bfs.CrashClone()
	stopB()
	cfg := bcfg
	again, err := New(cfg, Deps{Logger: discardLogger(), Bucket: mem, FS: disk})
	if err != nil {
		t.Fatalf("restart of the promoted master on its disk: %v", err)
	}
	defer again.Close()
	if again.cfg.Role != RoleSyncMaster {
		t.Fatalf("restarted as %s, want the master it was", again.cfg.Role)
	}
	if _, ok := again.topics.Get(topic); !ok {
		t.Fatalf("the restarted master lost topic %s, acknowledged before the failover: it would not register it, "+
			"and clients would find no route to it", topic)
	}
	found := false
	for _, tc := range again.topics.Wrapper().TopicConfigTable {
		found = found || tc.TopicName == topic
	}
	if !found {
		t.Fatalf("the restarted master's registration body lacks topic %s", topic)
	}
}

// TestBrokerFailoverKeepsAddedQueues (issue 29 item 13): the master widens
// a topic from 2 to 4 queues and acknowledges a send to queue 3; the
// slave's copy of the master's topics, up to a sync interval old, still
// says 2 (set here, standing for a sync that has not run since). The
// promoted master must route all 4 queues — the acknowledged message at
// queue 3 included — as the bucket checkpoint lists them. Before the fix it kept the slave's 2: queue 3 was outside the
// route, its message unreachable by consumers and producers alike.
func TestBrokerFailoverKeepsAddedQueues(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	aCut := &faultBucket{Bucket: mem}
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	bcfg.HASyncInterval, bcfg.ConfigFlush = time.Hour, time.Hour
	acfg.ShutdownTimeout = 2 * time.Second // it stops cut off from the bucket
	a, _ := runNodeUntil(t, acfg, Deps{Bucket: aCut})
	waitCond(t, 20*time.Second, "a to be master", func() bool { return a.role() == RoleSyncMaster })
	b, _ := runNodeUntil(t, bcfg, Deps{Bucket: mem})
	waitCond(t, 20*time.Second, "b to follow a", func() bool { return b.role() == RoleSlave && a.Broker().haSlaves() == 1 })
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	const topic = "WIDENED"
	create := func(n int32) {
		h := remoting.CreateTopicRequestHeader{Topic: topic, DefaultTopic: "TBW102", ReadQueueNums: n, WriteQueueNums: n,
			Perm: PermRead | PermWrite, TopicFilterType: "SINGLE_TAG"}
		if r := invoke(t, cl, acfg.Listen, remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil)); r.Code != int32(remoting.Success) {
			t.Fatalf("create %s with %d queues: %d %s", topic, n, r.Code, r.Remark)
		}
	}
	create(2)
	stale, _ := a.Broker().topics.Get(topic)
	create(4)
	if r := invoke(t, cl, acfg.Listen, sendReq(topic, 3, []byte("in the added queue"), "")); r.Code != int32(remoting.Success) {
		t.Fatalf("send to queue 3: %d %s", r.Code, r.Remark)
	}
	// The slave's copy of the topics as a sync before the widening left it.
	b.Broker().topics.Put(stale)

	aCut.down.Store(true)
	waitCond(t, 30*time.Second, "b to take over", func() bool { return b.role() == RoleSyncMaster })
	nb := b.Broker()
	tc, ok := nb.topics.Get(topic)
	if !ok || tc.WriteQueueNums < 4 || tc.ReadQueueNums < 4 {
		t.Fatalf("the promoted master routes %s with %+v; want the 4 queues the master acknowledged sends to", topic, tc)
	}
	got, bad := readAll(t, nb, cl, topic, 3, 1)
	if bad != nil || len(got) != 1 || string(got[0]) != "in the added queue" {
		t.Fatalf("pull %s/3 on the promoted master: %q %+v", topic, got, bad)
	}
}
