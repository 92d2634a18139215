package broker

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/namesrv"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

const aclTestFile = `
accounts:
  - accessKey: broker-admin
    secretKey: admin-secret-4711
    admin: true
  - accessKey: app-user
    secretKey: app-secret-4711
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms:
      - SecretTopic=DENY
    groupPerms:
      - DeniedGroup=DENY
`

var (
	aclAdmin = primitive.Credentials{AccessKey: "broker-admin", SecretKey: "admin-secret-4711"}
	aclUser  = primitive.Credentials{AccessKey: "app-user", SecretKey: "app-secret-4711"}
	aclWrong = primitive.Credentials{AccessKey: "app-user", SecretKey: "not-the-secret"}
)

func ours(c primitive.Credentials) acl.Credentials {
	return acl.Credentials{AccessKey: c.AccessKey, SecretKey: acl.Secret(c.SecretKey), SecurityToken: c.SecurityToken}
}

// denials records the ACL's refusals (code and remark).
type denials struct {
	mu   sync.Mutex
	list []string
}

func (d *denials) add(code remoting.RequestCode, remark string) {
	d.mu.Lock()
	d.list = append(d.list, code.String()+": "+remark)
	d.mu.Unlock()
}

func (d *denials) has(code remoting.RequestCode, substr string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.list {
		if strings.HasPrefix(s, code.String()+": ") && strings.Contains(s, substr) {
			return true
		}
	}
	return false
}

type aclEnv struct {
	b      *Broker
	nsAddr string
	file   string
	denied *denials
	cl     *remoting.Client
}

// startACL runs a name server and a broker sharing one ACL file (each
// with its own reloader, as serve does), the broker registering with the
// file's first admin account.
func startACL(t *testing.T) *aclEnv {
	t.Helper()
	rlog.SetLogLevel("fatal")
	dir := t.TempDir()
	file := filepath.Join(dir, "plain_acl.yml")
	if err := os.WriteFile(file, []byte(aclTestFile), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &denials{}
	opt := acl.Options{PollInterval: 20 * time.Millisecond, Logger: discardLogger(), OnDeny: d.add}
	nsACL, err := acl.Open(file, opt)
	if err != nil {
		t.Fatal(err)
	}
	bACL, err := acl.Open(file, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); nsACL.Run(ctx) }()
	go func() { defer wg.Done(); bACL.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })

	ns := namesrv.New(namesrv.Config{Logger: discardLogger(), ACL: nsACL})
	srv := remoting.NewServer(remoting.ServerConfig{Addr: "127.0.0.1:0", OnClose: ns.OnConnClose, Logger: discardLogger()}, ns)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	nsAddr := srv.Addr().String()

	b, cl, _ := runBroker(t, Config{DataDir: filepath.Join(dir, "data"), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		Namesrv: nsAddr, AutoCreateTopic: false, ACL: bACL}, Deps{Logger: discardLogger()})
	waitCond(t, 10*time.Second, "the broker's signed registration", func() bool { return clusterHas(nsAddr, b.AdvertisedAddr()) })
	return &aclEnv{b: b, nsAddr: nsAddr, file: file, denied: d, cl: cl}
}

func clusterHas(nsAddr, brokerAddr string) bool {
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := cl.Invoke(ctx, nsAddr, remoting.NewRequest(remoting.GetBrokerClusterInfo, nil, nil))
	return err == nil && resp.Code == 0 && strings.Contains(string(resp.Body), brokerAddr)
}

func routeOf(nsAddr, topic string) bool {
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := cl.Invoke(ctx, nsAddr, remoting.NewRequest(remoting.GetRouteinfoByTopic, map[string]string{"topic": topic}, nil))
	return err == nil && resp.Code == 0
}

// signed sends req signed with c (zero c: unsigned) on the env's raw
// client and returns the response.
func (e *aclEnv) signed(t *testing.T, c primitive.Credentials, req *remoting.Command) *remoting.Command {
	t.Helper()
	ours(c).Sign(req)
	return invoke(t, e.cl, e.b.AdvertisedAddr(), req)
}

