package broker

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// pullNow is pullReq without suspension: answered at once.
func pullNow(topic string, queue int, offset int64) *remoting.Command {
	h := remoting.PullMessageRequestHeader{ConsumerGroup: "g", Topic: topic, QueueID: int32(queue), QueueOffset: offset,
		MaxMsgNums: 32, SysFlag: pullFlagSubscription, Subscription: "*", ExpressionType: "TAG"}
	return remoting.NewRequest(remoting.PullMessage, h.Encode(), nil)
}

// pulledBodies are the bodies of a pull answer's records, in order.
func pulledBodies(t *testing.T, resp *remoting.Command) []string {
	t.Helper()
	var out []string
	for b := resp.Body; len(b) > 0; {
		rec, n, err := store.DecodeRecord(b)
		if err != nil {
			t.Fatalf("pull answer: %v", err)
		}
		out = append(out, string(rec.Body))
		b = b[n:]
	}
	return out
}

// expectPull checks a pull answer: its code, bodies, nextBeginOffset and
// maxOffset.
func expectPull(t *testing.T, what string, resp *remoting.Command, code remoting.ResponseCode, bodies []string, next, maxOff int64) {
	t.Helper()
	got := pulledBodies(t, resp)
	if resp.Code != int32(code) || len(got) != len(bodies) ||
		resp.ExtFields["nextBeginOffset"] != strconv.FormatInt(next, 10) || resp.ExtFields["maxOffset"] != strconv.FormatInt(maxOff, 10) {
		t.Fatalf("%s: code %d (%s), bodies %q, nextBeginOffset %s, maxOffset %s; want code %d, bodies %q, nextBeginOffset %d, maxOffset %d",
			what, resp.Code, resp.Remark, got, resp.ExtFields["nextBeginOffset"], resp.ExtFields["maxOffset"], code, bodies, next, maxOff)
	}
	for i := range got {
		if got[i] != bodies[i] {
			t.Fatalf("%s: bodies %q, want %q", what, got, bodies)
		}
	}
}

// queueOffsetReq is GET_MAX_OFFSET (30) or, with ts > 0,
// SEARCH_OFFSET_BY_TIMESTAMP (29) of topic/queue; it returns the offset.
func queueOffsetReq(t *testing.T, cl *remoting.Client, addr, topic string, queue int32, ts int64) int64 {
	t.Helper()
	var req *remoting.Command
	if ts > 0 {
		h := remoting.SearchOffsetRequestHeader{Topic: topic, QueueID: queue, Timestamp: ts}
		req = remoting.NewRequest(remoting.SearchOffsetByTimestamp, h.Encode(), nil)
	} else {
		h := remoting.GetMaxOffsetRequestHeader{Topic: topic, QueueID: queue}
		req = remoting.NewRequest(remoting.GetMaxOffset, h.Encode(), nil)
	}
	resp := invoke(t, cl, addr, req)
	off, err := strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
	if resp.Code != int32(remoting.Success) || err != nil {
		t.Fatalf("request %d: code %d (%s), offset %q", req.Code, resp.Code, resp.Remark, resp.ExtFields["offset"])
	}
	return off
}

