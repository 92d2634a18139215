package namesrv

import (
	"context"
	"encoding/json"
	"hash/crc32"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"go.uber.org/goleak"

	"github.com/stratamq/stratamq/remoting"
)

var quiet = slog.New(slog.DiscardHandler)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

type env struct {
	ns   *NameServer
	addr string
	cl   *remoting.Client
}

// start runs a name server on loopback (remoting server + expiry scanner)
// until the test ends, plus a client for the test to use.
func start(t *testing.T, cfg Config) *env {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	cfg.Logger = quiet
	ns := New(cfg)
	srv := remoting.NewServer(remoting.ServerConfig{Addr: "127.0.0.1:0", Logger: quiet, OnClose: ns.OnConnClose}, ns)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = srv.Serve(ctx) }()
	go func() { defer wg.Done(); _ = ns.Run(ctx) }()
	cl := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	t.Cleanup(func() {
		cl.Close()
		cancel()
		wg.Wait()
	})
	return &env{ns: ns, addr: srv.Addr().String(), cl: cl}
}

func (e *env) call(t *testing.T, cl *remoting.Client, req *remoting.Command) *remoting.Command {
	t.Helper()
	if cl == nil {
		cl = e.cl
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Invoke(ctx, e.addr, req)
	if err != nil {
		t.Fatalf("%s: %v", remoting.RequestCode(req.Code), err)
	}
	return resp
}

type broker struct {
	cluster, name, addr, ha string
	id                      int64
	topics                  map[string]remoting.TopicConfig
	version                 remoting.DataVersion
}

func topic(name string, queues int32) remoting.TopicConfig {
	return remoting.TopicConfig{TopicName: name, ReadQueueNums: queues, WriteQueueNums: queues, Perm: 6, TopicFilterType: "SINGLE_TAG"}
}

func (e *env) register(t *testing.T, cl *remoting.Client, b broker) *remoting.Command {
	t.Helper()
	body, err := (&remoting.RegisterBrokerBody{TopicConfigSerializeWrapper: remoting.TopicConfigSerializeWrapper{
		TopicConfigTable: b.topics, DataVersion: b.version}}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	h := remoting.RegisterBrokerRequestHeader{BrokerName: b.name, BrokerAddr: b.addr, ClusterName: b.cluster,
		HAServerAddr: b.ha, BrokerID: b.id, BodyCrc32: int32(crc32.ChecksumIEEE(body) & 0x7FFFFFFF)}
	resp := e.call(t, cl, remoting.NewRequest(remoting.RegisterBroker, h.Encode(), body))
	if resp.Code != int32(remoting.Success) {
		t.Fatalf("register %+v: %d %s", b, resp.Code, resp.Remark)
	}
	return resp
}

// routeOf returns the route of topic, or nil on TOPIC_NOT_EXIST.
func (e *env) routeOf(t *testing.T, topicName string) *remoting.TopicRouteData {
	t.Helper()
	h := remoting.GetRouteInfoRequestHeader{Topic: topicName}
	resp := e.call(t, nil, remoting.NewRequest(remoting.GetRouteinfoByTopic, h.Encode(), nil))
	if resp.Code == int32(remoting.TopicNotExist) {
		if want := "No topic route info in name server for the topic: " + topicName; resp.Remark != want {
			t.Fatalf("remark %q, want %q", resp.Remark, want)
		}
		return nil
	}
	if resp.Code != 0 {
		t.Fatalf("route: %d %s", resp.Code, resp.Remark)
	}
	r, err := remoting.DecodeTopicRouteData(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var brokerA = broker{cluster: "DefaultCluster", name: "broker-a", addr: "10.0.0.1:10911", ha: "10.0.0.1:10912",
	topics:  map[string]remoting.TopicConfig{"TopicA": topic("TopicA", 4), "TBW102": {TopicName: "TBW102", ReadQueueNums: 8, WriteQueueNums: 8, Perm: 7}},
	version: remoting.DataVersion{Timestamp: 1, Counter: 1}}

func TestNamesrvRegisterThenRoute(t *testing.T) {
	e := start(t, Config{})
	if e.routeOf(t, "TopicA") != nil {
		t.Fatal("route before registration")
	}
	e.register(t, nil, brokerA)
	h := remoting.GetRouteInfoRequestHeader{Topic: "TopicA"}
	resp := e.call(t, nil, remoting.NewRequest(remoting.GetRouteinfoByTopic, h.Encode(), nil))
	want := `{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}],` +
		`"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}`
	if resp.Code != 0 || string(resp.Body) != want {
		t.Fatalf("route %d %s\n got %s\nwant %s", resp.Code, resp.Remark, resp.Body, want)
	}

	// A second broker name serving the same topic; routes sorted by name.
	b := broker{cluster: "DefaultCluster", name: "broker-b", addr: "10.0.0.3:10911", ha: "10.0.0.3:10912",
		topics: map[string]remoting.TopicConfig{"TopicA": topic("TopicA", 8), "TopicB": topic("TopicB", 2)}}
	e.register(t, nil, b)
	r := e.routeOf(t, "TopicA")
	if len(r.QueueDatas) != 2 || r.QueueDatas[1].BrokerName != "broker-b" || r.QueueDatas[1].WriteQueueNums != 8 {
		t.Fatalf("%+v", r)
	}

	// 206, 106, 224.
	var tl remoting.TopicList
	resp = e.call(t, nil, remoting.NewRequest(remoting.GetAllTopicListFromNameserver, nil, nil))
	if err := json.Unmarshal(resp.Body, &tl); err != nil || !slices.Equal(tl.TopicList, []string{"TBW102", "TopicA", "TopicB"}) {
		t.Fatalf("topic list %s %v", resp.Body, err)
	}
	resp = e.call(t, nil, remoting.NewRequest(remoting.GetBrokerClusterInfo, nil, nil))
	ci, err := remoting.DecodeClusterInfo(resp.Body)
	if err != nil || !slices.Equal(ci.ClusterAddrTable["DefaultCluster"], []string{"broker-a", "broker-b"}) ||
		ci.BrokerAddrTable["broker-b"].BrokerAddrs[0] != "10.0.0.3:10911" {
		t.Fatalf("cluster info %s %v", resp.Body, err)
	}
	ch := remoting.ClusterHeader{Cluster: "DefaultCluster"}
	resp = e.call(t, nil, remoting.NewRequest(remoting.GetTopicsByCluster, ch.Encode(), nil))
	if err := json.Unmarshal(resp.Body, &tl); err != nil || len(tl.TopicList) != 3 {
		t.Fatalf("topics by cluster %s %v", resp.Body, err)
	}

	// Delete a topic; unregister broker-b.
	dh := remoting.DeleteTopicRequestHeader{Topic: "TopicB"}
	if resp := e.call(t, nil, remoting.NewRequest(remoting.DeleteTopicInNamesrv, dh.Encode(), nil)); resp.Code != 0 {
		t.Fatal(resp.Remark)
	}
	if e.routeOf(t, "TopicB") != nil {
		t.Fatal("TopicB survived delete")
	}
	uh := remoting.UnregisterBrokerRequestHeader{BrokerName: b.name, BrokerAddr: b.addr, ClusterName: b.cluster}
	if resp := e.call(t, nil, remoting.NewRequest(remoting.UnregisterBroker, uh.Encode(), nil)); resp.Code != 0 {
		t.Fatal(resp.Remark)
	}
	if r := e.routeOf(t, "TopicA"); len(r.BrokerDatas) != 1 || r.BrokerDatas[0].BrokerName != "broker-a" {
		t.Fatalf("after unregister %+v", r)
	}
}

func TestNamesrvDataVersionGatesQueueUpdates(t *testing.T) {
	e := start(t, Config{})
	e.register(t, nil, brokerA)
	// Same data version, different table: ignored (Java compares versions).
	same := brokerA
	same.topics = map[string]remoting.TopicConfig{"TopicA": topic("TopicA", 16)}
	e.register(t, nil, same)
	if r := e.routeOf(t, "TopicA"); r.QueueDatas[0].WriteQueueNums != 4 {
		t.Fatalf("queue data changed without a new data version: %+v", r.QueueDatas)
	}
	same.version.Counter++
	e.register(t, nil, same)
	if r := e.routeOf(t, "TopicA"); r.QueueDatas[0].WriteQueueNums != 16 {
		t.Fatalf("queue data not updated: %+v", r.QueueDatas)
	}
	// QUERY_DATA_VERSION.
	qh := remoting.QueryDataVersionRequestHeader{BrokerName: same.name, BrokerAddr: same.addr, ClusterName: same.cluster}
	dv, _ := json.Marshal(same.version)
	resp := e.call(t, nil, remoting.NewRequest(remoting.QueryDataVersion, qh.Encode(), dv))
	var rh remoting.QueryDataVersionResponseHeader
	if err := rh.Decode(resp.ExtFields); err != nil || rh.Changed {
		t.Fatalf("same version reported changed: %v %v", resp.ExtFields, err)
	}
	dv, _ = json.Marshal(remoting.DataVersion{Counter: 99})
	resp = e.call(t, nil, remoting.NewRequest(remoting.QueryDataVersion, qh.Encode(), dv))
	if err := rh.Decode(resp.ExtFields); err != nil || !rh.Changed {
		t.Fatalf("new version not reported changed: %v %v", resp.ExtFields, err)
	}
}

func TestNamesrvExpiryWithFakeClock(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	e := start(t, Config{Clock: clock.Now, ScanInterval: 5 * time.Millisecond})
	e.register(t, nil, brokerA)
	clock.Advance(119 * time.Second)
	if n := e.ns.ScanNotActiveBrokers(); n != 0 || e.routeOf(t, "TopicA") == nil {
		t.Fatalf("broker expired early (removed %d)", n)
	}
	// Re-registration resets the timer.
	e.register(t, nil, brokerA)
	clock.Advance(119 * time.Second)
	if n := e.ns.ScanNotActiveBrokers(); n != 0 {
		t.Fatal("re-registration did not refresh the broker")
	}
	clock.Advance(2 * time.Second)
	// Run's scanner removes it.
	waitFor(t, "expired broker to leave the route", func() bool { return e.routeOf(t, "TopicA") == nil })
	resp := e.call(t, nil, remoting.NewRequest(remoting.GetBrokerClusterInfo, nil, nil))
	if ci, err := remoting.DecodeClusterInfo(resp.Body); err != nil || len(ci.BrokerAddrTable) != 0 || len(ci.ClusterAddrTable) != 0 {
		t.Fatalf("cluster info after expiry: %s %v", resp.Body, err)
	}
}

func TestNamesrvHeartbeatTimeoutFromHeader(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	e := start(t, Config{Clock: clock.Now, ScanInterval: time.Hour})
	body, _ := (&remoting.RegisterBrokerBody{TopicConfigSerializeWrapper: remoting.TopicConfigSerializeWrapper{
		TopicConfigTable: brokerA.topics}}).Encode()
	h := remoting.RegisterBrokerRequestHeader{BrokerName: "b", BrokerAddr: "h:1", ClusterName: "c", HAServerAddr: "h:2",
		HeartbeatTimeoutMillis: 10_000}
	if resp := e.call(t, nil, remoting.NewRequest(remoting.RegisterBroker, h.Encode(), body)); resp.Code != 0 {
		t.Fatal(resp.Remark)
	}
	clock.Advance(11 * time.Second)
	if n := e.ns.ScanNotActiveBrokers(); n != 1 {
		t.Fatalf("removed %d, want 1 (10 s timeout from the header)", n)
	}
}

func TestNamesrvConnCloseRemovesBroker(t *testing.T) {
	e := start(t, Config{})
	brokerConn := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	e.register(t, brokerConn, brokerA)
	if e.routeOf(t, "TopicA") == nil {
		t.Fatal("no route")
	}
	brokerConn.Close()
	waitFor(t, "broker removal on conn close", func() bool { return e.routeOf(t, "TopicA") == nil })
}

func TestNamesrvSlaveAndMaster(t *testing.T) {
	e := start(t, Config{})
	slave := brokerA
	slave.id, slave.addr, slave.ha = 1, "10.0.0.2:10911", "10.0.0.2:10912"
	slave.topics = map[string]remoting.TopicConfig{"TopicA": topic("TopicA", 2)}
	// A slave alone: listed, but it brings no queue data and no master.
	resp := e.register(t, nil, slave)
	var rh remoting.RegisterBrokerResponseHeader
	if err := rh.Decode(resp.ExtFields); err != nil || rh.MasterAddr != "" || rh.HAServerAddr != "" {
		t.Fatalf("slave without master: %v %v", resp.ExtFields, err)
	}
	if e.routeOf(t, "TopicA") != nil {
		t.Fatal("a slave's registration created queue data")
	}
	e.register(t, nil, brokerA)
	resp = e.register(t, nil, slave)
	if err := rh.Decode(resp.ExtFields); err != nil || rh.MasterAddr != brokerA.addr || rh.HAServerAddr != brokerA.ha {
		t.Fatalf("slave response %v %v", resp.ExtFields, err)
	}
	r := e.routeOf(t, "TopicA")
	if !maps.Equal(r.BrokerDatas[0].BrokerAddrs, map[int64]string{0: brokerA.addr, 1: slave.addr}) || r.QueueDatas[0].WriteQueueNums != 4 {
		t.Fatalf("route %+v", r)
	}
	// Master leaves: the slave keeps the route readable.
	uh := remoting.UnregisterBrokerRequestHeader{BrokerName: brokerA.name, BrokerAddr: brokerA.addr, ClusterName: brokerA.cluster}
	e.call(t, nil, remoting.NewRequest(remoting.UnregisterBroker, uh.Encode(), nil))
	r = e.routeOf(t, "TopicA")
	if r == nil || !maps.Equal(r.BrokerDatas[0].BrokerAddrs, map[int64]string{1: slave.addr}) {
		t.Fatalf("route after master left %+v", r)
	}
	// The slave's address re-registers as master (id 0): it replaces its
	// id-1 entry.
	promoted := slave
	promoted.id = 0
	e.register(t, nil, promoted)
	r = e.routeOf(t, "TopicA")
	if !maps.Equal(r.BrokerDatas[0].BrokerAddrs, map[int64]string{0: slave.addr}) {
		t.Fatalf("route after promotion %+v", r)
	}
}

func TestNamesrvRejectsBadRegistrations(t *testing.T) {
	e := start(t, Config{})
	body, _ := (&remoting.RegisterBrokerBody{}).Encode()
	h := remoting.RegisterBrokerRequestHeader{BrokerName: "b", BrokerAddr: "h:1", ClusterName: "c", HAServerAddr: "h:2", BodyCrc32: 12345}
	resp := e.call(t, nil, remoting.NewRequest(remoting.RegisterBroker, h.Encode(), body))
	if resp.Code != int32(remoting.SystemError) || resp.Remark != "crc32 not match" {
		t.Fatalf("crc: %d %s", resp.Code, resp.Remark)
	}
	h.BodyCrc32, h.Compressed = 0, true
	resp = e.call(t, nil, remoting.NewRequest(remoting.RegisterBroker, h.Encode(), body))
	if resp.Code != int32(remoting.SystemError) {
		t.Fatalf("compressed: %d %s", resp.Code, resp.Remark)
	}
	resp = e.call(t, nil, remoting.NewRequest(remoting.RegisterBroker, map[string]string{"brokerName": "b"}, nil))
	if resp.Code != int32(remoting.SystemError) || resp.Remark != "the custom field brokerAddr is null" {
		t.Fatalf("missing field: %d %q", resp.Code, resp.Remark)
	}
}

func TestNamesrvUnknownCode(t *testing.T) {
	e := start(t, Config{})
	resp := e.call(t, nil, remoting.NewRequest(remoting.SendMessage, nil, nil))
	if resp.Code != int32(remoting.RequestCodeNotSupported) || resp.Remark != " request type 10 not supported" {
		t.Fatalf("%d %q", resp.Code, resp.Remark)
	}
}

func TestNamesrvKVConfig(t *testing.T) {
	e := start(t, Config{})
	kv := func(code remoting.RequestCode, ns, key, value string) *remoting.Command {
		h := remoting.KVConfigHeader{Namespace: ns, Key: key, Value: value}
		return e.call(t, nil, remoting.NewRequest(code, h.Encode(), nil))
	}
	if r := kv(remoting.GetKVConfig, "ORDER_TOPIC_CONFIG", "TopicA", ""); r.Code != int32(remoting.QueryNotFound) {
		t.Fatalf("get missing: %d", r.Code)
	}
	if r := kv(remoting.PutKVConfig, "ORDER_TOPIC_CONFIG", "TopicA", "broker-a:4"); r.Code != 0 {
		t.Fatal(r.Remark)
	}
	if r := kv(remoting.GetKVConfig, "ORDER_TOPIC_CONFIG", "TopicA", ""); r.Code != 0 || r.ExtFields["value"] != "broker-a:4" {
		t.Fatalf("get: %+v", r)
	}
	nh := remoting.NamespaceHeader{Namespace: "ORDER_TOPIC_CONFIG"}
	r := e.call(t, nil, remoting.NewRequest(remoting.GetKVListByNamespace, nh.Encode(), nil))
	var table remoting.KVTable
	if err := json.Unmarshal(r.Body, &table); err != nil || table.Table["TopicA"] != "broker-a:4" {
		t.Fatalf("list: %s %v", r.Body, err)
	}
	// The order config reaches routes and the register response.
	resp := e.register(t, nil, brokerA)
	if err := json.Unmarshal(resp.Body, &table); err != nil || table.Table["TopicA"] != "broker-a:4" {
		t.Fatalf("register response body %s %v", resp.Body, err)
	}
	if rt := e.routeOf(t, "TopicA"); rt.OrderTopicConf != "broker-a:4" {
		t.Fatalf("orderTopicConf %q", rt.OrderTopicConf)
	}
	if r := kv(remoting.DeleteKVConfig, "ORDER_TOPIC_CONFIG", "TopicA", ""); r.Code != 0 {
		t.Fatal(r.Remark)
	}
	if r := e.call(t, nil, remoting.NewRequest(remoting.GetKVListByNamespace, nh.Encode(), nil)); r.Code != int32(remoting.QueryNotFound) {
		t.Fatalf("list after delete: %d", r.Code)
	}
	if r := kv(remoting.PutKVConfig, "n", "k", ""); r.Code != int32(remoting.SystemError) {
		t.Fatalf("put without value: %d", r.Code)
	}
}

// The official client reads routes and the topic list from our name server.
func TestNamesrvOfficialClientAdmin(t *testing.T) {
	if testing.Short() {
		t.Skip("drives rocketmq-client-go")
	}
	rlog.SetLogLevel("fatal")
	e := start(t, Config{})
	e.register(t, nil, brokerA)
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{e.addr})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mqs, err := adm.FetchPublishMessageQueues(ctx, "TopicA")
	if err != nil {
		t.Fatal(err)
	}
	if len(mqs) != 4 || mqs[0].BrokerName != "broker-a" {
		t.Fatalf("queues %+v", mqs)
	}
	tl, err := adm.FetchAllTopicList(ctx)
	if err != nil || !slices.Contains(tl.TopicList, "TopicA") {
		t.Fatalf("topic list %+v %v", tl, err)
	}
	adm.Close()
}
