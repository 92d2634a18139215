package broker

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/acl2"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

const (
	auth2RootPw  = "root-pass-4711"
	auth2AlicePw = "alice-pass-4711"
)

var (
	auth2Root  = primitive.Credentials{AccessKey: "root", SecretKey: auth2RootPw}
	auth2Alice = primitive.Credentials{AccessKey: "alice", SecretKey: auth2AlicePw}
)

func createUserReq(name, pw, typ string) *remoting.Command {
	body, _ := json.Marshal(acl2.UserInfo{Username: name, Password: pw, UserType: typ})
	return remoting.NewRequest(remoting.AuthCreateUser, map[string]string{"username": name}, body)
}

func createAclReq(subject string, entries ...acl2.PolicyEntryInfo) *remoting.Command {
	body, _ := json.Marshal(acl2.AclInfo{Subject: subject, Policies: []acl2.PolicyInfo{{PolicyType: "Custom", Entries: entries}}})
	return remoting.NewRequest(remoting.AuthCreateAcl, map[string]string{"subject": subject}, body)
}

func allow(res string, acts ...string) acl2.PolicyEntryInfo {
	return acl2.PolicyEntryInfo{Resource: res, Actions: acts, Decision: "Allow"}
}

func deny(res string, acts ...string) acl2.PolicyEntryInfo {
	return acl2.PolicyEntryInfo{Resource: res, Actions: acts, Decision: "Deny"}
}

func signedBy(c primitive.Credentials, req *remoting.Command) *remoting.Command {
	ours(c).Sign(req)
	return req
}