// A sync_master's consumers read only what a slave holds: with a mute
// slave (it acks nothing after its hello) a message stored but not
// acknowledged (FLUSH_SLAVE_TIMEOUT) is not pulled — the queue ends before
// it, for the pull, its maxOffset, GET_MAX_OFFSET and the timestamp search
// — and a held pull waits for it (a dispatch does not answer it) until a
// real slave acks it, then returns it.
func TestSyncMasterPullsSeeOnlyAcked(t *testing.T) {
	t.Parallel()
	haAddr := haTestAddr(t)
	m, cl := startBroker(t, func(c *Config) {
		c.Role, c.HAListen, c.HATimeout = RoleSyncMaster, haAddr, 300*time.Millisecond
	})
	addr := m.Addr().String()
	_, _, stopSlave := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		Role: RoleSlave, HAMaster: haAddr, BrokerID: 1}, Deps{Logger: discardLogger()})
	waitCond(t, 20*time.Second, "the slave to connect", func() bool { return len(m.HAStatus().Slaves) == 1 })
	for i := range 2 {
		if r := invoke(t, cl, addr, sendReq("RB", 0, []byte("acked"+strconv.Itoa(i)), "")); r.Code != int32(remoting.Success) {
			t.Fatalf("send %d with a slave: code %d (%s)", i, r.Code, r.Remark)
		}
	}
	muteSlave(t, haAddr, m.Store().MaxPhysOffset())
	waitCond(t, 20*time.Second, "the mute slave to connect", func() bool { return len(m.HAStatus().Slaves) == 2 })
	stopSlave()
	waitCond(t, 20*time.Second, "the real slave to go", func() bool { return len(m.HAStatus().Slaves) == 1 })
	// A pull at the end of the queue is held; an unacknowledged message's
	// dispatch wakes it, and finding the queue (as it sees it) still ending
	// at 2 it waits on.
	type result struct {
		resp *remoting.Command
		err  error
	}
	got := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := cl.Invoke(ctx, addr, pullReq("g", "RB", 0, 2, 25000, "*"))
		got <- result{r, err}
	}()
	waitCond(t, 10*time.Second, "the pull to be held", func() bool { return m.hold.count() == 1 })
	notAnswered := func(when string) {
		t.Helper()
		waitCond(t, 10*time.Second, "the pull to be held again "+when, func() bool { return m.hold.count() == 1 })
		select {
		case r := <-got:
			t.Fatalf("the held pull was answered %s: %+v %v", when, r.resp, r.err)
		default:
		}
	}
	if r := invoke(t, cl, addr, sendReq("RB", 0, []byte("hidden0"), "")); r.Code != int32(remoting.FlushSlaveTimeout) {
		t.Fatalf("send with a mute slave: code %d (%s), want FLUSH_SLAVE_TIMEOUT", r.Code, r.Remark)
	}
	notAnswered("after a send no slave acked")
	if mx := m.Store().MaxQueueOffset("RB", 0); mx != 3 {
		t.Fatalf("stored queue end %d, want 3", mx)
	}
	expectPull(t, "pull from 0", invoke(t, cl, addr, pullNow("RB", 0, 0)), remoting.Success, []string{"acked0", "acked1"}, 2, 2)
	expectPull(t, "pull from 2", invoke(t, cl, addr, pullNow("RB", 0, 2)), remoting.PullNotFound, nil, 2, 2)
	if off := queueOffsetReq(t, cl, addr, "RB", 0, 0); off != 2 {
		t.Fatalf("GET_MAX_OFFSET %d, want 2 (the unacknowledged message at 2 is not visible)", off)
	}
	// The mute slave, sent the first and silent since, is stalled:
	// SLAVE_NOT_AVAILABLE at once (or the timeout, if not stalled yet).
	if r := invoke(t, cl, addr, sendReq("RB", 0, []byte("hidden1"), "")); r.Code != int32(remoting.FlushSlaveTimeout) && r.Code != int32(remoting.SlaveNotAvailable) {
		t.Fatalf("send with a mute slave: code %d (%s), want FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE", r.Code, r.Remark)
	}
	notAnswered("after a second send no slave acked")
	if off := queueOffsetReq(t, cl, addr, "RB", 0, time.Now().Add(time.Hour).UnixMilli()); off != 2 {
		t.Fatalf("SEARCH_OFFSET_BY_TIMESTAMP past the end: %d, want 2 (stored %d)", off, m.Store().MaxQueueOffset("RB", 0))
	}

	// A real slave catches up and acks both: the held pull returns them.
	runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		Role: RoleSlave, HAMaster: haAddr, BrokerID: 1}, Deps{Logger: discardLogger()})
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		expectPull(t, "the held pull once a slave acked", r.resp, remoting.Success, []string{"hidden0", "hidden1"}, 4, 4)
	case <-time.After(20 * time.Second):
		t.Fatal("the held pull was not answered once a slave acked (its hold is 25 s)")
	}
	if off := queueOffsetReq(t, cl, addr, "RB", 0, 0); off != 4 {
		t.Fatalf("GET_MAX_OFFSET once acked: %d, want 4", off)
	}
}

