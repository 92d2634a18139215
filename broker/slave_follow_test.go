package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/follow"
	"github.com/stratamq/stratamq/broker/restore"
	"github.com/stratamq/stratamq/namesrv"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

func commitReq(group, topic string, queue int32, off int64) *remoting.Command {
	h := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: queue, CommitOffset: off}
	return remoting.NewRequest(remoting.UpdateConsumerOffset, h.Encode(), nil)
}

// queryOffset is the broker's QUERY_CONSUMER_OFFSET answer (-1: none).
func queryOffset(t *testing.T, cl *remoting.Client, addr, group, topic string, queue int32) int64 {
	t.Helper()
	h := remoting.QueryConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: queue}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := cl.Invoke(ctx, addr, remoting.NewRequest(remoting.QueryConsumerOffset, h.Encode(), nil))
	if err != nil || resp.Code != int32(remoting.Success) {
		return -1
	}
	off, err := strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
	if err != nil {
		return -1
	}
	return off
}

// haSlaves is how many slaves m's HA listener serves (0 before Run started it).
func haSlaves(m *Broker) int {
	if hm := m.repl.Master(); hm != nil {
		return len(hm.Slaves())
	}
	return 0
}

// startNamesrv runs an in-process name server on a loopback port.
func startNamesrv(t *testing.T) string {
	t.Helper()
	ns := namesrv.New(namesrv.Config{Logger: discardLogger()})
	srv := remoting.NewServer(remoting.ServerConfig{Addr: "127.0.0.1:0", OnClose: ns.OnConnClose, Logger: discardLogger()}, ns)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv.Addr().String()
}

// TestSlaveLearnsMasterFromNameServer (issue 10 item 3): the master
// registers its real HA address (advertised host, HA listener's port), the
// slave registers under the master's broker name with its own broker id,
// learns the master's HA and remoting addresses from the name server's
// answer, and follows it with no STRATAMQ_HA_MASTER.
func TestSlaveLearnsMasterFromNameServer(t *testing.T) {
	t.Parallel()
	nsAddr := startNamesrv(t)
	haAddr := haTestAddr(t)
	// The slave first: it asks the name server until the master is there.
	s, _, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20, Namesrv: nsAddr,
		Role: RoleSlave, BrokerID: 1, HASyncInterval: 100 * time.Millisecond}, Deps{Logger: discardLogger()})
	m, mcl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20, Namesrv: nsAddr,
		AutoCreateTopic: true, HAListen: haAddr}, Deps{Logger: discardLogger()})
	_, haPort, _ := net.SplitHostPort(haAddr)
	mhost, _, _ := net.SplitHostPort(m.AdvertisedAddr())
	wantHA := net.JoinHostPort(mhost, haPort)
	// Both ends: the master counts the connection at accept, the slave
	// knows the master's address once it read the hello reply.
	waitCond(t, 20*time.Second, "the slave to follow the master the name server named", func() bool {
		sl := s.repl.Slave()
		return haSlaves(m) == 1 && sl != nil && sl.State().Connected
	})
	if got := s.follow.NameServerHA(); got != wantHA {
		t.Fatalf("the name server named HA address %q to the slave, want %q (the master's advertised host, HA port)", got, wantHA)
	}
	if got := s.follow.NameServerMaster(); got != m.AdvertisedAddr() {
		t.Fatalf("the name server named master address %q to the slave, want %q", got, m.AdvertisedAddr())
	}
	if st := s.repl.Slave().State(); st.Dialed != wantHA || st.MasterAddr != m.AdvertisedAddr() {
		t.Fatalf("slave HA state %+v: want it dialled %s and the hello named %s", st, wantHA, m.AdvertisedAddr())
	}
	// The name server lists both under broker-a: master id 0, slave id 1.
	resp := invoke(t, mcl, nsAddr, remoting.NewRequest(remoting.GetBrokerClusterInfo, nil, nil))
	var ci remoting.ClusterInfo
	if err := json.Unmarshal(remoting.QuoteIntegerKeys(resp.Body), &ci); err != nil {
		t.Fatalf("cluster info %s: %v", resp.Body, err)
	}
	addrs := ci.BrokerAddrTable["broker-a"].BrokerAddrs
	if addrs[0] != m.AdvertisedAddr() || addrs[1] != s.AdvertisedAddr() {
		t.Fatalf("broker-a's addresses %v: want 0=%s (master), 1=%s (slave)", addrs, m.AdvertisedAddr(), s.AdvertisedAddr())
	}
}