func (e *aclEnv) createTopic(t *testing.T, c primitive.Credentials, topic string) {
	t.Helper()
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{e.nsAddr})), admin.WithCredentials(c))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// client-go's admin signs its broker requests only once
	// GetAllSubscriptionGroup has registered its ACL interceptor (its
	// credentials otherwise reach the name server client alone).
	_, _ = adm.GetAllSubscriptionGroup(ctx, e.b.AdvertisedAddr(), 3*time.Second)
	if err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(e.b.AdvertisedAddr()),
		admin.WithReadQueueNums(2), admin.WithWriteQueueNums(2)); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

func newProducer(t *testing.T, nsAddr string, c primitive.Credentials) rocketmqProducer {
	t.Helper()
	opts := []producer.Option{producer.WithNameServer([]string{nsAddr}), producer.WithRetry(1),
		producer.WithGroupName("acl-pg-" + strings.ReplaceAll(t.Name(), "/", "-")), producer.WithInstanceName(c.AccessKey + c.SecretKey[:3] + c.SecurityToken),
		producer.WithSendMsgTimeout(5 * time.Second)}
	if c.AccessKey != "" {
		opts = append(opts, producer.WithCredentials(c))
	} else {
		opts = append(opts, producer.WithInstanceName("unsigned"))
	}
	p, err := producer.NewDefaultProducer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

type rocketmqProducer interface {
	SendSync(ctx context.Context, mq ...*primitive.Message) (*primitive.SendResult, error)
}

func send(p rocketmqProducer, topic, body string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte(body)))
	if err == nil && res.Status != primitive.SendOK {
		return errors.New("send status " + res.String())
	}
	return err
}

// noPermission reports whether a client-go send failed with NO_PERMISSION:
// its ProcessSendResponse reports a refused send as "CODE: <code>, DESC:
// <remark>".
func noPermission(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "CODE: 16, DESC: ")
}

