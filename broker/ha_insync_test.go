package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// TestBrokerMinInSyncPromotedLoneMaster (issue 29 item 11): a sync_master
// and one failover slave; the master is lost (cut off from the bucket and
// left so): the slave takes the lease and is a sync_master with no slave.
// With STRATAMQ_HA_MIN_INSYNC=1 it acknowledges alone, shows it in
// haStatus (ackingAlone, inSyncReplicas 1, ackedAlone) and in
// stratamq_ha_insync_replicas / stratamq_ha_acked_alone_total, and serves
// what it acknowledged; once the old master rejoins as its slave and
// catches up, that slave is in sync and sends wait for it again. With 2
// (the default) every send is SLAVE_NOT_AVAILABLE until a slave joins.
func TestBrokerMinInSyncPromotedLoneMaster(t *testing.T) {
	t.Parallel()
	for _, min := range []int{1, 2} {
		t.Run(fmt.Sprintf("min%d", min), func(t *testing.T) {
			mem := tier.NewMem()
			cut := &faultBucket{Bucket: mem}
			acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
			acfg.HAMinInSync, bcfg.HAMinInSync = min, min
			acfg.ShutdownTimeout, bcfg.ShutdownTimeout = 5*time.Second, 5*time.Second
			a := runNode(t, acfg, Deps{Bucket: cut})
			reg := prometheus.NewRegistry()
			b := runNode(t, bcfg, Deps{Bucket: mem, Metrics: NewMetrics(reg)})
			cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
			defer cl.Close()
			send := func(n *Node, body string) *remoting.Command {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				resp, err := cl.Invoke(ctx, n.cfg.Listen, sendReq("INSYNC", 0, []byte(body), ""))
				if err != nil {
					t.Fatalf("send %s: %v", body, err)
				}
				return resp
			}
			waitCond(t, 20*time.Second, "the slave to follow the master", func() bool {
				st := a.Broker().HAStatus()
				return len(st.Slaves) == 1 && st.Slaves[0].InSync
			})
			if st := a.Broker().HAStatus(); st.InSyncReplicas != 2 || st.AckingAlone || st.MinInSync != min {
				t.Fatalf("master with its slave in sync: %+v", st)
			}
			for i := range 3 {
				if r := send(a, fmt.Sprintf("before %d", i)); r.Code != int32(remoting.Success) {
					t.Fatalf("send to the master with its slave: %d %s", r.Code, r.Remark)
				}
			}

			// The master is lost: cut off from the bucket for good.
			cut.down.Store(true)
			waitCond(t, 30*time.Second, "the slave to take over", func() bool { return b.role() == RoleSyncMaster })
			nb := b.Broker()
			r := send(b, "alone")
			st := nb.HAStatus()
			if min == 2 {
				if r.Code != int32(remoting.SlaveNotAvailable) {
					t.Fatalf("promoted lone master, MIN_INSYNC=2: code %d (%s), want SLAVE_NOT_AVAILABLE", r.Code, r.Remark)
				}
				if st.InSyncReplicas != 1 || st.AckingAlone || st.AckedAlone != 0 {
					t.Fatalf("promoted lone master, MIN_INSYNC=2: %+v", st)
				}
				if v := mustGauge(t, reg, "stratamq_ha_acked_alone_total", nil); v != 0 {
					t.Fatalf("stratamq_ha_acked_alone_total = %v, want 0", v)
				}
			} else {
				checkAlone(t, cl, reg, nb, r)
			}

			// The old master rejoins as its slave; once in sync, sends
			// wait for it again.
			cut.down.Store(false)
			waitCond(t, 30*time.Second, "the old master to rejoin in sync", func() bool {
				st := nb.HAStatus()
				return a.role() == RoleSlave && len(st.Slaves) == 1 && st.Slaves[0].InSync
			})
			if st := nb.HAStatus(); st.InSyncReplicas != 2 || st.AckingAlone {
				t.Fatalf("new master with its slave in sync: %+v", st)
			}
			if r := send(b, "with a slave"); r.Code != int32(remoting.Success) {
				t.Fatalf("send with the slave back: %d %s", r.Code, r.Remark)
			}
			if st := nb.HAStatus(); st.AckedAlone != int64(2-min) {
				t.Fatalf("a send with a slave in sync counted as alone: %+v", st)
			}
			if got, want := a.Broker().store.MaxPhysOffset(), nb.store.MaxPhysOffset(); got != want {
				t.Fatalf("the send was acknowledged with the slave at %d, the master at %d", got, want)
			}
		})
	}
}