// A sync_master without a slave (sends answered SLAVE_NOT_AVAILABLE)
// stores what it is sent but shows consumers none of it: a failover to a
// slave without those messages would hand their queue offsets to others
// (found by the fault simulator). What it had when it started stays
// visible; a slave that joins and acks makes the rest visible, and wakes a
// held pull.
func TestSyncMasterAloneShowsOnlyWhatASlaveHolds(t *testing.T) {
	t.Parallel()
	dir, haAddr := t.TempDir(), haTestAddr(t)
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", SegmentSize: 8 << 20, AutoCreateTopic: true,
		Role: RoleSyncMaster, HAListen: haAddr}
	m, cl := startBroker(t, func(c *Config) { *c = cfg })
	addr := m.Addr().String()
	if r := invoke(t, cl, addr, sendReq("RA", 0, []byte("alone0"), "")); r.Code != int32(remoting.SlaveNotAvailable) {
		t.Fatalf("send without a slave: code %d (%s), want SLAVE_NOT_AVAILABLE", r.Code, r.Remark)
	}
	expectPull(t, "pull from 0 while alone", invoke(t, cl, addr, pullNow("RA", 0, 0)), remoting.PullNotFound, nil, 0, 0)
	if off := queueOffsetReq(t, cl, addr, "RA", 0, 0); off != 0 {
		t.Fatalf("GET_MAX_OFFSET while alone: %d, want 0", off)
	}
	got := make(chan *remoting.Command, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := cl.Invoke(ctx, addr, pullReq("g", "RA", 0, 0, 25000, "*"))
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	waitCond(t, 10*time.Second, "the pull to be held", func() bool { return m.hold.count() == 1 })
	runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		Role: RoleSlave, HAMaster: haAddr, BrokerID: 1}, Deps{Logger: discardLogger()})
	select {
	case r := <-got:
		if r != nil {
			expectPull(t, "the held pull once a slave acked", r, remoting.Success, []string{"alone0"}, 1, 1)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held pull was not answered once a slave acked")
	}
}

// An async_master does not bound its consumers by its slaves' acks: with a
// mute slave, every message is pulled and counted by GET_MAX_OFFSET.
func TestAsyncMasterPullsIgnoreAcks(t *testing.T) {
	t.Parallel()
	haAddr := haTestAddr(t)
	m, cl := startBroker(t, func(c *Config) { c.Role, c.HAListen = RoleAsyncMaster, haAddr })
	addr := m.Addr().String()
	for i := range 2 {
		if i == 1 { // the broker serves: its HA listener is up
			muteSlave(t, haAddr, m.Store().MaxPhysOffset())
			waitCond(t, 20*time.Second, "the mute slave to connect", func() bool { return len(m.HAStatus().Slaves) == 1 })
		}
		if r := invoke(t, cl, addr, sendReq("RS", 0, []byte("async"+strconv.Itoa(i)), "")); r.Code != int32(remoting.Success) {
			t.Fatalf("send %d: code %d (%s)", i, r.Code, r.Remark)
		}
	}
	expectPull(t, "pull from 0", invoke(t, cl, addr, pullNow("RS", 0, 0)), remoting.Success, []string{"async0", "async1"}, 2, 2)
	if off := queueOffsetReq(t, cl, addr, "RS", 0, 0); off != 2 {
		t.Fatalf("GET_MAX_OFFSET %d, want 2", off)
	}
}