// TestSlaveFollowsTopicsGroupsOffsets (issue 10 item 3): the slave copies
// the master's topics, subscription groups and consumer offsets, polling
// the remoting address the HA hello named, and a topic deleted on the
// master goes on the slave too.
func TestSlaveFollowsTopicsGroupsOffsets(t *testing.T) {
	t.Parallel()
	haAddr := haTestAddr(t)
	m, mcl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		AutoCreateTopic: true, HAListen: haAddr}, Deps{Logger: discardLogger()})
	s, scl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		Role: RoleSlave, BrokerID: 1, HAMaster: haAddr, HASyncInterval: 50 * time.Millisecond}, Deps{Logger: discardLogger()})
	maddr, saddr := m.Addr().String(), s.Addr().String()
	for _, topic := range []string{"Keep", "Gone"} {
		if r := invoke(t, mcl, maddr, createTopicReq(topic, 3)); r.Code != int32(remoting.Success) {
			t.Fatalf("create %s: %d %s", topic, r.Code, r.Remark)
		}
		if r := invoke(t, mcl, maddr, sendReq(topic, 1, []byte("m"), "")); r.Code != int32(remoting.Success) {
			t.Fatalf("send %s: %d %s", topic, r.Code, r.Remark)
		}
	}
	g := DefaultSubscriptionGroup("FollowGroup")
	g.RetryMaxTimes = 7
	body, _ := json.Marshal(g)
	if r := invoke(t, mcl, maddr, remoting.NewRequest(remoting.UpdateAndCreateSubscriptionGroup, nil, body)); r.Code != int32(remoting.Success) {
		t.Fatalf("create group: %d %s", r.Code, r.Remark)
	}
	for _, topic := range []string{"Keep", "Gone"} {
		if r := invoke(t, mcl, maddr, commitReq("FollowGroup", topic, 1, 1)); r.Code != int32(remoting.Success) {
			t.Fatalf("commit on the master: %d %s", r.Code, r.Remark)
		}
	}
	waitCond(t, 20*time.Second, "the slave to copy the master's topics, group and offsets", func() bool {
		_, keep := s.topics.Get("Keep")
		_, gone := s.topics.Get("Gone")
		sg, ok := s.groups.Get("FollowGroup")
		return keep && gone && ok && sg.RetryMaxTimes == 7 && queryOffset(t, scl, saddr, "FollowGroup", "Keep", 1) == 1 &&
			queryOffset(t, scl, saddr, "FollowGroup", "Gone", 1) == 1
	})
	if tc, _ := s.topics.Get("Keep"); tc.ReadQueueNums != 3 || tc.WriteQueueNums != 3 {
		t.Fatalf("the slave's Keep: %+v, want 3 queues as on the master", tc)
	}

	// A deleted topic, a moved offset and a changed group follow.
	del := remoting.DeleteTopicRequestHeader{Topic: "Gone"}
	if r := invoke(t, mcl, maddr, remoting.NewRequest(remoting.DeleteTopicInBroker, del.Encode(), nil)); r.Code != int32(remoting.Success) {
		t.Fatalf("delete Gone on the master: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, mcl, maddr, commitReq("FollowGroup", "Keep", 1, 9)); r.Code != int32(remoting.Success) {
		t.Fatalf("commit on the master: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 20*time.Second, "the slave to drop Gone and take the new offset", func() bool {
		_, gone := s.topics.Get("Gone")
		return !gone && s.store.MaxQueueOffset("Gone", 1) == 0 && len(s.offsets.Groups("Gone")) == 0 &&
			queryOffset(t, scl, saddr, "FollowGroup", "Keep", 1) == 9
	})
	// Unchanged tables keep their version: nothing is rewritten every poll.
	before := s.topics.Wrapper().DataVersion.Counter
	n := s.follow.Syncs()
	waitCond(t, 10*time.Second, "three more syncs", func() bool { return s.follow.Syncs() >= n+3 })
	if after := s.topics.Wrapper().DataVersion.Counter; after != before {
		t.Fatalf("the slave's topic table version moved from %d to %d with nothing changed on the master", before, after)
	}
}

