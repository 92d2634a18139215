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