// TestBrokerACLWithOfficialClient (issue 14 item 1): with an ACL, the
// official Go client with primitive.Credentials sends, pulls, commits
// offsets and (with an admin account) creates topics; a wrong secret, a
// missing signature, a DENY topic and a non-admin account calling an
// admin code get NO_PERMISSION; a group's retry topic follows the
// group's permission; a changed file takes effect.
func TestBrokerACLWithOfficialClient(t *testing.T) {
	t.Parallel()
	e := startACL(t)
	addr := e.b.AdvertisedAddr()

	// Admin calls: the admin account creates, app-user may not.
	e.createTopic(t, aclAdmin, "AclTopic")
	e.createTopic(t, aclAdmin, "SecretTopic")
	e.createTopic(t, aclUser, "UserMadeTopic") // client-go ignores the answer's code
	if _, ok := e.b.topics.Get("UserMadeTopic"); ok {
		t.Fatal("a non-admin account created a topic")
	}
	if !e.denied.has(remoting.UpdateAndCreateTopic, `accessKey "app-user" is not admin`) {
		t.Fatalf("no denial recorded for the non-admin create: %v", e.denied.list)
	}
	for _, req := range []*remoting.Command{
		remoting.NewRequest(remoting.UpdateAndCreateTopic, map[string]string{"topic": "X1", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}, nil),
		remoting.NewRequest(remoting.DeleteTopicInBroker, map[string]string{"topic": "AclTopic"}, nil),
		remoting.NewRequest(remoting.GetAllConsumerOffset, nil, nil),
		remoting.NewRequest(remoting.InvokeBrokerToResetOffset, map[string]string{"topic": "AclTopic", "group": "AppGroup", "timestamp": "0"}, nil),
		remoting.NewRequest(remoting.DemoteBroker, nil, nil),
		remoting.NewRequest(remoting.GetBrokerConfig, nil, nil),
	} {
		resp := e.signed(t, aclUser, req)
		if resp.Code != int32(remoting.NoPermission) || !strings.Contains(resp.Remark, "needs an admin account") {
			t.Fatalf("%s by a non-admin: %d %q", remoting.RequestCode(req.Code), resp.Code, resp.Remark)
		}
	}
	if resp := e.signed(t, aclAdmin, remoting.NewRequest(remoting.GetBrokerConfig, nil, nil)); resp.Code != 0 {
		t.Fatalf("GET_BROKER_CONFIG by the admin: %d %q", resp.Code, resp.Remark)
	}
	waitCond(t, 10*time.Second, "AclTopic's route", func() bool { return routeOf(e.nsAddr, "AclTopic") && routeOf(e.nsAddr, "SecretTopic") })

	// Sends.
	good := newProducer(t, e.nsAddr, aclUser)
	if err := send(good, "AclTopic", "m1"); err != nil {
		t.Fatalf("send with the right account: %v", err)
	}
	if err := send(newProducer(t, e.nsAddr, aclWrong), "AclTopic", "m2"); !noPermission(err) || !strings.Contains(err.Error(), "signature check failed") {
		t.Fatalf("send with a wrong secret: %v", err)
	}
	if err := send(newProducer(t, e.nsAddr, primitive.Credentials{SecretKey: "---"}), "AclTopic", "m3"); !noPermission(err) || !strings.Contains(err.Error(), "not signed") {
		t.Fatalf("unsigned send: %v", err)
	}
	if err := send(good, "SecretTopic", "m4"); !noPermission(err) || !strings.Contains(err.Error(), `topic "SecretTopic"`) {
		t.Fatalf("send to a DENY topic: %v", err)
	}
	resp := e.signed(t, primitive.Credentials{}, sendReq("AclTopic", 0, []byte("raw"), ""))
	if resp.Code != int32(remoting.NoPermission) {
		t.Fatalf("raw unsigned send: %d %q", resp.Code, resp.Remark)
	}

	// Pulls and offset commits through a push consumer.
	var got atomic.Int64
	c := startConsumer(t, e.nsAddr, "AppGroup", "AclTopic", aclUser, func() { got.Add(1) })
	waitCond(t, 20*time.Second, "the message consumed with the right account", func() bool { return got.Load() >= 1 })
	waitCond(t, 30*time.Second, "the consumer's offset commit", func() bool {
		var total int64
		for q := range 2 {
			h := remoting.QueryConsumerOffsetRequestHeader{ConsumerGroup: "AppGroup", Topic: "AclTopic", QueueID: int32(q)}
			resp := e.signed(t, aclUser, remoting.NewRequest(remoting.QueryConsumerOffset, h.Encode(), nil))
			if resp.Code == 0 {
				n, _ := strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
				total += n
			}
		}
		return total >= 1
	})
	_ = c.Shutdown()

	// A wrong secret and a DENY group: refused pulls/heartbeats.
	var never atomic.Int64
	startConsumer(t, e.nsAddr, "WrongGroup", "AclTopic", aclWrong, func() { never.Add(1) })
	startConsumer(t, e.nsAddr, "DeniedGroup", "AclTopic", aclUser, func() { never.Add(1) })
	waitCond(t, 20*time.Second, "the wrong secret's heartbeat refused", func() bool {
		return e.denied.has(remoting.HeartBeat, "signature check failed")
	})
	waitCond(t, 20*time.Second, "the DENY group's heartbeat refused", func() bool {
		return e.denied.has(remoting.HeartBeat, `group "DeniedGroup"`)
	})
	// Offset commits and pulls by code: the group's permission decides,
	// for its retry topic too.
	commit := func(c primitive.Credentials, group, topic string) *remoting.Command {
		h := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: 0, CommitOffset: 1}
		return e.signed(t, c, remoting.NewRequest(remoting.UpdateConsumerOffset, h.Encode(), nil))
	}
	if resp := commit(aclUser, "AppGroup", "AclTopic"); resp.Code != 0 {
		t.Fatalf("offset commit: %d %q", resp.Code, resp.Remark)
	}
	for _, r := range []*remoting.Command{commit(aclWrong, "AppGroup", "AclTopic"), commit(aclUser, "DeniedGroup", "AclTopic")} {
		if r.Code != int32(remoting.NoPermission) {
			t.Fatalf("refused offset commit answered %d %q", r.Code, r.Remark)
		}
	}
	pull := func(group, topic string) *remoting.Command {
		req := pullReq(group, topic, 0, 0, 0, "*")
		req.ExtFields["sysFlag"] = "2" // subscription only: never held
		return e.signed(t, aclUser, req)
	}
	if r := pull("DeniedGroup", "%RETRY%DeniedGroup"); r.Code != int32(remoting.NoPermission) || !strings.Contains(r.Remark, `group "DeniedGroup"`) {
		t.Fatalf("pull of a DENY group's retry topic: %d %q", r.Code, r.Remark)
	}
	if r := pull("AppGroup", "%RETRY%DeniedGroup"); r.Code != int32(remoting.NoPermission) {
		t.Fatalf("pull of a DENY group's retry topic under another group: %d %q", r.Code, r.Remark)
	}
	if r := pull("AppGroup", "%RETRY%AppGroup"); r.Code == int32(remoting.NoPermission) {
		t.Fatalf("pull of an allowed group's retry topic refused: %q", r.Remark)
	}
	if never.Load() != 0 {
		t.Fatal("a refused consumer received messages")
	}

	// A changed file takes effect: app-user loses PUB on AclTopic.
	changed := strings.Replace(aclTestFile, "      - SecretTopic=DENY", "      - SecretTopic=DENY\n      - AclTopic=SUB", 1)
	writeFileAtomic(t, e.file, changed)
	waitCond(t, 20*time.Second, "the reloaded file to refuse PUB", func() bool {
		r := e.signed(t, aclUser, sendReq("AclTopic", 0, []byte("after"), ""))
		return r.Code == int32(remoting.NoPermission) && strings.Contains(r.Remark, `no PUB permission on topic "AclTopic" (it has SUB)`)
	})
	if err := send(good, "AclTopic", "m5"); !noPermission(err) {
		t.Fatalf("official client's send after the reload: %v", err)
	}
	_ = addr
}

func writeFileAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func startConsumer(t *testing.T, nsAddr, group, topic string, c primitive.Credentials, onMsg func()) interface{ Shutdown() error } {
	t.Helper()
	pc, err := consumer.NewPushConsumer(consumer.WithNameServer([]string{nsAddr}), consumer.WithGroupName(group),
		consumer.WithCredentials(c), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithInstance(group),
		// No flow control by offset span: its warning races inside the
		// official client (see cmd/stratamq's noSpanFlowControl).
		consumer.WithConsumeConcurrentlyMaxSpan(65535))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for range msgs {
			onMsg()
		}
		return consumer.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Shutdown() })
	return pc
}

// TestBrokerACLGoldenSignature: a SEND_MESSAGE signed by the official Go
// client's own code path (its ACL interceptor, over a real connection) is
// captured as the broker received it, and verifies with the ACL's rules;
// the same request with one body byte changed does not.
func TestBrokerACLGoldenSignature(t *testing.T) {
	t.Parallel()
	e := startACL(t)
	e.createTopic(t, aclAdmin, "GoldenTopic")
	waitCond(t, 10*time.Second, "GoldenTopic's route", func() bool { return routeOf(e.nsAddr, "GoldenTopic") })
	captured := make(chan *remoting.Command, 1)
	e.b.server.Control(remoting.SendMessage, func(c *remoting.Conn, req *remoting.Command) (*remoting.Command, bool) {
		cp := &remoting.Command{Code: req.Code, ExtFields: map[string]string{}, Body: append([]byte(nil), req.Body...)}
		for k, v := range req.ExtFields {
			cp.ExtFields[k] = v
		}
		select {
		case captured <- cp:
		default:
		}
		return nil, false
	})
	if err := send(newProducer(t, e.nsAddr, aclUser), "GoldenTopic", "golden body"); err != nil {
		t.Fatal(err)
	}
	var req *remoting.Command
	select {
	case req = <-captured:
	case <-time.After(10 * time.Second):
		t.Fatal("no SEND_MESSAGE captured")
	}
	if req.ExtFields[acl.KeyAccessKey] != "app-user" || req.ExtFields[acl.KeySignature] == "" {
		t.Fatalf("the client did not sign: %v", req.ExtFields)
	}
	rules := e.b.cfg.ACL.Rules()
	peer := netip.MustParseAddr("127.0.0.1")
	if d := rules.Verify(peer, req, true); d != nil {
		t.Fatalf("the official client's signature does not verify: %v", d)
	}
	req.Body[0] ^= 1
	if d := rules.Verify(peer, req, true); d == nil || !strings.Contains(d.Error(), "signature check failed") {
		t.Fatalf("a changed body verified: %v", d)
	}
	req.Body[0] ^= 1
	req.ExtFields["topic"] = "OtherTopic"
	if d := rules.Verify(peer, req, true); d == nil {
		t.Fatal("a changed header verified")
	}

	// With a SecurityToken, client-go signs without it (Java signs with
	// it): its requests verify too.
	withToken := aclUser
	withToken.SecurityToken = "session-token-1"
	e.b.server.Control(remoting.SendMessage, func(c *remoting.Conn, req *remoting.Command) (*remoting.Command, bool) {
		select {
		case captured <- &remoting.Command{Code: req.Code, ExtFields: maps.Clone(req.ExtFields)}:
		default:
		}
		return nil, false
	})
	if err := send(newProducer(t, e.nsAddr, withToken), "GoldenTopic", "with a token"); err != nil {
		t.Fatalf("send with a security token: %v", err)
	}
	select {
	case req = <-captured:
	case <-time.After(10 * time.Second):
		t.Fatal("no SEND_MESSAGE captured")
	}
	if req.ExtFields[acl.KeySecurityToken] != "session-token-1" {
		t.Fatalf("the client sent no token: %v", req.ExtFields)
	}
}