// TestSlaveKeepsOffsetsCommittedWhileMasterDown (issue 10 item 3): an
// offset committed to the slave while the master is stopped is pushed to
// the master once it is back, and neither side then loses it to the
// master's older offset.
func TestSlaveKeepsOffsetsCommittedWhileMasterDown(t *testing.T) {
	t.Parallel()
	haAddr := haTestAddr(t)
	mcfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20, AutoCreateTopic: true, HAListen: haAddr}
	m, mcl, stopMaster := runBroker(t, mcfg, Deps{Logger: discardLogger()})
	s, scl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		Role: RoleSlave, BrokerID: 1, HAMaster: haAddr, HASyncInterval: 50 * time.Millisecond}, Deps{Logger: discardLogger()})
	saddr := s.Addr().String()
	for i := range 20 {
		if r := invoke(t, mcl, m.Addr().String(), sendReq("Offs", i%2, []byte("m"+strconv.Itoa(i)), "")); r.Code != int32(remoting.Success) {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	for q := int32(0); q < 2; q++ {
		if r := invoke(t, mcl, m.Addr().String(), commitReq("G", "Offs", q, 3)); r.Code != int32(remoting.Success) {
			t.Fatalf("commit on the master: %d %s", r.Code, r.Remark)
		}
	}
	waitCond(t, 20*time.Second, "the slave to copy the master's offsets", func() bool {
		return queryOffset(t, scl, saddr, "G", "Offs", 0) == 3 && queryOffset(t, scl, saddr, "G", "Offs", 1) == 3
	})

	stopMaster()
	waitCond(t, 20*time.Second, "the slave to see the master gone", func() bool { return !s.repl.Slave().State().Connected })
	if r := invoke(t, scl, saddr, commitReq("G", "Offs", 0, 8)); r.Code != int32(remoting.Success) {
		t.Fatalf("commit on the slave with the master down: %d %s", r.Code, r.Remark)
	}
	if got := queryOffset(t, scl, saddr, "G", "Offs", 0); got != 8 {
		t.Fatalf("the slave answers offset %d for the queue just committed to it, want 8", got)
	}

	m, mcl, _ = runBroker(t, mcfg, Deps{Logger: discardLogger()}) // a new remoting port: the hello names it
	maddr := m.Addr().String()
	waitCond(t, 20*time.Second, "the master to hold the offset committed to the slave", func() bool {
		return queryOffset(t, mcl, maddr, "G", "Offs", 0) == 8
	})
	n := s.follow.Syncs()
	waitCond(t, 10*time.Second, "two more syncs", func() bool { return s.follow.Syncs() >= n+2 })
	if got := queryOffset(t, scl, saddr, "G", "Offs", 0); got != 8 {
		t.Fatalf("after the master came back the slave answers %d, want 8", got)
	}
	if got := queryOffset(t, scl, saddr, "G", "Offs", 1); got != 3 {
		t.Fatalf("queue 1 (never committed to the slave): %d, want the master's 3", got)
	}
	if p := s.follow.Pending(); len(p) != 0 {
		t.Fatalf("offsets still waiting to be pushed: %v", p)
	}
}

// TestSlavePendingOffsetsSurviveRestart (issue 10 item 3): an offset
// committed to the slave while the master is down, and not pushed yet, is
// still pushed after the slave restarts.
func TestSlavePendingOffsetsSurviveRestart(t *testing.T) {
	t.Parallel()
	haAddr := haTestAddr(t)
	mcfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20, AutoCreateTopic: true, HAListen: haAddr}
	m, mcl, stopMaster := runBroker(t, mcfg, Deps{Logger: discardLogger()})
	scfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		Role: RoleSlave, BrokerID: 1, HAMaster: haAddr, HASyncInterval: 50 * time.Millisecond}
	s, scl, stopSlave := runBroker(t, scfg, Deps{Logger: discardLogger()})
	if r := invoke(t, mcl, m.Addr().String(), sendReq("Restart", 0, []byte("m"), "")); r.Code != int32(remoting.Success) {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, mcl, m.Addr().String(), commitReq("G", "Restart", 0, 1)); r.Code != int32(remoting.Success) {
		t.Fatalf("commit on the master: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 20*time.Second, "the slave to copy the master's offset", func() bool {
		return queryOffset(t, scl, s.Addr().String(), "G", "Restart", 0) == 1
	})
	stopMaster()
	waitCond(t, 20*time.Second, "the slave to see the master gone", func() bool { return !s.repl.Slave().State().Connected })
	if r := invoke(t, scl, s.Addr().String(), commitReq("G", "Restart", 0, 5)); r.Code != int32(remoting.Success) {
		t.Fatalf("commit on the slave: %d %s", r.Code, r.Remark)
	}
	stopSlave()
	s, scl, _ = runBroker(t, scfg, Deps{Logger: discardLogger()})
	m, mcl, _ = runBroker(t, mcfg, Deps{Logger: discardLogger()})
	waitCond(t, 20*time.Second, "the master to hold the offset committed to the slave before its restart", func() bool {
		return queryOffset(t, mcl, m.Addr().String(), "G", "Restart", 0) == 5
	})
	n := s.follow.Syncs()
	waitCond(t, 10*time.Second, "two more syncs", func() bool { return s.follow.Syncs() >= n+2 })
	if got := queryOffset(t, scl, s.Addr().String(), "G", "Restart", 0); got != 5 {
		t.Fatalf("the restarted slave answers %d, want 5", got)
	}
}

