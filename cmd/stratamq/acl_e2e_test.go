package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/remoting"
)

// Secrets of TestE2EACLSecretsNeverLeak: strings that appear nowhere else,
// so finding one anywhere is a leak.
const (
	e2eAdminSecret = "ADMINSECRET-e2e-q8Z3w"
	e2eUserSecret  = "USERSECRET-e2e-m4K7p"
	e2eWrongSecret = "WRONGSECRET-e2e-x1V9d"
)

var e2eACLFile = `
accounts:
  - accessKey: e2e-admin
    secretKey: ` + e2eAdminSecret + `
    admin: true
  - accessKey: e2e-user
    secretKey: ` + e2eUserSecret + `
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
`

// TestE2EACLSecretsNeverLeak (issue 14 items 1, 2, 4, 5): `stratamq serve`
// with STRATAMQ_ACL_FILE. The broker registers itself signed; the admin
// CLI creates topics with the admin account (flags or environment) and is
// refused without it; the official client with credentials produces and
// consumes; replay republishes signed and is refused with a wrong secret.
// Afterwards none of the secrets is in the logs, the tools' output,
// /metrics, the console's pages, the remarks of refusals, or any file
// under the data dir and the bucket dir.
func TestE2EACLSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	aclDir := t.TempDir() // the ACL file itself holds the secrets: outside the dirs grepped
	aclFile := filepath.Join(aclDir, "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(e2eACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir, bucketDir := filepath.Join(dir, "data"), filepath.Join(dir, "bucket")
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := startServe(t, dataDir, map[string]string{
		"STRATAMQ_ACL_FILE":    aclFile,
		"STRATAMQ_BUCKET":      "file://" + bucketDir,
		"STRATAMQ_LOG_LEVEL":   "debug",
		"STRATAMQ_HTTP_LISTEN": httpAddr,
	})
	var seen bytes.Buffer // everything the tools and the servers said
	var seenMu sync.Mutex
	note := func(s ...string) {
		seenMu.Lock()
		defer seenMu.Unlock()
		for _, x := range s {
			seen.WriteString(x + "\n")
		}
	}
	admin := func(environ map[string]string, args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"admin"}, args...), environ, &out, &errOut)
		note(out.String(), errOut.String())
		return code, out.String() + errOut.String()
	}
	topic, target := uniqueName(t, "Acl"), uniqueName(t, "AclTarget")

	// Admin CLI: the admin account by flags, then by environment.
	if code, out := admin(nil, "updateTopic", "-t", topic, "-r", "2", "-w", "2", "-n", s.nsAddr,
		"--access-key", "e2e-admin", "--secret-key", e2eAdminSecret); code != 0 {
		t.Fatalf("updateTopic as admin: exit %d: %s", code, out)
	}
	adminEnv := map[string]string{"STRATAMQ_ACCESS_KEY": "e2e-admin", "STRATAMQ_SECRET_KEY": e2eAdminSecret}
	if code, out := admin(adminEnv, "updateTopic", "-t", target, "-r", "2", "-w", "2", "-n", s.nsAddr); code != 0 {
		t.Fatalf("updateTopic as admin (environment): exit %d: %s", code, out)
	}
	for _, c := range []struct {
		name    string
		environ map[string]string
		want    string
	}{
		{"unsigned", nil, "not signed"},
		{"not admin", map[string]string{"STRATAMQ_ACCESS_KEY": "e2e-user", "STRATAMQ_SECRET_KEY": e2eUserSecret}, "needs an admin account"},
		{"wrong secret", map[string]string{"STRATAMQ_ACCESS_KEY": "e2e-admin", "STRATAMQ_SECRET_KEY": e2eWrongSecret}, "signature check failed"},
	} {
		code, out := admin(c.environ, "updateTopic", "-t", uniqueName(t, "Nope"), "-n", s.nsAddr)
		if code != 1 || !strings.Contains(out, "NO_PERMISSION") || !strings.Contains(out, c.want) {
			t.Fatalf("updateTopic %s: exit %d: %s", c.name, code, out)
		}
	}
	if code, out := admin(nil, "updateTopic", "-t", "x", "-n", s.nsAddr, "--access-key", "e2e-admin"); code != 2 || !strings.Contains(out, "go together") {
		t.Fatalf("half a credential pair: exit %d: %s", code, out)
	}
	waitFor(t, 10*time.Second, "routes", func() bool { return routeExists(s.nsAddr, topic) && routeExists(s.nsAddr, target) })

	// The official client with credentials produces and consumes.
	user := primitive.Credentials{AccessKey: "e2e-user", SecretKey: e2eUserSecret}
	p := newClientProducer(t, s.nsAddr, rmqproducer.WithCredentials(user))
	for i := range 20 {
		if r, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(fmt.Sprintf("acl body %d", i)))); err != nil || r.Status != primitive.SendOK {
			t.Fatalf("send %d: %v %v", i, r, err)
		}
	}
	wrong := newClientProducer(t, s.nsAddr, rmqproducer.WithCredentials(primitive.Credentials{AccessKey: "e2e-user", SecretKey: e2eWrongSecret}))
	_, err := wrong.SendSync(context.Background(), primitive.NewMessage(topic, []byte("refused")))
	if err == nil || !strings.HasPrefix(err.Error(), "CODE: 16, DESC: ") {
		t.Fatalf("send with a wrong secret: %v", err)
	}
	note(err.Error())
	group := uniqueName(t, "AclGroup")
	var mu sync.Mutex
	got := map[string]bool{}
	c, err := consumer.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{s.nsAddr})),
		consumer.WithGroupName(group), consumer.WithCredentials(user), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithInstance(uniqueName(t, "ci")), noSpanFlowControl)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		for _, m := range msgs {
			got[string(m.Body)] = true
		}
		mu.Unlock()
		return consumer.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "20 messages consumed", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 20 })
	// Offset commits (the client's, signed): queried signed, as the
	// broker answers nothing unsigned.
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	ours := acl.Credentials{AccessKey: "e2e-user", SecretKey: e2eUserSecret}
	waitFor(t, 30*time.Second, "the consumer's commits to add up to 20", func() bool {
		var sum int64
		for q := range 2 {
			h := remoting.QueryConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: int32(q)}
			req := remoting.NewRequest(remoting.QueryConsumerOffset, h.Encode(), nil)
			ours.Sign(req)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := cl.Invoke(ctx, s.brokAddr, req)
			cancel()
			if err == nil && resp.Code == 0 {
				n, _ := strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
				sum += n
			}
		}
		return sum == 20
	})
	_ = c.Shutdown()

	// Remarks of refused raw requests.
	for _, cred := range []acl.Credentials{{}, {AccessKey: "e2e-user", SecretKey: e2eWrongSecret}, {AccessKey: "e2e-user", SecretKey: e2eUserSecret}} {
		req := remoting.NewRequest(remoting.DeleteTopicInBroker, map[string]string{"topic": topic}, nil)
		cred.Sign(req)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cl.Invoke(ctx, s.brokAddr, req)
		cancel()
		if err != nil || resp.Code != int32(remoting.NoPermission) {
			t.Fatalf("DELETE_TOPIC_IN_BROKER as %q: %v %v", cred.AccessKey, resp, err)
		}
		note(resp.Remark)
	}

	// /metrics after the refusals.
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	note(string(metrics))
	// With an ACL the console's message browser needs a signed-in user
	// (with SUB on the topic): without one it shows no body.
	resp, err = http.Get("http://" + httpAddr + "/messages?topic=" + url.QueryEscape(topic) + "&queue=0&offset=0")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(page), "sign in") {
		t.Fatalf("console message browser with an ACL: %d %.200q", resp.StatusCode, page)
	}
	note(string(page))
	// The console's other pages are grepped too (item 5: not in the console).
	for _, path := range []string{"/", "/topics", "/groups", "/tier"} {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("console %s: %d", path, resp.StatusCode)
		}
		note(string(page))
	}

	// Replay republishes from the bucket, signed.
	s.stop() // graceful: seals and uploads everything
	s.start()
	replay := func(environ map[string]string, args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"replay", "--bucket", "file://" + bucketDir, "--topic", topic,
			"--to-topic", target, "-n", s.nsAddr}, args...), environ, &out, &errOut)
		note(out.String(), errOut.String())
		return code, out.String() + errOut.String()
	}
	if code, out := replay(nil, "--access-key", "e2e-user", "--secret-key", e2eWrongSecret); code != 1 || !strings.Contains(out, "NO_PERMISSION") {
		t.Fatalf("replay with a wrong secret: exit %d: %s", code, out)
	}
	if code, out := replay(map[string]string{"STRATAMQ_ACCESS_KEY": "e2e-user", "STRATAMQ_SECRET_KEY": e2eUserSecret}); code != 0 {
		t.Fatalf("replay signed: exit %d: %s", code, out)
	}
	if code, out := admin(adminEnv, "topicStatus", "-t", target, "-n", s.nsAddr); code != 0 {
		t.Fatalf("topicStatus: exit %d: %s", code, out)
	}
	s.stop()
	note(s.logs.String())

	// The grep.
	secrets := []string{e2eAdminSecret, e2eUserSecret, e2eWrongSecret}
	seenMu.Lock()
	text := seen.String()
	seenMu.Unlock()
	if !strings.Contains(text, "e2e-user") || !strings.Contains(text, "rocketmq_") {
		t.Fatalf("the capture is missing what it should hold (access keys in remarks, metrics):\n%.2000s", text)
	}
	for _, sec := range secrets {
		if i := strings.Index(text, sec); i >= 0 {
			t.Fatalf("secret %q in logs, output, remarks or metrics: ...%s...", sec, text[max(0, i-200):min(len(text), i+200)])
		}
	}
	files := 0
	for _, root := range []string{dataDir, bucketDir} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files++
			for _, sec := range secrets {
				if bytes.Contains(b, []byte(sec)) {
					t.Errorf("secret %q in %s", sec, path)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 5 {
		t.Fatalf("only %d files under the data and bucket dirs: the grep proves little", files)
	}
}

// TestBenchWithACL: stratamq bench signs with --access-key/--secret-key
// (single sends through the typed-header signer, batches, pulls and the
// admin topic creation), and an unsigned run is refused NO_PERMISSION.
func TestBenchWithACL(t *testing.T) {
	aclFile := filepath.Join(t.TempDir(), "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(e2eACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, t.TempDir(), map[string]string{"STRATAMQ_ACL_FILE": aclFile})
	topic := uniqueName(t, "benchacl")
	common := []string{"--namesrv", s.nsAddr, "--topic", topic, "--size", "200", "--progress", "0",
		"--access-key", "e2e-admin", "--secret-key", e2eAdminSecret}
	r := runBenchCmd(t, 0, append([]string{"produce", "--messages", "500", "--conns", "2", "--inflight", "4"}, common...)...)
	if r.Messages != 500 || r.Errors != 0 {
		t.Fatalf("signed produce: %+v", r)
	}
	r = runBenchCmd(t, 0, append([]string{"produce", "--messages", "70", "--batch", "7"}, common...)...)
	if r.Messages != 70 || r.Errors != 0 {
		t.Fatalf("signed batch produce: %+v", r)
	}
	r = runBenchCmd(t, 0, append([]string{"consume", "--pull-batch", "64"}, common...)...)
	if r.Messages != 570 || r.Errors != 0 {
		t.Fatalf("signed consume: %+v", r)
	}
	r = runBenchCmd(t, 1, "produce", "--messages", "20", "--namesrv", s.nsAddr, "--topic", topic, "--progress", "0", "--max-errors", "5")
	if r.Errors == 0 || r.ErrorCodes["NO_PERMISSION"] == 0 {
		t.Fatalf("unsigned produce: %+v", r)
	}
}