// A held SQL92 pull under the read bound that finds only messages it does
// not take before a hidden one waits for the bound, not spinning: its
// re-park's check (a message past its offset is stored) sees that message
// is hidden. The slave here is a fake that acks what the test says.
func TestSyncMasterHeldSQLPullWaitsForTheBound(t *testing.T) {
	t.Parallel()
	haAddr := haTestAddr(t)
	m, cl := startBroker(t, func(c *Config) {
		c.Role, c.HAListen, c.HATimeout = RoleSyncMaster, haAddr, 300*time.Millisecond
	})
	addr := m.Addr().String()
	if r := invoke(t, cl, addr, sendReq("RQ", 0, []byte("alone"), "a\x011\x02")); r.Code != int32(remoting.SlaveNotAvailable) {
		t.Fatalf("send without a slave: code %d (%s)", r.Code, r.Remark)
	}
	slave := muteSlave(t, haAddr, m.Store().MaxPhysOffset())
	waitCond(t, 20*time.Second, "the fake slave to connect", func() bool { return len(m.HAStatus().Slaves) == 1 })
	type result struct {
		resp *remoting.Command
		err  error
	}
	got := make(chan result, 1)
	go func() {
		h := remoting.PullMessageRequestHeader{ConsumerGroup: "g", Topic: "RQ", QueueOffset: 1, MaxMsgNums: 32,
			SysFlag: pullFlagSuspend | pullFlagSubscription, SuspendTimeoutMillis: 25000, Subscription: "a = 7", ExpressionType: exprSQL92}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := cl.Invoke(ctx, addr, remoting.NewRequest(remoting.PullMessage, h.Encode(), nil))
		got <- result{r, err}
	}()
	waitCond(t, 10*time.Second, "the pull to be held", func() bool { return m.hold.count() == 1 })
	var ends []int64
	for i, a := range []string{"1", "1", "7"} { // queue offsets 1, 2, 3; only 3 matches
		// The first times out; the fake slave, silent since, is stalled
		// for the others (SLAVE_NOT_AVAILABLE at once): stored, not acked.
		r := invoke(t, cl, addr, sendReq("RQ", 0, []byte("m"+strconv.Itoa(i)), "a\x01"+a+"\x02"))
		if r.Code != int32(remoting.FlushSlaveTimeout) && (i == 0 || r.Code != int32(remoting.SlaveNotAvailable)) {
			t.Fatalf("send %d: code %d (%s), want FLUSH_SLAVE_TIMEOUT", i, r.Code, r.Remark)
		}
		ends = append(ends, m.Store().MaxPhysOffset())
	}
	waitCond(t, 10*time.Second, "the master to send the fake slave everything", func() bool {
		s := m.repl.Master().Slaves()
		return len(s) == 1 && s[0].Sent == ends[2]
	})
	ack := func(off int64) {
		t.Helper()
		if err := slave.ReadUntil(off, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := slave.AckAt(off); err != nil {
			t.Fatal(err)
		}
		waitCond(t, 10*time.Second, "the master to take the ack", func() bool {
			s := m.repl.Master().Slaves()
			return len(s) == 1 && s[0].Acked == off
		})
	}
	// The bound shows offset 1 (a = 1): the pull is run again, takes
	// nothing and waits on past it, behind offset 2, hidden.
	before := m.hold.reruns.Load()
	ack(ends[0])
	waitCond(t, 10*time.Second, "the pull to be run again and held", func() bool {
		return m.hold.reruns.Load() > before && m.hold.count() == 1
	})
	for range 3 { // round trips through the broker: a spinning pull would be run again meanwhile
		invoke(t, cl, addr, pullNow("RQ", 0, 0))
	}
	if n := m.hold.reruns.Load() - before; n != 1 || m.hold.count() != 1 {
		t.Fatalf("the held pull was run %d times (held %d) for one move of the bound, want once", n, m.hold.count())
	}
	select {
	case r := <-got:
		t.Fatalf("the held pull was answered before its message was acked: %+v %v", r.resp, r.err)
	default:
	}
	ack(ends[2])
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if p := recordProps(t, r.resp.Body); r.resp.Code != int32(remoting.Success) || len(p) != 1 || p[0]["a"] != "7" {
			t.Fatalf("the held pull once acked: code %d (%s), records %v; want the a = 7 one", r.resp.Code, r.resp.Remark, p)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held pull was not answered once its message was acked")
	}
}
