package broker

import (
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/ha/hatest"
	"github.com/stratamq/stratamq/remoting"
)

// The HA port of a sync_master tried as an attacker would (issue 31 items
// 1 and 2), with hand-written slaves (ha/hatest).

// With the ACL on (the HA secret is then the admin account's), a fake
// slave that knows only the broker name says hello and acks every
// transfer after its header: sends stay SLAVE_NOT_AVAILABLE, the master
// lists no slave, and the fake gets no byte of the log.
func TestHAHostileFakeSlaveCannotAckSends(t *testing.T) {
	t.Parallel()
	rules, err := acl.Parse([]byte(aclTestFile))
	if err != nil {
		t.Fatal(err)
	}
	x := acl.NewStatic(rules, acl.Options{Logger: discardLogger()})
	haAddr := haTestAddr(t)
	m, cl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20, Role: RoleSyncMaster,
		HAListen: haAddr, HATimeout: 500 * time.Millisecond, ACL: x}, Deps{Logger: discardLogger()})
	addr := m.Addr().String()
	waitCond(t, 20*time.Second, "the HA listener", func() bool { return m.repl.Master() != nil })
	send := func(i int) *remoting.Command {
		req := sendReq("Keep", 0, []byte("secret body "+strconv.Itoa(i)), "")
		ours(aclAdmin).Sign(req)
		return invoke(t, cl, addr, req)
	}
	create := createTopicReq("Keep", 1)
	ours(aclAdmin).Sign(create)
	if r := invoke(t, cl, addr, create); r.Code != 0 {
		t.Fatalf("create: %d %s", r.Code, r.Remark)
	}
	if r := send(0); r.Code != int32(remoting.SlaveNotAvailable) {
		t.Fatalf("send without a slave: code %d (%s)", r.Code, r.Remark)
	}

	f, err := hatest.Hello(haAddr, "broker-a", 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	done := make(chan struct{})
	go func() { // ack each transfer's end, read from its header alone
		defer close(done)
		for {
			tr, err := f.Next(time.Minute)
			if err != nil {
				return
			}
			if f.Ack(tr.Offset+int64(len(tr.Body)), 0) != nil {
				return
			}
		}
	}()
	for i := 1; i <= 3; i++ {
		if r := send(i); r.Code != int32(remoting.SlaveNotAvailable) {
			t.Fatalf("send %d with only an unauthenticated fake slave: code %d (%s), want SLAVE_NOT_AVAILABLE", i, r.Code, r.Remark)
		}
	}
	f.Close()
	<-done
	if st := m.HAStatus(); len(st.Slaves) != 0 || f.Received != 0 || f.Status == 0 {
		t.Fatalf("the fake slave (hello status %d) is listed (%+v) or was sent %d log bytes", f.Status, st.Slaves, f.Received)
	}
}

// A slave that says hello and never advances (re-reporting where it
// started) is stalled after STRATAMQ_HA_ACK_TIMEOUT without an ack: sends
// get SLAVE_NOT_AVAILABLE at once instead of each waiting out the ack
// timeout, and /ha lists it out of sync.
func TestHAHostileSilentSlaveFailsSendsFast(t *testing.T) {
	t.Parallel()
	haAddr := haTestAddr(t)
	m, cl := startBroker(t, func(c *Config) {
		c.Role, c.HAListen, c.HATimeout = RoleSyncMaster, haAddr, 300*time.Millisecond
	})
	addr := m.Addr().String()
	waitCond(t, 20*time.Second, "the HA listener", func() bool { return m.repl.Master() != nil })
	f, err := hatest.Hello(haAddr, "broker-a", 0, 0, nil) // no secret: a slave on this host
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	waitCond(t, 20*time.Second, "the slave to connect", func() bool { return len(m.HAStatus().Slaves) == 1 })
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for f.Ack(0, 0) == nil {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-done }()
	var last *remoting.Command
	waitCond(t, 20*time.Second, "a send answered SLAVE_NOT_AVAILABLE (the silent slave stalled)", func() bool {
		last = invoke(t, cl, addr, sendReq("HA", 0, []byte("never acked"), ""))
		if last.Code != int32(remoting.FlushSlaveTimeout) && last.Code != int32(remoting.SlaveNotAvailable) {
			t.Fatalf("send with a silent slave: code %d (%s)", last.Code, last.Remark)
		}
		return last.Code == int32(remoting.SlaveNotAvailable)
	})
	if st := m.HAStatus(); len(st.Slaves) != 1 || st.Slaves[0].InSync {
		t.Fatalf("the silent slave: %+v, want it listed out of sync", st.Slaves)
	}
}
