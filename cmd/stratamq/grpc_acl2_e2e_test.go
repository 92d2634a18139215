package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/proxy/nodetest"
)

// TestGRPCNodeUsersACL2: with ACL 2.0 on, the official Node.js 5.x
// Producer and SimpleConsumer signed as a user made with `stratamq admin
// createUser` send and consume where its policy allows; the producer is
// refused on a topic a Deny covers and with a wrong password, the
// consumer in a group no entry allows; each refusal names the user and
// never its password.
func TestGRPCNodeUsersACL2(t *testing.T) {
	t.Parallel()
	nodetest.Need(t)
	const rootPw, userPw = "root-pass-4711", "node-pass-4711"
	s, addr := startServeGRPC(t, map[string]string{
		"STRATAMQ_AUTHENTICATION_ENABLED":   "true",
		"STRATAMQ_AUTHORIZATION_ENABLED":    "true",
		"STRATAMQ_INIT_AUTHENTICATION_USER": `{"username":"root","password":"` + rootPw + `"}`,
	})
	root := map[string]string{"NAMESRV_ADDR": s.nsAddr, "STRATAMQ_ACCESS_KEY": "root", "STRATAMQ_SECRET_KEY": rootPw}
	admin := func(args ...string) {
		t.Helper()
		if code, out, errOut := runAdminCmd(root, args...); code != 0 {
			t.Fatalf("admin %v: exit %d: %s%s", args, code, out, errOut)
		}
	}
	ok, denied := uniqueName(t, "OK"), uniqueName(t, "NO")
	admin("updateTopic", "-t", ok, "-r", "2", "-w", "2")
	admin("updateTopic", "-t", denied, "-r", "2", "-w", "2")
	admin("createUser", "-u", "nodeu", "-p", userPw)
	admin("createAcl", "-s", "User:nodeu", "-r", "Topic:"+ok+",Topic:"+denied, "-a", "Pub,Sub", "-d", "Allow")
	admin("createAcl", "-s", "User:nodeu", "-r", "Topic:"+denied, "-a", "Pub", "-d", "Deny")
	admin("createAcl", "-s", "User:nodeu", "-r", "Group:nodeG", "-a", "Sub", "-d", "Allow")
	waitFor(t, 20*time.Second, "routes", func() bool { return routeExists(s.nsAddr, ok) && routeExists(s.nsAddr, denied) })

	produce := func(topic, pw string) (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, _ := nodetest.Command(ctx, t, "producer.js", map[string]any{"endpoints": addr, "topic": topic, "timeoutMs": 20000,
			"accessKey": "nodeu", "secretKey": pw, "messages": []map[string]any{{"kind": "normal", "body": "acl2 " + topic}}}).CombinedOutput()
		return string(out), strings.Contains(string(out), `"event":"sent"`)
	}
	if out, sent := produce(ok, userPw); !sent {
		t.Fatalf("nodeu's send to %s (allowed):\n%s", ok, out)
	}
	for _, c := range []struct{ topic, pw, why string }{{denied, userPw, "a Deny on Pub"}, {ok, "wrong-pass-4711", "a wrong password"}} {
		out, sent := produce(c.topic, c.pw)
		if sent || !strings.Contains(out, "nodeu") || strings.Contains(out, c.pw) {
			t.Fatalf("nodeu's send to %s with %s: sent %v, or the refusal does not name the user or shows the password:\n%s", c.topic, c.why, sent, out)
		}
	}
	consume := func(group string) (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, _ := nodetest.Command(ctx, t, "simple_consumer.js", map[string]any{"endpoints": addr, "group": group, "topic": ok,
			"mode": "drain", "expect": 1, "timeoutMs": 30000, "accessKey": "nodeu", "secretKey": userPw}).CombinedOutput()
		return string(out), strings.Contains(string(out), `"event":"received"`)
	}
	if out, got := consume("nodeG"); !got {
		t.Fatalf("nodeu's consumer in nodeG (allowed):\n%s", out)
	}
	if out, got := consume("otherG"); got || !strings.Contains(out, "nodeu") {
		t.Fatalf("nodeu's consumer in otherG (no entry allows it): received %v, or the refusal does not name the user:\n%s", got, out)
	}
}
