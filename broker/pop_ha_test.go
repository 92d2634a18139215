package broker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// TestPopStateAfterPromote: a slave promoted over its master takes the POP
// state over through the bucket checkpoint: messages in flight on the old
// master stay in flight with their handles (an ack made with one is
// accepted), an acked one is not delivered again, and one whose invisible
// time passes is delivered again by the new master with its attempt
// counted.
func TestPopStateAfterPromote(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	for _, c := range []*Config{&acfg, &bcfg} {
		c.LeaseTTL = time.Minute
	}
	a := runNode(t, acfg, Deps{Bucket: mem})
	b := runNode(t, bcfg, Deps{Bucket: mem})
	healthy := func(master, slave *Node) {
		t.Helper()
		waitCond(t, 20*time.Second, "the master to see its slave", func() bool {
			m := master.Broker()
			return master.role() == RoleSyncMaster && slave.role() == RoleSlave && m != nil && m.haSlaves() == 1
		})
	}
	healthy(a, b)
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	for i := range 3 {
		if r := invoke(t, cl, acfg.Listen, sendReq("PopHA", 0, popBody(i), "")); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	if _, err := b.Broker().PopReceive(context.Background(), PopRequest{Group: "GHA", Topic: "PopHA", Invisible: time.Minute}); err == nil {
		t.Fatal("a slave served a POP receive")
	}
	am := a.Broker()
	var got []PopMessage
	for i, inv := range []time.Duration{time.Minute, time.Minute, 2 * time.Second} {
		ms := popRecv(t, am, PopRequest{Group: "GHA", Topic: "PopHA", MaxMessages: 1, Invisible: inv})
		if len(ms) != 1 || string(ms[0].Record.Body) != string(popBody(i)) {
			t.Fatalf("receive %d on the master: %v", i, popBodies(ms))
		}
		got = append(got, ms[0])
	}
	if err := am.PopAck("GHA", "PopHA", got[0].Handle); err != nil {
		t.Fatal(err)
	}
	if r := invoke(t, cl, bcfg.Listen, remoting.NewRequest(remoting.PromoteBroker, nil, nil)); r.Code != int32(remoting.Success) {
		t.Fatalf("promote: %d %s", r.Code, r.Remark)
	}
	healthy(b, a)
	nb := b.Broker()
	if n := nb.PopInflight("GHA"); n != 2 {
		t.Fatalf("the promoted master has %d in flight, want 2", n)
	}
	if err := nb.PopAck("GHA", "PopHA", got[1].Handle); err != nil {
		t.Fatalf("a handle the old master gave out: %v", err)
	}
	again, err := nb.PopReceive(context.Background(), PopRequest{Group: "GHA", Topic: "PopHA", QueueID: -1,
		Invisible: time.Minute, Wait: 20 * time.Second})
	if err != nil || !slices.Equal(popBodies(again), []string{string(popBody(2))}) || again[0].Attempt != 2 {
		t.Fatalf("after the invisible time on the promoted master: %v %v", popBodies(again), err)
	}
}

// TestPopDeadLetteredOnceAcrossPromote: a sync_master dead-letters a POP
// message after its last attempt; its slave holds the DLQ copy, the bucket
// does not list it yet, so the entry stays in flight (pop: done only once
// the copy is durable for every fault). The slave is promoted: the old
// master's handover uploads everything and writes its final checkpoint,
// when the copy is in the bucket. The promoted master takes the POP state
// from that checkpoint and must not dead-letter the message a second time.
// (Revive runs by hand: the revive loop's interval is an hour.)
func TestPopDeadLetteredOnceAcrossPromote(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	for _, c := range []*Config{&acfg, &bcfg} {
		c.LeaseTTL = time.Minute
		c.CheckpointInterval = time.Hour
		c.PopReviveInterval = time.Hour
		c.ConfigFlush = time.Hour
	}
	a := runNode(t, acfg, Deps{Bucket: mem})
	b := runNode(t, bcfg, Deps{Bucket: mem})
	waitCond(t, 20*time.Second, "the master to see its slave", func() bool {
		m := a.Broker()
		return a.role() == RoleSyncMaster && b.role() == RoleSlave && m != nil && m.haSlaves() == 1
	})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	if r := invoke(t, cl, acfg.Listen, sendReq("PopDL", 0, popBody(0), "")); r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	am := a.Broker()
	if ms := popRecv(t, am, PopRequest{Group: "GDL", Topic: "PopDL", MaxMessages: 1, Invisible: 500 * time.Millisecond, MaxAttempts: 1}); len(ms) != 1 {
		t.Fatalf("received %d", len(ms))
	}
	dlq := DLQGroupTopicPrefix + "GDL"
	waitCond(t, 20*time.Second, "the message dead-lettered, its copy synced and held by the slave", func() bool {
		am.pop.Revive(context.Background())
		end := am.store.MaxPhysOffset()
		return delivered(am, dlq, 0, 1) && am.slaveHeld() >= end && am.store.FlushedPhysOffset() >= end
	})
	am.pop.Revive(context.Background())
	if r := invoke(t, cl, bcfg.Listen, remoting.NewRequest(remoting.PromoteBroker, nil, nil)); r.Code != int32(remoting.Success) {
		t.Fatalf("promote: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 20*time.Second, "the slave promoted", func() bool {
		return b.role() == RoleSyncMaster && a.role() == RoleSlave && b.Broker() != nil
	})
	nb := b.Broker()
	nb.pop.Revive(context.Background())
	if got, n := queueBodies(t, nb, dlq, 0), nb.PopInflight("GDL"); !slices.Equal(got, []string{"message-0"}) || n != 0 {
		t.Fatalf("on the promoted master: DLQ %q, %d in flight; want the message once, nothing in flight", got, n)
	}
}