// TestAuth2RemotingEnforcement: with ACL 2.0 on, the AUTH_* codes make
// users and ACLs (only a user allowed to: the initial super user here);
// requests signed by a user are allowed or refused by its policies
// (exact, prefix, Deny over a shorter Allow, a group, an admin code), a
// refusal names the user, the action and the resource and never the
// password; a wrong password and an unsigned request are refused; an
// account of the ACL 1.0 file keeps its ACL 1.0 permissions.
func TestAuth2RemotingEnforcement(t *testing.T) {
	t.Parallel()
	rules, err := acl.Parse([]byte(aclTestFile))
	if err != nil {
		t.Fatal(err)
	}
	b, cl := startBroker(t, func(c *Config) {
		c.AuthenticationEnabled, c.AuthorizationEnabled = true, true
		c.InitAuthenticationUser = &acl2.UserInfo{Username: "root", Password: auth2RootPw}
		c.ACL = acl.NewStatic(rules, acl.Options{Logger: discardLogger()})
	})
	addr := b.Addr().String()
	ok := func(what string, r *remoting.Command) {
		t.Helper()
		if r.Code != int32(remoting.Success) {
			t.Fatalf("%s: %d %s", what, r.Code, r.Remark)
		}
	}
	refused := func(what string, r *remoting.Command, says ...string) {
		t.Helper()
		if r.Code != int32(remoting.NoPermission) {
			t.Fatalf("%s: code %d (%s), want NO_PERMISSION", what, r.Code, r.Remark)
		}
		for _, s := range says {
			if !strings.Contains(r.Remark, s) {
				t.Fatalf("%s: remark %q does not say %q", what, r.Remark, s)
			}
		}
		for _, pw := range []string{auth2RootPw, auth2AlicePw} {
			if strings.Contains(r.Remark, pw) {
				t.Fatalf("%s: remark %q holds a password", what, r.Remark)
			}
		}
	}

	refused("unsigned createUser", invoke(t, cl, addr, createUserReq("alice", auth2AlicePw, "")), "not signed")
	ok("root creates alice", invoke(t, cl, addr, signedBy(auth2Root, createUserReq("alice", auth2AlicePw, ""))))
	refused("alice creates a user", invoke(t, cl, addr, signedBy(auth2Alice, createUserReq("eve", "eve-pass-4711", "Super"))),
		"User:alice", "Update", "Cluster:")
	ok("root creates alice's ACL", invoke(t, cl, addr, signedBy(auth2Root, createAclReq("User:alice",
		allow("Topic:orders", "Pub", "Sub"), allow("Topic:pay*", "Pub"), deny("Topic:payroll*", "Pub"),
		allow("Group:g1", "Sub"), allow("Topic:*", "Create")))))

	ok("alice sends to orders (exact)", invoke(t, cl, addr, signedBy(auth2Alice, sendReq("orders", 0, []byte("m"), ""))))
	ok("alice sends to payments (prefix)", invoke(t, cl, addr, signedBy(auth2Alice, sendReq("payments", 0, []byte("m"), ""))))
	refused("alice sends to payroll (longer Deny)", invoke(t, cl, addr, signedBy(auth2Alice, sendReq("payroll", 0, []byte("m"), ""))),
		"User:alice", "Pub", "Topic:payroll")
	refused("alice sends to news (no policy)", invoke(t, cl, addr, signedBy(auth2Alice, sendReq("news", 0, []byte("m"), ""))),
		"User:alice", "Pub", "Topic:news", "no matched policies")
	ok("root sends anywhere (super)", invoke(t, cl, addr, signedBy(auth2Root, sendReq("news", 0, []byte("m"), ""))))
	if r := invoke(t, cl, addr, signedBy(auth2Alice, pullReq("g1", "orders", 0, 0, 0, "*"))); r.Code == int32(remoting.NoPermission) {
		t.Fatalf("alice pulls orders as g1: %s", r.Remark)
	}
	refused("alice pulls as g2", invoke(t, cl, addr, signedBy(auth2Alice, pullReq("g2", "orders", 0, 0, 0, "*"))), "User:alice", "Sub", "Group:g2")
	refused("alice pulls payments", invoke(t, cl, addr, signedBy(auth2Alice, pullReq("g1", "payments", 0, 0, 0, "*"))), "Sub", "Topic:payments")
	refused("alice deletes orders (admin code)", invoke(t, cl, addr, signedBy(auth2Alice,
		remoting.NewRequest(remoting.DeleteTopicInBroker, map[string]string{"topic": "orders"}, nil))), "Delete", "Topic:orders")
	refused("wrong password", invoke(t, cl, addr, signedBy(primitive.Credentials{AccessKey: "alice", SecretKey: "not-her-pass"},
		sendReq("orders", 0, []byte("m"), ""))), "signature check failed", "User:alice")
	refused("unknown user", invoke(t, cl, addr, signedBy(primitive.Credentials{AccessKey: "mallory", SecretKey: "x-pass-4711"},
		sendReq("orders", 0, []byte("m"), ""))), "no account")

	// ACL 1.0's accounts keep their permissions.
	ok("ACL 1.0 app-user sends", invoke(t, cl, addr, signedBy(aclUser, sendReq("orders", 0, []byte("m"), ""))))
	refused("ACL 1.0 app-user to its DENY topic", invoke(t, cl, addr, signedBy(aclUser, sendReq("SecretTopic", 0, []byte("m"), ""))), "app-user")

	// GET_USER and LIST_USER never answer a password.
	r := invoke(t, cl, addr, signedBy(auth2Root, remoting.NewRequest(remoting.AuthGetUser, map[string]string{"username": "alice"}, nil)))
	ok("get alice", r)
	if strings.Contains(string(r.Body), auth2AlicePw) || !strings.Contains(string(r.Body), `"username":"alice"`) {
		t.Fatalf("GET_USER answered %s", r.Body)
	}
	r = invoke(t, cl, addr, signedBy(auth2Root, remoting.NewRequest(remoting.AuthListAcl, map[string]string{"subjectFilter": "alice"}, nil)))
	ok("list ACLs", r)
	if !strings.Contains(string(r.Body), "Topic:payroll*") {
		t.Fatalf("LIST_ACL answered %s", r.Body)
	}
}

