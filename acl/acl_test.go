package acl

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

const sampleFile = `
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
      - topicD=PUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
`

func mustParse(t testing.TB, s string) *Rules {
	t.Helper()
	r, err := Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestACLParseRocketMQSample reads the sample plain_acl.yml RocketMQ ships
// (numbers as secrets, an empty whiteRemoteAddress included).
func TestACLParseRocketMQSample(t *testing.T) {
	r := mustParse(t, sampleFile)
	if r.Accounts() != 2 || len(r.globalWhite) != 2 || len(r.Warnings) != 0 {
		t.Fatalf("accounts %d, global white %d, warnings %v", r.Accounts(), len(r.globalWhite), r.Warnings)
	}
	a := r.accounts["RocketMQ"]
	if string(a.secret) != "12345678" || a.admin || a.defaultTopicPerm != Deny || a.defaultGroupPerm != Sub ||
		a.topics["topicB"] != Pub|Sub || a.groups["groupA"] != Deny || !a.white.empty() {
		t.Fatalf("account RocketMQ parsed as %+v", a)
	}
	b := r.accounts["rocketmq2"]
	if !b.admin || b.hasPerms || !b.white.match(netip.MustParseAddr("192.168.1.7")) {
		t.Fatalf("account rocketmq2 parsed as %+v", b)
	}
	if c, ok := r.Credentials(""); !ok || c.AccessKey != "rocketmq2" {
		t.Fatalf("first admin credentials: %v %v", c.AccessKey, ok)
	}
}

func TestACLParseErrors(t *testing.T) {
	f := func(name, file, want string) {
		t.Helper()
		_, err := Parse([]byte(file))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want it to say %q", name, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t-value") {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
	f("short access key", "accounts:\n  - accessKey: ab\n    secretKey: s3cr3t-value\n", "at least 6")
	f("short secret", "accounts:\n  - accessKey: abcdefg\n    secretKey: xy\n", "secretKey must be")
	f("duplicate", "accounts:\n  - accessKey: abcdefg\n    secretKey: s3cr3t-value\n  - accessKey: abcdefg\n    secretKey: s3cr3t-value\n", "listed twice")
	f("bad entry", "accounts:\n  - accessKey: abcdefg\n    secretKey: s3cr3t-value\n    topicPerms: [topicA]\n", "want name=PUB")
	f("bad address", "accounts:\n  - accessKey: abcdefg\n    secretKey: s3cr3t-value\n    whiteRemoteAddress: 10.0.0.300\n", "octet")
	f("yaml", "accounts: [\n", "acl:")
	r := mustParse(t, "accounts:\n  - accessKey: abcdefg\n    secretKey: s3cr3t-value\n    defaultTopicPerm: PUBB\n")
	if len(r.Warnings) != 1 || r.accounts["abcdefg"].defaultTopicPerm != Deny {
		t.Fatalf("unknown perm: warnings %v", r.Warnings)
	}
}

func TestACLAddressPatterns(t *testing.T) {
	f := func(pattern, ip string, want bool) {
		t.Helper()
		s, err := parseAddrSet(pattern)
		if err != nil {
			t.Fatalf("%q: %v", pattern, err)
		}
		if got := s.match(netip.MustParseAddr(ip)); got != want {
			t.Errorf("%q matches %s = %v, want %v", pattern, ip, got, want)
		}
	}
	f("*", "1.2.3.4", true)
	f("*", "::1", true)
	f("*.*.*.*", "8.8.8.8", true)
	f("192.168.0.*", "192.168.0.77", true)
	f("192.168.0.*", "192.168.1.77", false)
	f("192.168.*.*", "192.168.200.1", true)
	f("192.168.1.1-100", "192.168.1.100", true)
	f("192.168.1.1-100", "192.168.1.101", false)
	f("192.168.1.1-100", "192.168.1.0", false)
	f("192.168.1.{1,5,9}", "192.168.1.5", true)
	f("192.168.1.{1,5,9}", "192.168.1.6", false)
	f("10.0.0.1,10.0.0.2", "10.0.0.2", true)
	f("10.0.0.1, 10.0.0.2", "10.0.0.3", false)
	f("127.0.0.1", "::ffff:127.0.0.1", true)
	f("::1", "::1", true)
	f("", "127.0.0.1", false)
	for _, bad := range []string{"10.0.*.1", "10.0.0", "10.0.0.1-", "10.0.0.9-2", "fe80::zz"} {
		if _, err := parseAddrSet(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestACLSignatureVector: the signature is client-go's calculateSignature
// over the content Sign builds (its own test vector: the content "Hello
// RocketMQ Client ACL Feature" under the key "adiaushdiaushd").
func TestACLSignatureVector(t *testing.T) {
	req := remoting.NewRequest(remoting.SendMessage, map[string]string{}, []byte(" Client ACL Feature"))
	Credentials{AccessKey: "Hello RocketMQ", SecretKey: "adiaushdiaushd"}.Sign(req)
	if got := req.ExtFields[KeySignature]; got != "tAb/54Rwwcq+pbH8Loi7FWX4QSQ=" {
		t.Fatalf("signature %q", got)
	}
}

func sendReq(topic string) *remoting.Command {
	return remoting.NewRequest(remoting.SendMessage, map[string]string{
		"producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "queueId": "0", "sysFlag": "0",
		"bornTimestamp": "1700000000000", "flag": "0", "properties": "UNIQ_KEY\x01ABC\x02", "reconsumeTimes": "0",
		"unitMode": "false", "batch": "false", "maxReconsumeTimes": "16", "defaultTopicQueueNums": "4",
	}, []byte("hello"))
}

// TestACLVerifyDecisions runs the checks of PlainPermissionManager.validate
// over signed requests: each row is a request, an account and the
// verdict; a refusal's remark names what was missing.
func TestACLVerifyDecisions(t *testing.T) {
	r := mustParse(t, sampleFile+`
  - accessKey: admin-perms
    secretKey: adminsecret
    admin: true
    defaultTopicPerm: SUB
    topicPerms:
      - onlyThis=PUB
  - accessKey: deny-groups
    secretKey: denysecret
    defaultTopicPerm: PUB
    defaultGroupPerm: DENY
    groupPerms:
      - pgOwn=PUB
`)
	user := Credentials{AccessKey: "RocketMQ", SecretKey: "12345678"}
	peer := netip.MustParseAddr("10.1.1.1")
	f := func(name string, req *remoting.Command, c Credentials, peer netip.Addr, broker bool, want string) {
		t.Helper()
		c.Sign(req)
		d := r.Verify(peer, req, broker)
		switch {
		case want == "" && d != nil:
			t.Errorf("%s: refused: %v", name, d)
		case want != "" && d == nil:
			t.Errorf("%s: allowed, want a refusal saying %q", name, want)
		case want != "" && !strings.Contains(d.Error(), want):
			t.Errorf("%s: refused with %q, want it to say %q", name, d, want)
		}
		if d != nil && c.SecretKey != "" && strings.Contains(d.Error(), string(c.SecretKey)) {
			t.Errorf("%s: the remark holds the secret: %q", name, d)
		}
	}
	f("send to a PUB topic", sendReq("topicD"), user, peer, true, "")
	f("send to a SUB topic", sendReq("topicC"), user, peer, true, `no PUB permission on topic "topicC"`)
	f("send to a DENY topic", sendReq("topicA"), user, peer, true, `on topic "topicA" (it has DENY)`)
	f("send to an unlisted topic (default DENY)", sendReq("other"), user, peer, true, `topic "other"`)
	f("wrong secret", sendReq("topicD"), Credentials{AccessKey: "RocketMQ", SecretKey: "wrong-secret"}, peer, true, "signature check failed")
	f("unknown account", sendReq("topicD"), Credentials{AccessKey: "nobody-here", SecretKey: "12345678"}, peer, true, `no account for accessKey "nobody-here"`)
	f("unsigned", sendReq("topicD"), Credentials{}, peer, true, "not signed")
	f("global white list", sendReq("topicA"), Credentials{}, netip.MustParseAddr("192.168.0.9"), true, "")
	// An account's white list: the access key, no signature.
	f("account white list", remoting.NewRequest(remoting.UpdateAndCreateTopic, map[string]string{"topic": "x", KeyAccessKey: "rocketmq2"}, nil),
		Credentials{}, netip.MustParseAddr("192.168.1.9"), true, "")
	pull := func(topic, group string) *remoting.Command {
		return remoting.NewRequest(remoting.PullMessage, map[string]string{"topic": topic, "consumerGroup": group, "queueId": "0"}, nil)
	}
	f("pull", pull("topicB", "groupC"), user, peer, true, "")
	f("pull, DENY group", pull("topicB", "groupA"), user, peer, true, `no SUB permission on group "groupA"`)
	f("pull retry topic of a SUB group", pull("%RETRY%groupC", "groupC"), user, peer, true, "")
	f("pull retry topic of a DENY group", pull("%RETRY%groupA", "groupC"), user, peer, true, `group "groupA"`)
	f("pull DLQ of a DENY group", pull("%DLQ%groupA", "groupC"), user, peer, true, `group "groupA"`)
	f("send to the retry topic of a SUB group", sendReq("%RETRY%groupC"), user, peer, true, "")
	f("send-back", remoting.NewRequest(remoting.ConsumerSendMsgBack, map[string]string{"group": "groupB", "originTopic": "topicB", "offset": "1"}, nil), user, peer, true, "")
	f("send-back, SUB-only origin topic", remoting.NewRequest(remoting.ConsumerSendMsgBack, map[string]string{"group": "groupB", "originTopic": "topicC", "offset": "1"}, nil), user, peer, true, `no PUB permission on topic "topicC"`)
	f("offset commit", remoting.NewRequest(remoting.UpdateConsumerOffset, map[string]string{"consumerGroup": "groupC", "topic": "topicC", "queueId": "0", "commitOffset": "3"}, nil), user, peer, true, "")
	f("offset commit of a DENY group", remoting.NewRequest(remoting.UpdateConsumerOffset, map[string]string{"consumerGroup": "groupA", "topic": "topicC", "queueId": "0", "commitOffset": "3"}, nil), user, peer, true, `group "groupA"`)
	hb := []byte(`{"clientID":"c","consumerDataSet":[{"groupName":"groupC","subscriptionDataSet":[{"topic":"topicC"},{"topic":"%RETRY%groupC"}]}],"producerDataSet":[]}`)
	f("heartbeat", remoting.NewRequest(remoting.HeartBeat, map[string]string{}, hb), user, peer, true, "")
	hbBad := []byte(`{"clientID":"c","consumerDataSet":[{"groupName":"groupC","subscriptionDataSet":[{"topic":"topicA"}]}]}`)
	f("heartbeat subscribing a DENY topic", remoting.NewRequest(remoting.HeartBeat, map[string]string{}, hbBad), user, peer, true, `topic "topicA"`)
	// A producer group a heartbeat registers needs PUB or SUB on it
	// (its transaction checks carry the half messages' bodies).
	hbProducer := func(groups ...string) *remoting.Command {
		b := `{"clientID":"c","consumerDataSet":[],"producerDataSet":[`
		for i, g := range groups {
			if i > 0 {
				b += ","
			}
			b += `{"groupName":"` + g + `"}`
		}
		return remoting.NewRequest(remoting.HeartBeat, map[string]string{}, []byte(b+`]}`))
	}
	f("heartbeat registering a DENY producer group", hbProducer("CLIENT_INNER_PRODUCER", "groupA"), user, peer, true, `no PUB or SUB permission on group "groupA" (it has DENY)`)
	f("heartbeat registering a SUB producer group", hbProducer("groupC"), user, peer, true, "")
	denyGroups := Credentials{AccessKey: "deny-groups", SecretKey: "denysecret"}
	f("heartbeat registering a listed producer group", hbProducer("CLIENT_INNER_PRODUCER", "pgOwn"), denyGroups, peer, true, "")
	f("heartbeat registering another's producer group", hbProducer("pgVictim"), denyGroups, peer, true, `group "pgVictim"`)
	// A retry or DLQ topic with no group is a topic (default DENY here).
	f("send to a bare %RETRY%", sendReq("%RETRY%"), user, peer, true, `topic "%RETRY%"`)
	f("pull of a bare %DLQ%", pull("%DLQ%", "groupC"), user, peer, true, `topic "%DLQ%"`)
	f("admin code, not admin", remoting.NewRequest(remoting.UpdateAndCreateTopic, map[string]string{"topic": "x"}, nil), user, peer, true, "needs an admin account")
	f("HA demote, not admin", remoting.NewRequest(remoting.DemoteBroker, nil, nil), user, peer, true, "needs an admin account")
	admin := Credentials{AccessKey: "rocketmq2", SecretKey: "12345678"}
	f("admin code, admin", remoting.NewRequest(remoting.UpdateAndCreateTopic, map[string]string{"topic": "x"}, nil), admin, peer, true, "")
	f("admin, any topic", sendReq("topicA"), admin, peer, true, "")
	adminPerms := Credentials{AccessKey: "admin-perms", SecretKey: "adminsecret"}
	f("admin with perms is held to them", sendReq("elsewhere"), adminPerms, peer, true, `no PUB permission on topic "elsewhere"`)
	f("admin with perms, listed topic", sendReq("onlyThis"), adminPerms, peer, true, "")
	f("trace topic", sendReq("RMQ_SYS_TRACE_TOPIC"), user, peer, true, "")
	f("token, java style", sendReq("topicD"), Credentials{AccessKey: "RocketMQ", SecretKey: "12345678", SecurityToken: "tok"}, peer, true, "")

	reg := func() *remoting.Command {
		return remoting.NewRequest(remoting.RegisterBroker, map[string]string{"brokerName": "b", "brokerAddr": "1.2.3.4:10911", "clusterName": "c", "brokerId": "0"}, []byte("{}"))
	}
	f("namesrv register, admin", reg(), admin, peer, false, "")
	f("namesrv register, not admin", reg(), user, peer, false, "needs an admin account")
	f("namesrv register, unsigned", reg(), Credentials{}, peer, false, "not signed")
	f("namesrv route read, unsigned", remoting.NewRequest(remoting.GetRouteinfoByTopic, map[string]string{"topic": "t"}, nil), Credentials{}, peer, false, "")
	f("namesrv KV write, not admin", remoting.NewRequest(remoting.PutKVConfig, map[string]string{"namespace": "ORDER_TOPIC_CONFIG", "key": "t", "value": "b:1"}, nil), user, peer, false, "needs an admin account")

	// A body changed after signing fails.
	req := sendReq("topicD")
	user.Sign(req)
	req.Body = []byte("HELLO")
	if d := r.Verify(peer, req, true); d == nil || !strings.Contains(d.Error(), "signature check failed") {
		t.Fatalf("tampered body: %v", d)
	}
}

// TestACLSecretNeverFormatted: a Secret, and Credentials holding one,
// print as [REDACTED] with every verb and through slog.
func TestACLSecretNeverFormatted(t *testing.T) {
	c := Credentials{AccessKey: "ak-visible", SecretKey: "the-secret-value"}
	var out bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		fmt.Fprintf(&out, verb+"\n", c)
		fmt.Fprintf(&out, verb+"\n", c.SecretKey)
	}
	slog.New(slog.NewJSONHandler(&out, nil)).Info("creds", "c", c, "s", c.SecretKey)
	slog.New(slog.NewTextHandler(&out, nil)).Info("creds", "c", c, "s", c.SecretKey)
	if strings.Contains(out.String(), "the-secret-value") || strings.Contains(out.String(), fmt.Sprintf("%x", "the-secret-value")) {
		t.Fatalf("secret printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "ak-visible") {
		t.Fatalf("access key missing:\n%s", out.String())
	}
}

// TestACLReload: Run picks up a changed file; a file that no longer
// parses keeps the rules in force.
func TestACLReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plain_acl.yml")
	write := func(s string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	account := func(topicPerm string) string {
		return "accounts:\n  - accessKey: reloader\n    secretKey: reload-secret\n    defaultTopicPerm: " + topicPerm + "\n"
	}
	write(account("SUB"))
	var logs bytes.Buffer
	x, err := Open(path, Options{PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); x.Run(ctx) }()
	defer func() { cancel(); <-done }()

	c := Credentials{AccessKey: "reloader", SecretKey: "reload-secret"}
	allowed := func() bool {
		req := sendReq("T")
		c.Sign(req)
		return x.CheckBroker(nil, req) == nil
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if allowed() {
		t.Fatal("PUB allowed with defaultTopicPerm SUB")
	}
	write(account("PUB"))
	waitFor("the reload that grants PUB", allowed)
	rules := x.Rules()
	write("accounts: [\n  - broken")
	waitFor("the parse error to be logged", func() bool { return strings.Contains(logsString(&logs), "does not parse") })
	if x.Rules() != rules || !allowed() {
		t.Fatal("a broken file replaced the rules")
	}
	write(account("DENY"))
	waitFor("the reload that denies", func() bool { return !allowed() })
	if strings.Contains(logsString(&logs), "reload-secret") {
		t.Fatal("a log line holds the secret")
	}
}

// TestACLPeerCacheSweep: slots of closed conns go when the cache has
// doubled, so a broker that never calls ConnClosed does not grow it
// without bound.
func TestACLPeerCacheSweep(t *testing.T) {
	x := NewStatic(mustParse(t, sampleFile), Options{})
	addr := func() netip.Addr { return netip.MustParseAddr("10.0.0.1") }
	closed := make(chan struct{})
	close(closed)
	open := make(chan struct{})
	for i := range 10 * minSweep {
		done := closed
		if i == 0 {
			done = open
		}
		x.check(uint64(i+1), addr, done, sendReq("topicD"), scopeBroker)
	}
	x.peers.mu.RLock()
	n, kept := len(x.peers.m), x.peers.m[1] != nil
	x.peers.mu.RUnlock()
	if n > 2*minSweep || !kept {
		t.Fatalf("cache holds %d slots (open conn kept: %v)", n, kept)
	}
}

// TestACLHeaderSigner: a request signed through a typed header carries
// the signature Credentials.Sign gives the same fields, and verifies; its
// own encoders (JSON, binary) write what the ExtWriter path writes. Both
// of Sign's paths: the header's values taken as they are
// (remoting.ExtValuesAppender), and any header's fields encoded, parsed
// and sorted (a header with AppendExt only).
func TestACLHeaderSigner(t *testing.T) {
	r := mustParse(t, sampleFile)
	hdr := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: "topicD", DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, QueueID: 1, BornTimestamp: 1700000000000, Properties: "UNIQ_KEY\x01A\x02"}
	for _, token := range []string{"tok", ""} {
		c := Credentials{AccessKey: "RocketMQ", SecretKey: "12345678", SecurityToken: token}
		for _, v2 := range []bool{false, true} {
			for _, ser := range []remoting.SerializeType{remoting.SerializeJSON, remoting.SerializeRocketMQ} {
				for _, values := range []bool{true, false} {
					name := fmt.Sprintf("token=%q v2=%v ser=%d values=%v", token, v2, ser, values)
					s := c.NewHeaderSigner()
					var signed remoting.ExtAppender = remoting.SendHeaderExt{H: &hdr, V2: v2}
					if !values {
						signed = extOnly{signed}
					}
					h, err := s.Sign(signed, []byte("body"))
					if err != nil {
						t.Fatal(err)
					}
					code := remoting.SendMessage
					if v2 {
						code = remoting.SendMessageV2
					}
					req := &remoting.Command{Code: int32(code), Language: remoting.LanguageGo, Version: remoting.Version, Header: h, Body: []byte("body"), Serialize: ser}
					frame, err := remoting.AppendFrame(nil, req)
					if err != nil {
						t.Fatal(err)
					}
					req.Header = extOnly{h}
					slow, err := remoting.AppendFrame(nil, req)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(frame, slow) {
						t.Fatalf("%s: own encoder wrote\n%q\nthe ExtWriter\n%q", name, frame, slow)
					}
					dec, err := remoting.DecodeFrame(frame[4:])
					if err != nil {
						t.Fatal(err)
					}
					if d := r.Verify(netip.MustParseAddr("10.0.0.1"), dec, true); d != nil {
						t.Fatalf("%s: %v", name, d)
					}
					byMap := &remoting.Command{Code: int32(code), Header: remoting.SendHeaderExt{H: &hdr, V2: v2}, Body: []byte("body")}
					c.Sign(byMap)
					if byMap.ExtFields[KeySignature] != dec.ExtFields[KeySignature] {
						t.Fatalf("%s: header signer %q, Sign %q", name, dec.ExtFields[KeySignature], byMap.ExtFields[KeySignature])
					}
				}
			}
		}
	}
}

// extOnly hides every method of a header but AppendExt: the encoder then
// takes the ExtWriter path.
type extOnly struct{ remoting.ExtAppender }

// TestACLAllocations: the ACL adds no allocation to a send on either
// side: the broker's check of a signed request (through a connection's
// cache) and the client's HeaderSigner.Sign with the frame's encoding,
// in both serializations. Counts, not times: a change that makes either
// allocate per request fails here. It runs in the README test command's
// pass without -race (under it the check's pooled MAC and buffer are
// dropped at random).
func TestACLAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race; the README test command runs this test without it")
	}
	x := NewStatic(mustParse(t, benchACL), Options{})
	for _, ser := range []remoting.SerializeType{remoting.SerializeJSON, remoting.SerializeRocketMQ} {
		p := newSendSigner(t, ser)
		p.sign()
		if n := testing.AllocsPerRun(200, p.sign); n != 0 {
			t.Errorf("serialize %d: %v allocations per signed request, want 0", ser, n)
		}
		if n := testing.AllocsPerRun(200, checker(t, x, p.frame)); n != 0 {
			t.Errorf("serialize %d: %v allocations per checked request, want 0", ser, n)
		}
	}
}