// TestSlaveFollowsMasterWithACL: a slave's calls to its master (topics,
// groups and offsets, all admin codes) are signed with the ACL file's
// admin account, so a slave follows a master that has an ACL; the master
// refuses none of them.
func TestSlaveFollowsMasterWithACL(t *testing.T) {
	t.Parallel()
	rules, err := acl.Parse([]byte(aclTestFile))
	if err != nil {
		t.Fatal(err)
	}
	d := &denials{}
	x := acl.NewStatic(rules, acl.Options{Logger: discardLogger(), OnDeny: d.add})
	haAddr := haTestAddr(t)
	m, mcl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		HAListen: haAddr, ACL: x}, Deps{Logger: discardLogger()})
	s, _, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		Role: RoleSlave, BrokerID: 1, HAMaster: haAddr, HASyncInterval: 50 * time.Millisecond, ACL: x}, Deps{Logger: discardLogger()})
	maddr := m.Addr().String()
	signedInvoke := func(c primitive.Credentials, req *remoting.Command) *remoting.Command {
		ours(c).Sign(req)
		return invoke(t, mcl, maddr, req)
	}
	if r := signedInvoke(aclAdmin, createTopicReq("Keep", 2)); r.Code != 0 {
		t.Fatalf("create: %d %s", r.Code, r.Remark)
	}
	if r := signedInvoke(aclUser, commitReq("FollowGroup", "Keep", 1, 1)); r.Code != 0 {
		t.Fatalf("commit: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 20*time.Second, "the slave to copy the master's topic and offset", func() bool {
		_, keep := s.topics.Get("Keep")
		off, ok := s.offsets.Query("FollowGroup", "Keep", 1)
		return keep && ok && off == 1
	})
	n := s.follow.Syncs()
	waitCond(t, 10*time.Second, "two more syncs", func() bool { return s.follow.Syncs() >= n+2 })
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.list) != 0 {
		t.Fatalf("the master refused the slave: %v", d.list)
	}
}