// TestAuth2KeptAcrossRestoreAndPromotion: users and ACLs made with the
// AUTH_* codes are in the bucket checkpoint: a broker restored on an
// empty disk, a serving slave (which copies them from its master's
// checkpoint) and that slave promoted in its master's place decide as
// the first did.
func TestAuth2KeptAcrossRestoreAndPromotion(t *testing.T) {
	t.Parallel()
	q := acl2.Request{Username: "alice", Resource: acl2.Topic("payroll"), Actions: []acl2.Action{acl2.Pub}}
	qOK := acl2.Request{Username: "alice", Resource: acl2.Topic("payments"), Actions: []acl2.Action{acl2.Pub}}
	same := func(b *Broker, what string) {
		t.Helper()
		if pw, ok := b.auth.Password("alice"); !ok || pw != auth2AlicePw {
			t.Fatalf("%s: alice or her password lost", what)
		}
		if d := b.auth.Decide(q); d == nil {
			t.Fatalf("%s: alice may send to payroll (the Deny entry was lost)", what)
		}
		if d := b.auth.Decide(qOK); d != nil {
			t.Fatalf("%s: %s", what, d.Reason)
		}
	}
	mk := func(t *testing.T, cl *remoting.Client, addr string) {
		t.Helper()
		for _, r := range []*remoting.Command{
			createUserReq("alice", auth2AlicePw, ""),
			createAclReq("User:alice", allow("Topic:pay*", "Pub"), deny("Topic:payroll*", "Pub")),
		} {
			if resp := invoke(t, cl, addr, r); resp.Code != 0 {
				t.Fatalf("%s: %d %s", remoting.RequestCode(r.Code), resp.Code, resp.Remark)
			}
		}
	}
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		CheckpointInterval: 200 * time.Millisecond}
	b, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	mk(t, cl, b.Addr().String())
	stop()
	b, _, stop = runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	same(b, "after a restart")
	stop()
	cfg.DataDir = t.TempDir()
	b, _, _ = runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	same(b, "after a restore on an empty disk")

	// A promoted slave takes them from the bucket checkpoint.
	mem := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	acfg.LeaseTTL, bcfg.LeaseTTL = time.Minute, time.Minute
	ma := runNode(t, acfg, Deps{Bucket: mem})
	sb := runNode(t, bcfg, Deps{Bucket: mem})
	waitCond(t, 20*time.Second, "the master to see its slave", func() bool {
		m := ma.Broker()
		return ma.role() == RoleSyncMaster && sb.role() == RoleSlave && m != nil && m.haSlaves() == 1
	})
	rcl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer rcl.Close()
	mk(t, rcl, acfg.Listen)
	v := ma.Broker().dur.CheckpointVersion()
	waitCond(t, 20*time.Second, "a checkpoint after the change", func() bool { return ma.Broker().dur.CheckpointVersion() > v+1 })
	waitCond(t, 20*time.Second, "the serving slave to copy alice from the checkpoint", func() bool {
		_, ok := sb.Broker().auth.Password("alice")
		return ok
	})
	same(sb.Broker(), "on the serving slave")
	if r := invoke(t, rcl, bcfg.Listen, remoting.NewRequest(remoting.PromoteBroker, nil, nil)); r.Code != int32(remoting.Success) {
		t.Fatalf("promote the slave: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 30*time.Second, "the slave to take over", func() bool {
		return sb.role() == RoleSyncMaster && sb.Broker() != nil
	})
	same(sb.Broker(), "on the promoted slave")
}

// grpcSigned is ctx with the 5.x clients' headers, signed with c.
func grpcSigned(c primitive.Credentials) (context.Context, context.CancelFunc) {
	date := time.Now().UTC().Format("20060102T150405Z")
	mac := hmac.New(sha1.New, []byte(c.SecretKey))
	mac.Write([]byte(date))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "auth2-"+c.AccessKey, "x-mq-date-time", date,
		"authorization", "MQv2-HMAC-SHA1 Credential="+c.AccessKey+", SignedHeaders=x-mq-date-time, Signature="+hex.EncodeToString(mac.Sum(nil)))
	return context.WithTimeout(ctx, 20*time.Second)
}

