package broker

import (
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/ha"
	"github.com/stratamq/stratamq/ha/hatest"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// haGauge reads the value of the series name{labels} from reg; ok is false
// when it is absent.
func haGauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (v float64, ok bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, want := range labels {
				if got[k] != want {
					continue next
				}
			}
			if m.Gauge != nil {
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

func mustGauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := haGauge(t, reg, name, labels)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	return v
}

// muteSlave says hello to the HA listener at addr with offset and never
// reports: the master counts it as a slave that acked offset. The HA
// port has no secret (loopback peers only): none signs the hello.
func muteSlave(t *testing.T, addr string, offset int64) *hatest.Slave {
	t.Helper()
	s, err := hatest.Hello(addr, "broker-a", offset, 0, nil) // 0: the epoch its log agrees with is unknown
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.Status != ha.StatusOK {
		t.Fatalf("the mute slave's hello: %s", ha.StatusText(s.Status))
	}
	return s
}

// A master's HAStatus and stratamq_ha_* series: role, epoch, its HA
// listener, every connected slave with its acked offset and lag in bytes
// and time (the age of the oldest byte it has not acked); the series exist
// before any traffic and the lag moves as a slave falls behind. The slave's
// side: master address, connection, its end and the master's.
func TestHAStatusMasterAndSlave(t *testing.T) {
	t.Parallel()
	haAddr := haTestAddr(t)
	// The slave starts first: its series exist before it ever connects.
	sreg := prometheus.NewRegistry()
	s, _, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		Role: RoleSlave, HAMaster: haAddr, BrokerID: 1}, Deps{Logger: discardLogger(), Metrics: NewMetrics(sreg)})
	peer := map[string]string{"peer": haAddr}
	if v := mustGauge(t, sreg, "stratamq_ha_role", map[string]string{"role": RoleSlave}); v != 1 {
		t.Fatalf("slave: stratamq_ha_role{role=slave} = %v, want 1", v)
	}
	if v := mustGauge(t, sreg, "stratamq_ha_role", map[string]string{"role": RoleAsyncMaster}); v != 0 {
		t.Fatalf("slave: stratamq_ha_role{role=async_master} = %v, want 0", v)
	}
	if v := mustGauge(t, sreg, "stratamq_ha_peers_connected", nil); v != 0 {
		t.Fatalf("slave before its master is up: stratamq_ha_peers_connected = %v, want 0", v)
	}
	mustGauge(t, sreg, "stratamq_ha_replication_lag_bytes", peer)
	mustGauge(t, sreg, "stratamq_ha_replication_lag_seconds", peer)

	mreg := prometheus.NewRegistry()
	m, cl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true,
		SegmentSize: 8 << 20, Role: RoleAsyncMaster, HAListen: haAddr}, Deps{Logger: discardLogger(), Metrics: NewMetrics(mreg)})
	for _, name := range []string{"stratamq_ha_epoch", "stratamq_ha_failovers_total", "stratamq_ha_peers_connected"} {
		if v := mustGauge(t, mreg, name, nil); v != 0 {
			t.Fatalf("master before traffic: %s = %v, want 0", name, v)
		}
	}
	if v := mustGauge(t, mreg, "stratamq_ha_role", map[string]string{"role": RoleAsyncMaster}); v != 1 {
		t.Fatalf("master: stratamq_ha_role{role=async_master} = %v, want 1", v)
	}
	waitCond(t, 20*time.Second, "the slave to connect", func() bool { return len(m.HAStatus().Slaves) == 1 })
	st := m.HAStatus()
	sl := st.Slaves[0]
	if st.Role != RoleAsyncMaster || st.HAListen != haAddr || st.BrokerName != "broker-a" || st.BrokerID != 0 ||
		st.Follow != nil || sl.BrokerName != "broker-a" || sl.LagBytes != 0 || sl.LagSeconds != 0 || !sl.InSync || sl.LastReport.IsZero() {
		t.Fatalf("master with an idle slave: %+v", st)
	}
	if v := mustGauge(t, mreg, "stratamq_ha_replication_lag_bytes", map[string]string{"peer": sl.Addr}); v != 0 {
		t.Fatalf("master before traffic: lag bytes of %s = %v, want 0", sl.Addr, v)
	}
	if v := mustGauge(t, mreg, "stratamq_ha_peers_connected", nil); v != 1 {
		t.Fatalf("master with a slave: stratamq_ha_peers_connected = %v, want 1", v)
	}

	for i := range 5 {
		if resp := invoke(t, cl, m.Addr().String(), sendReq("HA", i%2, []byte("status"), "")); resp.Code != int32(remoting.Success) {
			t.Fatalf("send %d: %d %s", i, resp.Code, resp.Remark)
		}
	}
	end := m.Store().MaxPhysOffset()
	waitCond(t, 20*time.Second, "the slave to ack the master's end", func() bool {
		st := m.HAStatus()
		return len(st.Slaves) == 1 && st.Slaves[0].Acked == end
	})
	st = m.HAStatus()
	if st.LocalEnd != end || st.Slaves[0].LagBytes != 0 || st.Slaves[0].LagSeconds != 0 {
		t.Fatalf("master with a caught-up slave: %+v", st)
	}
	waitCond(t, 20*time.Second, "the slave to know the master's end", func() bool {
		f := s.HAStatus().Follow
		return f != nil && f.MasterEnd == end
	})
	ss := s.HAStatus()
	if f := ss.Follow; ss.Role != RoleSlave || ss.BrokerID != 1 || ss.HAListen != "" || len(ss.Slaves) != 0 ||
		ss.LocalEnd != end || f.MasterAddr != haAddr || f.MasterBroker != m.AdvertisedAddr() || !f.Connected || f.LagBytes != 0 || f.LagSeconds != 0 ||
		f.LastCaughtUp.IsZero() || f.Sessions != 1 || f.Received != end {
		t.Fatalf("caught-up slave: %+v follow %+v", ss, ss.Follow)
	}
	if v := mustGauge(t, sreg, "stratamq_ha_peers_connected", nil); v != 1 {
		t.Fatalf("connected slave: stratamq_ha_peers_connected = %v, want 1", v)
	}

	// A slave that acks nothing past end: its lag is what the master
	// writes after, and its age grows.
	mute := muteSlave(t, haAddr, end)
	waitCond(t, 20*time.Second, "the mute slave to connect", func() bool { return len(m.HAStatus().Slaves) == 2 })
	muteAddr := mute.C.LocalAddr().String()
	t0 := time.Now()
	if resp := invoke(t, cl, m.Addr().String(), sendReq("HA", 0, []byte("never acked by the mute one"), "")); resp.Code != int32(remoting.Success) {
		t.Fatalf("send: %d %s", resp.Code, resp.Remark)
	}
	t1 := time.Now()
	end2 := m.Store().MaxPhysOffset()
	var ms HASlave
	for _, sl := range m.HAStatus().Slaves {
		if sl.Addr == muteAddr {
			ms = sl
		}
	}
	now := time.Now()
	if ms.Acked != end || ms.LagBytes != end2-end || !ms.InSync {
		t.Fatalf("mute slave: %+v; want acked %d, lag %d bytes", ms, end, end2-end)
	}
	// The record at its acked offset was stored between t0 and t1 (its
	// timestamp is in whole milliseconds).
	if lo, hi := now.Sub(t1).Seconds(), now.Sub(t0).Seconds()+0.001; ms.LagSeconds < lo || ms.LagSeconds > hi {
		t.Fatalf("mute slave lag %v s; want the age of the message sent, in [%v, %v]", ms.LagSeconds, lo, hi)
	}
	lagPeer := map[string]string{"peer": muteAddr}
	if v := mustGauge(t, mreg, "stratamq_ha_replication_lag_bytes", lagPeer); v != float64(end2-end) {
		t.Fatalf("stratamq_ha_replication_lag_bytes{peer=mute} = %v, want %d", v, end2-end)
	}
	waitCond(t, 20*time.Second, "the mute slave's lag in time to pass 0.3 s", func() bool {
		return mustGauge(t, mreg, "stratamq_ha_replication_lag_seconds", lagPeer) > 0.3
	})
}

