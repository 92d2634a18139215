package namesrv

import (
	"context"
	"hash/crc32"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/remoting"
)

// closeEnv is start with a channel that gets each conn once the name
// server has handled its close, so a test can wait for that.
type closeEnv struct {
	*env
	closed chan uint64
}

func startWithCloses(t *testing.T, cfg Config) *closeEnv {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	cfg.Logger = quiet
	ns := New(cfg)
	closed := make(chan uint64, 64)
	srv := remoting.NewServer(remoting.ServerConfig{Addr: "127.0.0.1:0", Logger: quiet, OnClose: func(c *remoting.Conn) {
		ns.OnConnClose(c)
		select {
		case closed <- c.ID():
		default:
		}
	}}, ns)
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
	return &closeEnv{env: &env{ns: ns, addr: srv.Addr().String(), cl: cl}, closed: closed}
}

func registerReq(t *testing.T, b broker) *remoting.Command {
	t.Helper()
	body, err := (&remoting.RegisterBrokerBody{TopicConfigSerializeWrapper: remoting.TopicConfigSerializeWrapper{
		TopicConfigTable: b.topics, DataVersion: b.version}}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	h := remoting.RegisterBrokerRequestHeader{BrokerName: b.name, BrokerAddr: b.addr, ClusterName: b.cluster,
		HAServerAddr: b.ha, BrokerID: b.id, BodyCrc32: int32(crc32.ChecksumIEEE(body) & 0x7FFFFFFF)}
	return remoting.NewRequest(remoting.RegisterBroker, h.Encode(), body)
}

// closeAndWait closes a client's conn to the name server and waits until
// the name server has handled the close.
func (e *closeEnv) closeAndWait(t *testing.T, cl *remoting.Client) {
	t.Helper()
	// Each test closes one conn at a time: the next close the server
	// reports is this one.
	cl.Close()
	select {
	case <-e.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the name server to see the conn close")
	}
}

func (e *closeEnv) addrsOf(t *testing.T, topicName string) map[int64]string {
	t.Helper()
	r := e.routeOf(t, topicName)
	if r == nil || len(r.BrokerDatas) != 1 {
		t.Fatalf("route of %s: %+v", topicName, r)
	}
	return r.BrokerDatas[0].BrokerAddrs
}

// TestNamesrvRefusesBrokerNameTakeover: an attacker's REGISTER_BROKER under
// a live broker's name and id from another address is refused, and the
// attacker's conn closing leaves the real broker in the routes. Before the
// fix the fake address replaced the real one, and its close emptied the
// broker name until the real broker registered again.
func TestNamesrvRefusesBrokerNameTakeover(t *testing.T) {
	e := startWithCloses(t, Config{})
	real := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	defer real.Close()
	e.register(t, real, brokerA)

	attacker := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	fake := brokerA
	fake.addr, fake.ha = "10.9.9.9:10911", "10.9.9.9:10912"
	fake.version.Counter++
	fake.topics = map[string]remoting.TopicConfig{"TopicA": topic("TopicA", 1)}
	resp := e.call(t, attacker, registerReq(t, fake))
	if resp.Code != int32(remoting.NoPermission) || !strings.Contains(resp.Remark, "is registered from 10.0.0.1:10911") {
		t.Fatalf("takeover answered %d %q", resp.Code, resp.Remark)
	}
	if got := e.addrsOf(t, "TopicA"); !maps.Equal(got, map[int64]string{0: brokerA.addr}) {
		t.Fatalf("route after the takeover attempt: %v", got)
	}
	if r := e.routeOf(t, "TopicA"); r.QueueDatas[0].WriteQueueNums != 4 {
		t.Fatalf("the refused registration changed the queue data: %+v", r.QueueDatas)
	}
	e.closeAndWait(t, attacker)
	if got := e.addrsOf(t, "TopicA"); !maps.Equal(got, map[int64]string{0: brokerA.addr}) {
		t.Fatalf("route after the attacker's conn closed: %v", got)
	}
	// Under another cluster name: refused too.
	other := brokerA
	other.cluster, other.addr = "OtherCluster", "10.9.9.8:10911"
	attacker2 := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	defer attacker2.Close()
	if resp := e.call(t, attacker2, registerReq(t, other)); resp.Code != int32(remoting.NoPermission) {
		t.Fatalf("registration under another cluster: %d %q", resp.Code, resp.Remark)
	}
	// Once the real broker is gone (its conn closed), the name is free.
	e.closeAndWait(t, real)
	e.register(t, attacker2, fake)
}

// TestNamesrvRefusesAddressRebind: a REGISTER_BROKER of a live broker's own
// address from another conn is refused. Before the fix it moved the
// registration to the attacker's conn, whose close then removed the real
// broker from the routes.
func TestNamesrvRefusesAddressRebind(t *testing.T) {
	e := startWithCloses(t, Config{})
	real := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	defer real.Close()
	e.register(t, real, brokerA)
	attacker := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	resp := e.call(t, attacker, registerReq(t, brokerA))
	if resp.Code != int32(remoting.NoPermission) || !strings.Contains(resp.Remark, "registered on another connection") {
		t.Fatalf("rebind answered %d %q", resp.Code, resp.Remark)
	}
	e.closeAndWait(t, attacker)
	if got := e.addrsOf(t, "TopicA"); !maps.Equal(got, map[int64]string{0: brokerA.addr}) {
		t.Fatalf("route after the attacker's conn closed: %v", got)
	}
	// The real broker re-registers on its own conn as before.
	e.register(t, real, brokerA)
}

// TestNamesrvRefusesForeignUnregister: UNREGISTER_BROKER of a live broker
// from another conn is refused, under its own cluster name or another
// one. Before the fix it removed the broker.
func TestNamesrvRefusesForeignUnregister(t *testing.T) {
	e := startWithCloses(t, Config{})
	real := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	defer real.Close()
	e.register(t, real, brokerA)
	attacker := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	defer attacker.Close()
	for _, cluster := range []string{brokerA.cluster, "SomeOtherCluster"} {
		uh := remoting.UnregisterBrokerRequestHeader{BrokerName: brokerA.name, BrokerAddr: brokerA.addr, ClusterName: cluster}
		resp := e.call(t, attacker, remoting.NewRequest(remoting.UnregisterBroker, uh.Encode(), nil))
		if resp.Code != int32(remoting.NoPermission) {
			t.Fatalf("unregister (cluster %s) from another conn answered %d %q", cluster, resp.Code, resp.Remark)
		}
		if got := e.addrsOf(t, "TopicA"); !maps.Equal(got, map[int64]string{0: brokerA.addr}) {
			t.Fatalf("route after the unregister attempt: %v", got)
		}
	}
	// The broker itself may.
	uh := remoting.UnregisterBrokerRequestHeader{BrokerName: brokerA.name, BrokerAddr: brokerA.addr, ClusterName: brokerA.cluster}
	if resp := e.call(t, real, remoting.NewRequest(remoting.UnregisterBroker, uh.Encode(), nil)); resp.Code != 0 {
		t.Fatalf("own unregister: %d %q", resp.Code, resp.Remark)
	}
	if e.routeOf(t, "TopicA") != nil {
		t.Fatal("route left after the broker unregistered")
	}
}

const namesrvACL = `
accounts:
  - accessKey: ns-admin
    secretKey: ns-admin-secret
    admin: true
  - accessKey: ns-user1
    secretKey: ns-user-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
`

// TestNamesrvACL: with an ACL, route and KV writes need an admin
// signature (NO_PERMISSION otherwise, remark saying why); reads stay
// open.
func TestNamesrvACL(t *testing.T) {
	rules, err := acl.Parse([]byte(namesrvACL))
	if err != nil {
		t.Fatal(err)
	}
	e := startWithCloses(t, Config{ACL: acl.NewStatic(rules, acl.Options{})})
	admin := acl.Credentials{AccessKey: "ns-admin", SecretKey: "ns-admin-secret"}
	user := acl.Credentials{AccessKey: "ns-user1", SecretKey: "ns-user-secret"}
	wrong := acl.Credentials{AccessKey: "ns-admin", SecretKey: "not-the-secret"}
	kvPut := func() *remoting.Command {
		h := remoting.KVConfigHeader{Namespace: "ORDER_TOPIC_CONFIG", Key: "TopicA", Value: "evil:1"}
		return remoting.NewRequest(remoting.PutKVConfig, h.Encode(), nil)
	}
	kvDel := func() *remoting.Command {
		h := remoting.KVConfigHeader{Namespace: "ORDER_TOPIC_CONFIG", Key: "TopicA"}
		return remoting.NewRequest(remoting.DeleteKVConfig, h.Encode(), nil)
	}
	delTopic := func() *remoting.Command {
		return remoting.NewRequest(remoting.DeleteTopicInNamesrv, map[string]string{"topic": "TopicA"}, nil)
	}
	unreg := func() *remoting.Command {
		uh := remoting.UnregisterBrokerRequestHeader{BrokerName: brokerA.name, BrokerAddr: brokerA.addr, ClusterName: brokerA.cluster}
		return remoting.NewRequest(remoting.UnregisterBroker, uh.Encode(), nil)
	}
	refused := func(what string, c acl.Credentials, req *remoting.Command, want string) {
		t.Helper()
		c.Sign(req)
		resp := e.call(t, nil, req)
		if resp.Code != int32(remoting.NoPermission) || !strings.Contains(resp.Remark, want) {
			t.Fatalf("%s: %d %q, want NO_PERMISSION saying %q", what, resp.Code, resp.Remark, want)
		}
	}
	for _, c := range []struct {
		name string
		cred acl.Credentials
		want string
	}{{"unsigned", acl.Credentials{}, "not signed"}, {"wrong secret", wrong, "signature check failed"}, {"not admin", user, "needs an admin account"}} {
		refused(c.name+" register", c.cred, registerReq(t, brokerA), c.want)
		refused(c.name+" KV put", c.cred, kvPut(), c.want)
		refused(c.name+" KV delete", c.cred, kvDel(), c.want)
		refused(c.name+" delete topic", c.cred, delTopic(), c.want)
		refused(c.name+" unregister", c.cred, unreg(), c.want)
	}
	if e.routeOf(t, "TopicA") != nil {
		t.Fatal("a refused registration made a route")
	}
	// The admin registers; anyone reads the route.
	req := registerReq(t, brokerA)
	admin.Sign(req)
	if resp := e.call(t, nil, req); resp.Code != 0 {
		t.Fatalf("admin register: %d %q", resp.Code, resp.Remark)
	}
	if got := e.addrsOf(t, "TopicA"); !maps.Equal(got, map[int64]string{0: brokerA.addr}) {
		t.Fatalf("route: %v", got)
	}
	refused("not admin KV put after", user, kvPut(), "needs an admin account")
	resp := e.call(t, nil, remoting.NewRequest(remoting.GetKVConfig, map[string]string{"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicA"}, nil))
	if resp.Code != int32(remoting.QueryNotFound) {
		t.Fatalf("KV read (open) after refused writes: %d %q", resp.Code, resp.Remark)
	}
	req = kvPut()
	admin.Sign(req)
	if resp := e.call(t, nil, req); resp.Code != 0 {
		t.Fatalf("admin KV put: %d %q", resp.Code, resp.Remark)
	}
}

// TestNamesrvQueryDataVersionFromAnotherConnKeepsNothingAlive: an
// unsigned QUERY_DATA_VERSION naming a registered broker refreshes its
// registration only on the connection that registered it: another peer's
// queries every 20 s do not keep a broker that stopped heartbeating past
// its 30 s expiry; the broker's own queries do.
func TestNamesrvQueryDataVersionFromAnotherConnKeepsNothingAlive(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	e := start(t, Config{Clock: clock.Now, ScanInterval: time.Hour})
	register := func(cl *remoting.Client, addr string) {
		t.Helper()
		body, _ := (&remoting.RegisterBrokerBody{TopicConfigSerializeWrapper: remoting.TopicConfigSerializeWrapper{
			TopicConfigTable: brokerA.topics}}).Encode()
		h := remoting.RegisterBrokerRequestHeader{BrokerName: "b-" + addr, BrokerAddr: addr, ClusterName: "c", HAServerAddr: "h:2",
			HeartbeatTimeoutMillis: 30_000}
		if resp := e.call(t, cl, remoting.NewRequest(remoting.RegisterBroker, h.Encode(), body)); resp.Code != 0 {
			t.Fatal(resp.Remark)
		}
	}
	query := func(cl *remoting.Client, addr string) {
		t.Helper()
		h := remoting.QueryDataVersionRequestHeader{BrokerName: "b-" + addr, BrokerAddr: addr, ClusterName: "c"}
		if resp := e.call(t, cl, remoting.NewRequest(remoting.QueryDataVersion, h.Encode(), []byte("{}"))); resp.Code != 0 {
			t.Fatal(resp.Remark)
		}
	}
	dead := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	defer dead.Close()
	live := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	defer live.Close()
	register(dead, "dead:1")
	register(live, "live:1")
	for range 2 {
		clock.Advance(20 * time.Second)
		query(e.cl, "dead:1") // another peer, for the broker that went silent
		query(live, "live:1") // the broker itself
	}
	if n := e.ns.ScanNotActiveBrokers(); n != 1 {
		t.Fatalf("removed %d registrations 40 s after the last registration, want 1: the silent broker's (30 s expiry)", n)
	}
	resp := e.call(t, nil, remoting.NewRequest(remoting.GetBrokerClusterInfo, nil, nil))
	ci, err := remoting.DecodeClusterInfo(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ci.BrokerAddrTable["b-dead:1"]; ok {
		t.Error("the silent broker is still registered")
	}
	if _, ok := ci.BrokerAddrTable["b-live:1"]; !ok {
		t.Error("the broker that queried on its own connection expired")
	}
}