// TestAuth2GRPC: with ACL 2.0 on, the gRPC endpoint checks a request
// signed by a user (the 5.x clients' signature) by its password and
// policies: sends (exact, prefix, Deny), POP receives and assignments of
// a group; a refusal is FORBIDDEN and names the user, action and
// resource; a wrong password is UNAUTHORIZED.
func TestAuth2GRPC(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, func(c *Config) {
		c.AuthenticationEnabled, c.AuthorizationEnabled = true, true
		c.InitAuthenticationUser = &acl2.UserInfo{Username: "root", Password: auth2RootPw}
	})
	addr := b.Addr().String()
	for _, r := range []*remoting.Command{
		createUserReq("alice", auth2AlicePw, ""),
		createAclReq("User:alice", allow("Topic:orders", "Pub", "Sub"), allow("Topic:pay*", "Pub"), deny("Topic:payroll*", "Pub"),
			allow("Group:g1", "Sub")),
	} {
		if resp := invoke(t, cl, addr, signedBy(auth2Root, r)); resp.Code != 0 {
			t.Fatalf("%s: %d %s", remoting.RequestCode(r.Code), resp.Code, resp.Remark)
		}
	}
	st := grpcEndpoint(t, b)
	send := func(c primitive.Credentials, topic string) *apiv2.Status {
		t.Helper()
		ctx, cancel := grpcSigned(c)
		defer cancel()
		resp, err := st.SendMessage(ctx, &apiv2.SendMessageRequest{Messages: []*apiv2.Message{grpcMsg(topic, "NORMAL", "0C0001")}})
		if err != nil {
			t.Fatalf("send to %s: %v", topic, err)
		}
		return resp.GetStatus()
	}
	want := func(what string, s *apiv2.Status, code apiv2.Code, says ...string) {
		t.Helper()
		if s.GetCode() != code {
			t.Fatalf("%s: %v, want %v", what, s, code)
		}
		for _, w := range says {
			if !strings.Contains(s.GetMessage(), w) {
				t.Fatalf("%s: %q does not say %q", what, s.GetMessage(), w)
			}
		}
		if strings.Contains(s.GetMessage(), auth2AlicePw) {
			t.Fatalf("%s: %q holds the password", what, s.GetMessage())
		}
	}
	want("alice sends to orders", send(auth2Alice, "orders"), apiv2.Code_OK)
	want("alice sends to payments", send(auth2Alice, "payments"), apiv2.Code_OK)
	want("alice sends to payroll", send(auth2Alice, "payroll"), apiv2.Code_FORBIDDEN, "User:alice", "Pub", "Topic:payroll")
	want("alice sends to news", send(auth2Alice, "news"), apiv2.Code_FORBIDDEN, "User:alice", "Topic:news")
	want("root sends to news", send(auth2Root, "news"), apiv2.Code_OK)
	want("wrong password", send(primitive.Credentials{AccessKey: "alice", SecretKey: "not-her-pass"}, "orders"), apiv2.Code_UNAUTHORIZED, "User:alice")

	ctx, cancel := grpcSigned(auth2Alice)
	defer cancel()
	qa, err := st.QueryAssignment(ctx, &apiv2.QueryAssignmentRequest{Topic: &apiv2.Resource{Name: "orders"}, Group: &apiv2.Resource{Name: "g1"}})
	if err != nil || qa.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("alice's assignment of orders in g1: %v %v", qa.GetStatus(), err)
	}
	rs, err := st.ReceiveMessage(ctx, &apiv2.ReceiveMessageRequest{Group: &apiv2.Resource{Name: "g2"},
		MessageQueue: &apiv2.MessageQueue{Topic: &apiv2.Resource{Name: "orders"}, Id: -1}, BatchSize: 1,
		FilterExpression: &apiv2.FilterExpression{Type: apiv2.FilterType_TAG, Expression: "*"}, InvisibleDuration: durationpb.New(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	first, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	want("alice POPs orders in g2", first.GetStatus(), apiv2.Code_FORBIDDEN, "User:alice", "Sub", "Group:g2")
}