const fakeMasterBroker = "127.0.0.1:10911"

// fakeMaster accepts one slave on a loopback HA listener, answers its hello
// with epoch and a master end ahead bytes past the slave's, and then sends
// nothing: a slave that cannot catch up.
func fakeMaster(t *testing.T, epoch, ahead int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", haTestAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, err = hatest.Accept(c, nil, func(h hatest.HelloMsg) hatest.ReplyMsg {
			return hatest.ReplyMsg{Epoch: epoch, MasterMax: h.Offset + ahead, Advertise: fakeMasterBroker}
		})
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, c) // the slave's reports, until the test ends
	}()
	return ln.Addr().String()
}

// A slave behind its master: lag in bytes is the master's end − its own,
// lag in time the time since it last held the master's end (since it
// started, as it never has), growing; its epoch is the master's.
func TestHAStatusSlaveLagging(t *testing.T) {
	t.Parallel()
	haAddr := fakeMaster(t, 7, 5000)
	reg := prometheus.NewRegistry()
	start := time.Now()
	s, _, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		Role: RoleSlave, HAMaster: haAddr, BrokerID: 1}, Deps{Logger: discardLogger(), Metrics: NewMetrics(reg)})
	waitCond(t, 20*time.Second, "the slave to connect", func() bool { return s.HAStatus().Follow.Connected })
	st := s.HAStatus()
	if f := st.Follow; st.Epoch != 7 || f.MasterBroker != fakeMasterBroker || f.MasterEnd != 5000 || f.LagBytes != 5000 || !f.LastCaughtUp.IsZero() ||
		f.LagSeconds <= 0 || f.LagSeconds > time.Since(start).Seconds() {
		t.Fatalf("lagging slave: %+v follow %+v", st, st.Follow)
	}
	peer := map[string]string{"peer": haAddr}
	if v := mustGauge(t, reg, "stratamq_ha_replication_lag_bytes", peer); v != 5000 {
		t.Fatalf("stratamq_ha_replication_lag_bytes = %v, want 5000", v)
	}
	if v := mustGauge(t, reg, "stratamq_ha_epoch", nil); v != 7 {
		t.Fatalf("stratamq_ha_epoch = %v, want 7", v)
	}
	first := mustGauge(t, reg, "stratamq_ha_replication_lag_seconds", peer)
	waitCond(t, 20*time.Second, "the lag in time to grow", func() bool {
		return mustGauge(t, reg, "stratamq_ha_replication_lag_seconds", peer) > first+0.2
	})
}