// TestSlaveSyncKeepsUnpushedOffset (issue 10 item 3): a sync's copy of the
// master's offsets does not overwrite one committed to the slave and not
// pushed yet; once pushed, the master's offset is adopted again.
func TestSlaveSyncKeepsUnpushedOffset(t *testing.T) {
	t.Parallel()
	s, scl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		Role: RoleSlave, BrokerID: 1, HAMaster: haTestAddr(t), HASyncInterval: time.Hour}, Deps{Logger: discardLogger()})
	s.topics.Put(remoting.TopicConfig{TopicName: "T", ReadQueueNums: 2, WriteQueueNums: 2, Perm: PermRead | PermWrite})
	if r := invoke(t, scl, s.Addr().String(), commitReq("G", "T", 0, 50)); r.Code != int32(remoting.Success) {
		t.Fatalf("commit on the slave: %d %s", r.Code, r.Remark)
	}
	master := []byte(`{"offsetTable":{"T@G":{"0":10,"1":20}}}`)
	if err := s.follow.ApplyOffsets(master); err != nil {
		t.Fatal(err)
	}
	if off, _ := s.offsets.Query("G", "T", 0); off != 50 {
		t.Fatalf("after a sync the unpushed offset is %d, want 50 (committed to the slave)", off)
	}
	if off, _ := s.offsets.Query("G", "T", 1); off != 20 {
		t.Fatalf("queue 1 is %d, want the master's 20", off)
	}
	s.follow.Pushed(follow.Key{Group: "G", Topic: "T", Queue: 0}, 50)
	if err := s.follow.ApplyOffsets(master); err != nil {
		t.Fatal(err)
	}
	if off, _ := s.offsets.Query("G", "T", 0); off != 10 {
		t.Fatalf("once pushed, the queue is %d, want the master's 10", off)
	}
}

