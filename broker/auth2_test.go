package broker

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/acl2"
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
// empty disk, and a slave promoted in its master's place, decide as the
// first did.
func TestAuth2KeptAcrossRestoreAndPromotion(t *testing.T) {
	q := acl2.Request{Username: "alice", Resource: acl2.Topic("payroll"), Actions: []acl2.Action{acl2.Pub}}
	qOK := acl2.Request{Username: "alice", Resource: acl2.Topic("payments"), Actions: []acl2.Action{acl2.Pub}}
	same := func(b *Broker, what string) {
		t.Helper()
		if pw, ok := b.Auth2().Password("alice"); !ok || pw != auth2AlicePw {
			t.Fatalf("%s: alice or her password lost", what)
		}
		if d := b.Auth2().Decide(q); d == nil {
			t.Fatalf("%s: alice may send to payroll (the Deny entry was lost)", what)
		}
		if d := b.Auth2().Decide(qOK); d != nil {
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
	if r := invoke(t, rcl, bcfg.Listen, remoting.NewRequest(remoting.PromoteBroker, nil, nil)); r.Code != int32(remoting.Success) {
		t.Fatalf("promote the slave: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 30*time.Second, "the slave to take over", func() bool {
		return sb.role() == RoleSyncMaster && sb.Broker() != nil
	})
	same(sb.Broker(), "on the promoted slave")
}