// GET_BROKER_HA_STATUS (907) answers the HAStatus JSON plus RocketMQ's
// HARuntimeInfo fields; the promote and demote codes answer Promote's and
// Demote's error as a SYSTEM_ERROR remark (a master without a bucket has no
// lease to take or hand over).
func TestHAStatusRemoting(t *testing.T) {
	t.Parallel()
	haAddr := haTestAddr(t)
	m, cl := startBroker(t, func(c *Config) { c.HAListen = haAddr })
	waitCond(t, 20*time.Second, "the HA listener", func() bool { return m.HAStatus().HAListen != "" })
	muteSlave(t, haAddr, 0)
	waitCond(t, 20*time.Second, "the mute slave to connect", func() bool { return len(m.HAStatus().Slaves) == 1 })
	if resp := invoke(t, cl, m.Addr().String(), sendReq("HA", 0, []byte("x"), "")); resp.Code != int32(remoting.Success) {
		t.Fatalf("send: %d %s", resp.Code, resp.Remark)
	}
	resp := invoke(t, cl, m.Addr().String(), remoting.NewRequest(remoting.GetBrokerHAStatus, nil, nil))
	if resp.Code != int32(remoting.Success) {
		t.Fatalf("GET_BROKER_HA_STATUS: %d %s", resp.Code, resp.Remark)
	}
	var got struct {
		HAStatus
		Master                   bool  `json:"master"`
		MasterCommitLogMaxOffset int64 `json:"masterCommitLogMaxOffset"`
		InSyncSlaveNums          int   `json:"inSyncSlaveNums"`
		HAConnectionInfo         []struct {
			Addr           string `json:"addr"`
			SlaveAckOffset int64  `json:"slaveAckOffset"`
			Diff           int64  `json:"diff"`
			InSync         bool   `json:"inSync"`
		} `json:"haConnectionInfo"`
	}
	if err := json.Unmarshal(resp.Body, &got); err != nil {
		t.Fatalf("body %s: %v", resp.Body, err)
	}
	end := m.Store().MaxPhysOffset()
	if got.Role != RoleAsyncMaster || got.HAListen != haAddr || got.LocalEnd != end || len(got.Slaves) != 1 ||
		got.Slaves[0].Acked != 0 || got.Slaves[0].LagBytes != end || got.Slaves[0].LagSeconds <= 0 {
		t.Fatalf("HAStatus in the body: %s", resp.Body)
	}
	if !got.Master || got.MasterCommitLogMaxOffset != end || got.InSyncSlaveNums != 1 || len(got.HAConnectionInfo) != 1 ||
		got.HAConnectionInfo[0].Addr != got.Slaves[0].Addr || got.HAConnectionInfo[0].Diff != end || !got.HAConnectionInfo[0].InSync {
		t.Fatalf("HARuntimeInfo in the body: %s", resp.Body)
	}

	for _, tc := range []struct {
		code remoting.RequestCode
		verb string
	}{{remoting.PromoteBroker, "promote"}, {remoting.DemoteBroker, "demote"}} {
		resp := invoke(t, cl, m.Addr().String(), remoting.NewRequest(tc.code, nil, nil))
		if resp.Code != int32(remoting.SystemError) || !strings.HasPrefix(resp.Remark, tc.verb+" broker-a at "+m.AdvertisedAddr()+": ") {
			t.Fatalf("%v on a master without a bucket: %d %q; want SYSTEM_ERROR naming the broker and the error", tc.code, resp.Code, resp.Remark)
		}
	}
}