// TestSlaveLocalRetentionFollowsManifest (issue 10 item 3): a slave's
// local copies of segments the master uploaded (listed with their queue
// index) go once its own STRATAMQ_LOCAL_RETENTION is passed, never one the
// manifest does not list, and it still serves those offsets, from the
// bucket.
func TestSlaveLocalRetentionFollowsManifest(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	haAddr := haTestAddr(t)
	m, mcl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true,
		SegmentSize: 1 << 20, MaxMessageSize: 256 << 10, LocalRetention: 0, HAListen: haAddr},
		Deps{Logger: discardLogger(), Bucket: bucket})
	ro := &readOnlyBucket{Bucket: bucket}
	s, scl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 0, Role: RoleSlave, BrokerID: 1, HAMaster: haAddr,
		HASyncInterval: 50 * time.Millisecond}, Deps{Logger: discardLogger(), Bucket: ro})
	waitCond(t, 20*time.Second, "the slave to connect", func() bool { return haSlaves(m) == 1 })

	var sent [][]byte
	for i := range 500 { // ≈ 4 MiB: three sealed segments
		body := []byte(strings.Repeat(fmt.Sprintf("%06d|", i), 1170))
		if r := invoke(t, mcl, m.Addr().String(), sendReq("Ret", 0, body, "")); r.Code != int32(remoting.Success) {
			t.Fatalf("send %d: %d %s", i, r.Code, r.Remark)
		}
		sent = append(sent, body)
	}
	waitCond(t, 30*time.Second, "the slave to hold the master's log", func() bool {
		return s.store.MaxPhysOffset() == m.store.MaxPhysOffset()
	})
	if n := len(s.store.SealedSegments()); n < 3 {
		t.Fatalf("the slave holds %d sealed segments, the test wants several", n)
	}
	waitCond(t, 60*time.Second, "the master's segments uploaded and dropped", func() bool {
		m.tier.Uploader().Flush()
		return len(m.store.SealedSegments()) == 0 && m.store.LocalMinPhysOffset() > 0
	})
	waitCond(t, 30*time.Second, "the slave to drop its local copies of the uploaded segments", func() bool {
		return len(s.store.SealedSegments()) == 0 && s.store.LocalMinPhysOffset() > 0
	})
	mf, _, err := upload.LoadManifest(context.Background(), bucket, upload.ManifestKey(m.cfg.Cluster+"/"+m.cfg.BrokerName))
	if err != nil {
		t.Fatal(err)
	}
	if got, u := s.store.LocalMinPhysOffset(), restore.ReplicaStart(mf); got > u || got == 0 {
		t.Fatalf("the slave's local log starts at %d; the manifest lists [0, %d) with queue indexes", got, u)
	}
	got, bad := readAll(t, s, scl, "Ret", 0, len(sent))
	if bad != nil {
		t.Fatalf("pull from the slave after %d messages: %d %s", len(got), bad.Code, bad.Remark)
	}
	for i := range sent {
		if string(got[i]) != string(sent[i]) {
			t.Fatalf("message %d read from the slave differs from what was sent", i)
		}
	}
	if n := ro.writes.Load(); n != 0 {
		t.Fatalf("the slave tried %d bucket writes, want none", n)
	}
}

// A slave's config needs STRATAMQ_HA_MASTER only without name servers.
func TestConfigSlaveWithoutHAMaster(t *testing.T) {
	t.Parallel()
	if err := (Config{Role: RoleSlave, BrokerID: 1, Namesrv: "127.0.0.1:9876"}).withDefaults().Validate(); err != nil {
		t.Fatalf("a slave with STRATAMQ_NAMESRV and no STRATAMQ_HA_MASTER: %v", err)
	}
	err := (Config{Role: RoleSlave, BrokerID: 1}).withDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "STRATAMQ_HA_MASTER") || !strings.Contains(err.Error(), "STRATAMQ_NAMESRV") {
		t.Fatalf("a slave with neither: %v; want an error naming STRATAMQ_HA_MASTER and STRATAMQ_NAMESRV", err)
	}
	if c := (Config{}).withDefaults(); c.HASyncInterval != 3*time.Second {
		t.Fatalf("STRATAMQ_HA_SYNC_INTERVAL default %v, want 3s", c.HASyncInterval)
	}
}
