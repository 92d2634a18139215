package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/remoting"
)

// TestE2EPathLikeTopicNamesRefused (issue 9 item 5), on the real binary:
// 5,000 messages from the official client, then DELETE_TOPIC_IN_BROKER
// (215) and DELETE_TOPIC_IN_NAMESRV (216) with path-like topics. On
// 760f746 "../../../victim" deleted a directory next to the data dir, ".."
// the store and "" every consumequeue. Now each is an error response, the
// victim is intact, every message reads back, and again after a restart.
func TestE2EPathLikeTopicNamesRefused(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	root := t.TempDir()
	victim := filepath.Join(root, "victim")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "precious"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	br := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := map[string]string{
		"STRATAMQ_DATA_DIR":       filepath.Join(root, "data"), // consumequeue/../../../victim is root/victim
		"STRATAMQ_NAMESRV_LISTEN": ns,
		"STRATAMQ_LISTEN":         br,
		"STRATAMQ_HTTP_LISTEN":    "127.0.0.1:0",
	}
	srv := startCrashLoopBroker(t, bin, env, ns)

	topic := uniqueName(t, "T")
	p := newClientProducer(t, ns)
	const total, batch = 5000, 50
	for i := 0; i < total; i += batch {
		msgs := make([]*primitive.Message, 0, batch)
		for j := i; j < i+batch; j++ {
			msgs = append(msgs, primitive.NewMessage(topic, []byte(fmt.Sprintf("m-%05d", j))))
		}
		if _, err := p.SendSync(context.Background(), msgs...); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	_ = p.Shutdown()
	checkAll := func(when string) {
		t.Helper()
		recs := readAllQueues(t, br, ns, topic)
		seen := map[string]bool{}
		for _, r := range recs {
			seen[r.body] = true
		}
		for i := range total {
			if !seen[fmt.Sprintf("m-%05d", i)] {
				t.Fatalf("%s: message %d is gone (%d of %d read)", when, i, len(seen), total)
			}
		}
	}
	checkAll("before the deletes")

	bad := []string{"../../../victim", "..", "", "a/b", ".", "../store", "../../data", `..\..`}
	for _, name := range bad {
		h := remoting.DeleteTopicRequestHeader{Topic: name}
		for who, addr := range map[string]string{"broker (215)": br, "name server (216)": ns} {
			code := remoting.DeleteTopicInBroker
			if addr == ns {
				code = remoting.DeleteTopicInNamesrv
			}
			resp, _ := ask(addr, remoting.NewRequest(code, h.Encode(), nil), 5*time.Second)
			if resp == nil {
				t.Fatalf("%s delete %q: no answer", who, name)
			}
			if resp.Code != int32(remoting.SystemError) || resp.Remark == "" {
				t.Errorf("%s delete %q: code %d remark %q, want SYSTEM_ERROR with a remark", who, name, resp.Code, resp.Remark)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(victim, "precious")); err != nil || string(b) != "keep me" {
		t.Fatalf("the directory next to the data dir: %q, %v", b, err)
	}
	if !routeExists(ns, topic) {
		t.Fatal("the topic lost its route")
	}
	checkAll("after the deletes")

	srv.stopClean(t, 60*time.Second)
	if logs := srv.logs.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("errors logged:\n%s", tail(logs))
	}
	startCrashLoopBroker(t, bin, env, ns)
	waitFor(t, 30*time.Second, "the topic routed again", func() bool { return routeExists(ns, topic) })
	checkAll("after the restart")
}