// Across an admin promote (two Nodes, each broker generation a new Broker
// on the same Metrics): the series follow the running generation — the
// promoted slave reports sync_master, a higher epoch and its slave; the old
// master reports slave and its master — and both count one failover.
func TestHAStatusAcrossPromote(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	areg, breg := prometheus.NewRegistry(), prometheus.NewRegistry()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	acfg.LeaseTTL, bcfg.LeaseTTL = time.Minute, time.Minute
	a := runNode(t, acfg, Deps{Bucket: mem, Metrics: NewMetrics(areg)})
	b := runNode(t, bcfg, Deps{Bucket: mem, Metrics: NewMetrics(breg)})
	// Both ends: the master counts the connection at accept, the slave
	// learns the epoch from the hello reply.
	waitCond(t, 20*time.Second, "the master to see its slave and the slave its master", func() bool {
		return a.role() == RoleSyncMaster && b.role() == RoleSlave && len(a.Broker().HAStatus().Slaves) == 1 &&
			b.Broker().HAStatus().Epoch == a.Broker().HAStatus().Epoch &&
			b.Broker().HAStatus().Follow.Connected && b.Broker().HAStatus().Follow.MasterBroker != ""
	})
	epoch := mustGauge(t, areg, "stratamq_ha_epoch", nil)
	if epoch < 1 || mustGauge(t, breg, "stratamq_ha_epoch", nil) != epoch || mustGauge(t, areg, "stratamq_ha_failovers_total", nil) != 0 {
		t.Fatalf("before the promote: master epoch %v, slave epoch %v, failovers %v", epoch,
			mustGauge(t, breg, "stratamq_ha_epoch", nil), mustGauge(t, areg, "stratamq_ha_failovers_total", nil))
	}
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	if r := invoke(t, cl, bcfg.Listen, remoting.NewRequest(remoting.PromoteBroker, nil, nil)); r.Code != int32(remoting.Success) {
		t.Fatalf("promote on the slave: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 30*time.Second, "the promoted slave's series to show it master with its slave", func() bool {
		v, _ := haGauge(t, breg, "stratamq_ha_peers_connected", nil)
		return mustGauge(t, breg, "stratamq_ha_role", map[string]string{"role": RoleSyncMaster}) == 1 && v == 1
	})
	waitCond(t, 30*time.Second, "the old master's series to show it following", func() bool {
		v, _ := haGauge(t, areg, "stratamq_ha_peers_connected", nil)
		return mustGauge(t, areg, "stratamq_ha_role", map[string]string{"role": RoleSlave}) == 1 && v == 1
	})
	for who, reg := range map[string]*prometheus.Registry{"old master": areg, "promoted slave": breg} {
		if v := mustGauge(t, reg, "stratamq_ha_failovers_total", nil); v != 1 {
			t.Errorf("%s: stratamq_ha_failovers_total = %v, want 1", who, v)
		}
		if v := mustGauge(t, reg, "stratamq_ha_epoch", nil); v <= epoch {
			t.Errorf("%s: stratamq_ha_epoch = %v, want above %v", who, v, epoch)
		}
	}
	if st := b.Broker().HAStatus(); st.Role != RoleSyncMaster || st.Failovers != 1 || len(st.Slaves) != 1 {
		t.Fatalf("promoted slave: %+v", st)
	}
	if st := a.Broker().HAStatus(); st.Role != RoleSlave || st.Failovers != 1 || st.Follow == nil || st.Follow.MasterBroker != bcfg.Listen {
		t.Fatalf("old master: %+v follow %+v", st, st.Follow)
	}
}