// TestBrokerACLStoredMessageTopic: a CONSUMER_SEND_MSG_BACK or a
// VIEW_MESSAGE_BY_ID reads a stored message by its offset; with an ACL the
// account needs SUB on that message's own topic. Before, an account
// could send back (or view) a message of a topic it is denied, naming a
// topic it may use as originTopic, and read the copy from its group's
// retry topic.
func TestBrokerACLStoredMessageTopic(t *testing.T) {
	t.Parallel()
	rules, err := acl.Parse([]byte(aclTestFile))
	if err != nil {
		t.Fatal(err)
	}
	b, cl := startBroker(t, func(c *Config) { c.ACL = acl.NewStatic(rules, acl.Options{Logger: discardLogger()}) })
	addr := b.Addr().String()
	signed := func(c primitive.Credentials, req *remoting.Command) *remoting.Command {
		ours(c).Sign(req)
		return invoke(t, cl, addr, req)
	}
	offsetOf := func(topic string, c primitive.Credentials) int64 {
		t.Helper()
		if r := signed(aclAdmin, createTopicReq(topic, 1)); r.Code != 0 {
			t.Fatalf("create %s: %d %s", topic, r.Code, r.Remark)
		}
		r := signed(c, sendReq(topic, 0, []byte("stored in "+topic), ""))
		if r.Code != 0 {
			t.Fatalf("send to %s: %d %s", topic, r.Code, r.Remark)
		}
		_, off, err := store.DecodeMessageID(r.ExtFields["msgId"])
		if err != nil {
			t.Fatal(err)
		}
		return off
	}
	secret := offsetOf("SecretTopic", aclAdmin)
	mine := offsetOf("AclTopic", aclUser)
	sendBack := func(offset int64, origin string) *remoting.Command {
		h := remoting.ConsumerSendMsgBackRequestHeader{Offset: offset, Group: "AppGroup", DelayLevel: 1, OriginMsgID: "x", OriginTopic: origin}
		return signed(aclUser, remoting.NewRequest(remoting.ConsumerSendMsgBack, h.Encode(), nil))
	}
	if r := sendBack(secret, "AclTopic"); r.Code != int32(remoting.NoPermission) || !strings.Contains(r.Remark, "the topic of the stored message") || strings.Contains(r.Remark, "SecretTopic") {
		t.Fatalf("send-back of a DENY topic's message naming another origin: %d %q", r.Code, r.Remark)
	}
	if r := sendBack(mine, "AclTopic"); r.Code != 0 {
		t.Fatalf("send-back of an allowed message: %d %q", r.Code, r.Remark)
	}
	view := func(offset int64) *remoting.Command {
		return signed(aclUser, remoting.NewRequest(remoting.ViewMessageByID, map[string]string{"offset": strconv.FormatInt(offset, 10)}, nil))
	}
	if r := view(secret); r.Code != int32(remoting.NoPermission) || !strings.Contains(r.Remark, "the topic of the stored message") || strings.Contains(r.Remark, "SecretTopic") {
		t.Fatalf("view of a DENY topic's message: %d %q", r.Code, r.Remark)
	}
	if r := view(mine); r.Code != 0 {
		t.Fatalf("view of an allowed message: %d %q", r.Code, r.Remark)
	}
	// A send whose long and one-letter topic keys disagree is checked on
	// the one the broker writes (it reads the one-letter keys).
	req := sendReq("AclTopic", 0, []byte("x"), "")
	req.ExtFields["a"], req.ExtFields["b"] = "pg", "SecretTopic"
	if r := signed(aclUser, req); r.Code != int32(remoting.NoPermission) || !strings.Contains(r.Remark, `topic "SecretTopic"`) {
		t.Fatalf("send with mixed key styles: %d %q", r.Code, r.Remark)
	}
}

// TestBrokerACLEndTransactionTopic: with an ACL, END_TRANSACTION needs PUB
// on the topic of the half message it resolves (its header names none):
// an account denied that topic cannot commit or roll back another
// producer's transaction.
func TestBrokerACLEndTransactionTopic(t *testing.T) {
	t.Parallel()
	rules, err := acl.Parse([]byte(aclTestFile))
	if err != nil {
		t.Fatal(err)
	}
	b, cl := startBroker(t, func(c *Config) { c.ACL = acl.NewStatic(rules, acl.Options{Logger: discardLogger()}) })
	addr := b.Addr().String()
	signed := func(c primitive.Credentials, req *remoting.Command) *remoting.Command {
		ours(c).Sign(req)
		return invoke(t, cl, addr, req)
	}
	half := func(topic string) (phys, half int64, uniq string) {
		t.Helper()
		if r := signed(aclAdmin, createTopicReq(topic, 1)); r.Code != 0 {
			t.Fatalf("create %s: %d %s", topic, r.Code, r.Remark)
		}
		uniq = "UNIQ" + topic
		resp := signed(aclAdmin, preparedReq(topic, 0, []byte("half"), uniq))
		if resp.Code != 0 {
			t.Fatalf("prepared send: %d %s", resp.Code, resp.Remark)
		}
		_, phys, err := store.DecodeMessageID(resp.ExtFields["msgId"])
		if err != nil {
			t.Fatal(err)
		}
		h, _ := strconv.ParseInt(resp.ExtFields["queueOffset"], 10, 64)
		return phys, h, uniq
	}
	phys, h, uniq := half("SecretTopic")
	if r := signed(aclUser, endReq("pg", phys, h, 8, uniq)); r.Code != int32(remoting.NoPermission) || !strings.Contains(r.Remark, "the topic of the stored message") || strings.Contains(r.Remark, "SecretTopic") {
		t.Fatalf("commit of a DENY topic's half message: %d %q", r.Code, r.Remark)
	}
	phys, h, uniq = half("AclTopic")
	if r := signed(aclUser, endReq("pg", phys, h, 8, uniq)); r.Code != 0 {
		t.Fatalf("commit of an allowed half message: %d %q", r.Code, r.Remark)
	}
}

