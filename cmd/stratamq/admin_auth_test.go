package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/remoting"
)

// TestAdminAuthCommandsAndGoClient: with ACL 2.0 on, the initial super
// user makes a user and its ACL with `stratamq admin createUser` and
// `createAcl` (mqadmin's flags); getUser, listUser, getAcl and listAcl
// show them without the password; an unsigned or a normal user's
// createUser is refused; the official Go client signed as the user sends
// to a topic its prefix Allow covers and is refused on one a longer Deny
// covers; deleteAcl of that Deny lets it through.
func TestAdminAuthCommandsAndGoClient(t *testing.T) {
	const rootPw, alicePw = "root-pass-4711", "alice-pass-4711"
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := startServe(t, t.TempDir(), map[string]string{
		"STRATAMQ_HTTP_LISTEN":              httpAddr,
		"STRATAMQ_AUTHENTICATION_ENABLED":   "true",
		"STRATAMQ_AUTHORIZATION_ENABLED":    "true",
		"STRATAMQ_INIT_AUTHENTICATION_USER": `{"username":"root","password":"` + rootPw + `"}`,
	})
	root := map[string]string{"NAMESRV_ADDR": s.nsAddr, "STRATAMQ_ACCESS_KEY": "root", "STRATAMQ_SECRET_KEY": rootPw}
	alice := map[string]string{"NAMESRV_ADDR": s.nsAddr, "STRATAMQ_ACCESS_KEY": "alice", "STRATAMQ_SECRET_KEY": alicePw}
	admin := func(env map[string]string, args ...string) string {
		t.Helper()
		code, out, errOut := runAdminCmd(env, args...)
		if code != 0 {
			t.Fatalf("admin %v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	refused := func(env map[string]string, want string, args ...string) {
		t.Helper()
		code, _, errOut := runAdminCmd(env, args...)
		if code != 1 || !strings.Contains(errOut, "NO_PERMISSION") || !strings.Contains(errOut, want) {
			t.Fatalf("admin %v: exit %d: %s", args, code, errOut)
		}
	}

	admin(root, "createUser", "-u", "alice", "-p", alicePw)
	// Under ACL 2.0, as under ACL 1.0, the console's message browser needs a
	// signed-in user (with SUB on the topic): without one it shows no body.
	// No page shows a password.
	for _, path := range []string{"/messages?topic=payments&queue=0&offset=0", "/", "/topics", "/groups"} {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(page), rootPw) || strings.Contains(string(page), alicePw) {
			t.Fatalf("console %s shows a password", path)
		}
		if strings.HasPrefix(path, "/messages") && (resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(page), "sign in")) {
			t.Fatalf("console message browser under ACL 2.0: %d %.300q", resp.StatusCode, page)
		}
	}
	refused(map[string]string{"NAMESRV_ADDR": s.nsAddr}, "not signed", "createUser", "-u", "eve", "-p", "eve-pass-4711")
	refused(alice, "User:alice", "createUser", "-u", "eve", "-p", "eve-pass-4711", "-t", "Super")
	admin(root, "createAcl", "-s", "User:alice", "-r", "Topic:pay*", "-a", "Pub", "-d", "Allow")
	admin(root, "createAcl", "-s", "User:alice", "-r", "Topic:payroll*", "-a", "Pub", "-d", "Deny", "-i", "127.0.0.0/8")
	if out := admin(root, "getAcl", "-s", "User:alice"); !strings.Contains(out, "Topic:payroll*") || !strings.Contains(out, "Deny") || !strings.Contains(out, "127.0.0.0/8") {
		t.Fatalf("getAcl:\n%s", out)
	}
	if out := admin(root, "listAcl", "-r", "pay"); !strings.Contains(out, "User:alice") {
		t.Fatalf("listAcl:\n%s", out)
	}
	for _, args := range [][]string{{"getUser", "-u", "alice"}, {"listUser"}, {"listUser", "--json"}} {
		out := admin(root, args...)
		if !strings.Contains(out, "alice") || strings.Contains(out, alicePw) || strings.Contains(out, rootPw) {
			t.Fatalf("%v:\n%s", args, out)
		}
	}
	admin(root, "updateTopic", "-t", "payments", "-n", s.nsAddr)
	admin(root, "updateTopic", "-t", "payroll", "-n", s.nsAddr)
	waitFor(t, 10*time.Second, "routes", func() bool { return routeExists(s.nsAddr, "payments") && routeExists(s.nsAddr, "payroll") })

	p := newClientProducer(t, s.nsAddr, rmqproducer.WithCredentials(primitive.Credentials{AccessKey: "alice", SecretKey: alicePw}))
	send := func(topic string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte("m")))
		if err == nil && r.Status != primitive.SendOK {
			t.Fatalf("send to %s: %v", topic, r)
		}
		return err
	}
	if err := send("payments"); err != nil {
		t.Fatalf("alice's send to payments: %v", err)
	}
	err := send("payroll")
	if err == nil || !strings.HasPrefix(err.Error(), "CODE: 16, DESC: ") || !strings.Contains(err.Error(), "User:alice") ||
		!strings.Contains(err.Error(), "Topic:payroll") || strings.Contains(err.Error(), alicePw) {
		t.Fatalf("alice's send to payroll: %v", err)
	}
	admin(root, "deleteAcl", "-s", "User:alice", "-r", "Topic:payroll*")
	if err := send("payroll"); err != nil {
		t.Fatalf("after deleteAcl of the Deny: %v", err)
	}
	// The name server follows ACL 2.0 too: its route and KV writes need a
	// Super user's signature (the broker registered above signed as the
	// initial user); route reads stay open.
	kv := func(creds *acl.Credentials) *remoting.Command {
		req := remoting.NewRequest(remoting.PutKVConfig, map[string]string{"namespace": "ns", "key": "k", "value": "v"}, nil)
		if creds != nil {
			creds.Sign(req)
		}
		resp, _ := ask(s.nsAddr, req, 5*time.Second)
		if resp == nil {
			t.Fatal("PUT_KV_CONFIG: no answer")
		}
		return resp
	}
	for _, c := range []struct {
		creds *acl.Credentials
		want  string
	}{
		{nil, "sign it as a Super user"},
		{&acl.Credentials{AccessKey: "alice", SecretKey: alicePw}, "only a Super user"},
		{&acl.Credentials{AccessKey: "root", SecretKey: "not-the-password"}, "signature check failed for User:root"},
	} {
		if r := kv(c.creds); r.Code != int32(remoting.NoPermission) || !strings.Contains(r.Remark, c.want) || strings.Contains(r.Remark, alicePw) {
			t.Fatalf("PUT_KV_CONFIG on the name server signed by %v: code %d %q, want NO_PERMISSION naming %q", c.creds, r.Code, r.Remark, c.want)
		}
	}
	if r := kv(&acl.Credentials{AccessKey: "root", SecretKey: rootPw}); r.Code != int32(remoting.Success) {
		t.Fatalf("PUT_KV_CONFIG signed by the Super user root: code %d %q", r.Code, r.Remark)
	}

	// An ACL 1.0 file migrated (twice: the second run updates the users
	// it made): its account sends where its topicPerms allow, and is
	// refused where its defaultTopicPerm denies.
	yml := filepath.Join(t.TempDir(), "plain_acl.yml")
	if err := os.WriteFile(yml, []byte("accounts:\n  - accessKey: migProducer\n    secretKey: migSecret4711\n"+
		"    defaultTopicPerm: DENY\n    topicPerms:\n      - payments=PUB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if out := admin(root, "migrateAcl", "-f", yml); !strings.Contains(out, "1 users, 1 acls") {
			t.Fatalf("migrateAcl:\n%s", out)
		}
	}
	mp := newClientProducer(t, s.nsAddr, rmqproducer.WithCredentials(primitive.Credentials{AccessKey: "migProducer", SecretKey: "migSecret4711"}),
		rmqproducer.WithGroupName("migrated_producer"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := mp.SendSync(ctx, primitive.NewMessage("payments", []byte("m"))); err != nil || r.Status != primitive.SendOK {
		t.Fatalf("the migrated account's send to payments: %v %v", r, err)
	}
	if _, err := mp.SendSync(ctx, primitive.NewMessage("payroll", []byte("m"))); err == nil || !strings.Contains(err.Error(), "User:migProducer") {
		t.Fatalf("the migrated account's send to payroll (defaultTopicPerm DENY): %v", err)
	}
	admin(root, "updateUser", "-u", "alice", "-s", "disable")
	if err := send("payments"); err == nil || !strings.Contains(err.Error(), "disabled") {
		t.Fatalf("a disabled user's send: %v", err)
	}
}