// checkAlone checks a promoted lone master's answer r and status with
// STRATAMQ_HA_MIN_INSYNC=1.
func checkAlone(t *testing.T, cl *remoting.Client, reg *prometheus.Registry, nb *Broker, r *remoting.Command) {
	t.Helper()
	st := nb.HAStatus()
	if r.Code != int32(remoting.Success) {
		t.Fatalf("promoted lone master, MIN_INSYNC=1: code %d (%s), want SUCCESS", r.Code, r.Remark)
	}
	if st.InSyncReplicas != 1 || !st.AckingAlone || st.AckedAlone != 1 || st.MinInSync != 1 {
		t.Fatalf("promoted lone master acknowledging alone: %+v", st)
	}
	if v := mustGauge(t, reg, "stratamq_ha_insync_replicas", nil); v != 1 {
		t.Fatalf("stratamq_ha_insync_replicas = %v, want 1", v)
	}
	if v := mustGauge(t, reg, "stratamq_ha_acked_alone_total", nil); v != 1 {
		t.Fatalf("stratamq_ha_acked_alone_total = %v, want 1", v)
	}
	var body struct {
		AckingAlone    bool `json:"ackingAlone"`
		InSyncReplicas int  `json:"inSyncReplicas"`
		InSyncSlaveNum int  `json:"inSyncSlaveNums"`
	}
	resp := invoke(t, cl, nb.cfg.Listen, remoting.NewRequest(remoting.GetBrokerHAStatus, nil, nil))
	if err := json.Unmarshal(resp.Body, &body); err != nil || !body.AckingAlone || body.InSyncReplicas != 1 || body.InSyncSlaveNum != 0 {
		t.Fatalf("GET_BROKER_HA_STATUS: %s (%v)", resp.Body, err)
	}
	// What it acknowledged alone is served.
	got, bad := readAll(t, nb, cl, "INSYNC", 0, 4)
	if bad != nil || len(got) != 4 || !bytes.Equal(got[3], []byte("alone")) {
		t.Fatalf("pull on the lone master: %q %+v", got, bad)
	}

}

// With STRATAMQ_HA_MIN_INSYNC=1 a master acknowledging alone holds sends
// no slave has: admin demote must still wait for a slave that holds the
// whole log, never hand over to one that lacks what was acknowledged.
func TestBrokerMinInSyncDemoteWaitsForASlave(t *testing.T) {
	t.Parallel()
	cfg := failoverConfig(t, RoleSyncMaster)
	cfg.HAMinInSync, cfg.HATimeout = 1, 300*time.Millisecond
	n := runNode(t, cfg, Deps{Bucket: tier.NewMem()})
	waitCond(t, 20*time.Second, "the master", func() bool { return n.role() == RoleSyncMaster })
	b := n.Broker()
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	if r := invoke(t, cl, cfg.Listen, sendReq("DEMOTE", 0, []byte("first"), "")); r.Code != int32(remoting.Success) {
		t.Fatalf("send alone: %d %s", r.Code, r.Remark)
	}
	// A slave that says hello at offset 0 and never acknowledges: out of
	// sync, so sends go on alone.
	muteSlave(t, cfg.HAListen, 0)
	waitCond(t, 20*time.Second, "the mute slave", func() bool { return b.haSlaves() == 1 })
	if r := invoke(t, cl, cfg.Listen, sendReq("DEMOTE", 0, []byte("alone again"), "")); r.Code != int32(remoting.Success) {
		t.Fatalf("send with an out-of-sync slave: %d %s", r.Code, r.Remark)
	}
	if st := b.HAStatus(); !st.AckingAlone || st.AckedAlone != 2 {
		t.Fatalf("acknowledging alone beside an out-of-sync slave: %+v", st)
	}
	if err := b.Demote(context.Background()); err == nil {
		t.Fatal("demote handed over to a slave that holds none of the acknowledged sends")
	}
	if n.role() != RoleSyncMaster {
		t.Fatalf("after the refused demote the node is %q", n.role())
	}
}