// TestBrokerACLProducerGroupRegistration: a heartbeat registering a
// producer group the account is denied is refused NO_PERMISSION naming
// the group, and the client is not registered as its producer (it would
// be asked the group's transaction checks, half bodies included); a group
// the account may use is registered.
func TestBrokerACLProducerGroupRegistration(t *testing.T) {
	t.Parallel()
	e := startACL(t)
	heartbeat := func(group string) *remoting.Command {
		body, _ := json.Marshal(remoting.HeartbeatData{ClientID: "intruder@1",
			ProducerDataSet: []remoting.ProducerData{{GroupName: "CLIENT_INNER_PRODUCER"}, {GroupName: group}}})
		return e.signed(t, aclUser, remoting.NewRequest(remoting.HeartBeat, nil, body))
	}
	if r := heartbeat("DeniedGroup"); r.Code != int32(remoting.NoPermission) || !strings.Contains(r.Remark, `group "DeniedGroup"`) {
		t.Fatalf("heartbeat registering a denied producer group: %d %q", r.Code, r.Remark)
	}
	if slices.Contains(e.b.consumers.ProducerGroups(), "DeniedGroup") {
		t.Fatal("the client was registered as a producer of the denied group")
	}
	if r := heartbeat("AppProducers"); r.Code != 0 {
		t.Fatalf("heartbeat registering an allowed producer group: %d %q", r.Code, r.Remark)
	}
	if !slices.Contains(e.b.consumers.ProducerGroups(), "AppProducers") {
		t.Fatal("the allowed producer group is not registered")
	}
}

// TestBrokerUnregisterClientOnlyOwnConn: UNREGISTER_CLIENT naming another
// client's id from another connection removes nothing (it would cut that
// client off its groups: no rebalance share, no transaction checks); the
// client's own request on its connection removes it.
func TestBrokerUnregisterClientOnlyOwnConn(t *testing.T) {
	t.Parallel()
	e := startACL(t)
	const id = "victim@1"
	body, _ := json.Marshal(remoting.HeartbeatData{ClientID: id,
		ProducerDataSet: []remoting.ProducerData{{GroupName: "VictimPG"}},
		ConsumerDataSet: []remoting.ConsumerData{{GroupName: "VictimCG", ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING"}}})
	if r := e.signed(t, aclUser, remoting.NewRequest(remoting.HeartBeat, nil, body)); r.Code != 0 {
		t.Fatalf("heartbeat: %d %q", r.Code, r.Remark)
	}
	unregister := func(cl *remoting.Client) {
		t.Helper()
		h := remoting.UnregisterClientRequestHeader{ClientID: id, ProducerGroup: "VictimPG", ConsumerGroup: "VictimCG"}
		req := remoting.NewRequest(remoting.UnregisterClient, h.Encode(), nil)
		ours(aclUser).Sign(req)
		if r := invoke(t, cl, e.b.AdvertisedAddr(), req); r.Code != 0 {
			t.Fatalf("unregister: %d %q", r.Code, r.Remark)
		}
	}
	other := remoting.NewClient(remoting.ClientConfig{})
	defer other.Close()
	unregister(other)
	if !slices.Contains(e.b.consumers.ProducerGroups(), "VictimPG") || !slices.Contains(e.b.consumers.ClientIDs("VictimCG"), id) {
		t.Fatal("another connection's UNREGISTER_CLIENT removed the client")
	}
	unregister(e.cl)
	if slices.Contains(e.b.consumers.ProducerGroups(), "VictimPG") || slices.Contains(e.b.consumers.ClientIDs("VictimCG"), id) {
		t.Fatal("the client's own UNREGISTER_CLIENT removed nothing")
	}
}
