package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// TestReplayCommandFromBucket (issue 13 item 2): after a graceful stop,
// `stratamq replay --bucket URL --topic T --format jsonl` prints exactly the
// messages sent to T, no other topic's, each once with its queue offset,
// msgId, tags, keys and body; the filters (--queue, --tag, --key,
// --from-offset) and --format raw select and print as asked; usage errors
// exit 2.
func TestReplayCommandFromBucket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(dir, "bucket")
	s := startServe(t, filepath.Join(dir, "data"), map[string]string{"STRATAMQ_BUCKET": bucket})
	topic, other := uniqueName(t, "Replay"), uniqueName(t, "Other")
	s.createTopic(topic, 4)
	s.createTopic(other, 2)
	p := newClientProducer(t, s.nsAddr)
	type sent struct {
		id, body, tag, key string
		queue              int
		offset             int64
	}
	var want []sent
	for i := range 60 {
		m := primitive.NewMessage(topic, []byte(fmt.Sprintf("replay body %d", i)))
		tag := []string{"red", "blue"}[i%2]
		m.WithTag(tag)
		m.WithKeys([]string{fmt.Sprintf("k%d", i)})
		r, err := p.SendSync(context.Background(), m)
		if err != nil || r.Status != primitive.SendOK {
			t.Fatalf("send %d: %v %v", i, r, err)
		}
		want = append(want, sent{id: r.MsgID, body: string(m.Body), tag: tag, key: fmt.Sprintf("k%d", i), queue: r.MessageQueue.QueueId, offset: r.QueueOffset})
		if _, err := p.SendSync(context.Background(), primitive.NewMessage(other, []byte("not this topic"))); err != nil {
			t.Fatal(err)
		}
	}
	s.stop() // graceful: seals and uploads everything

	replayCmd := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"replay", "--bucket", bucket}, args...), map[string]string{}, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := replayCmd("--topic", topic, "--format", "jsonl")
	if code != 0 {
		t.Fatalf("replay: exit %d: %s", code, errOut)
	}
	got := map[string]replayMessage{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m replayMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if _, dup := got[m.MsgID]; dup {
			t.Fatalf("message %s printed twice", m.MsgID)
		}
		got[m.MsgID] = m
	}
	if len(got) != len(want) {
		t.Fatalf("replay printed %d messages, want %d", len(got), len(want))
	}
	for _, w := range want {
		m, ok := got[w.id]
		body, _ := base64.StdEncoding.DecodeString(m.Body)
		if !ok || m.Topic != topic || string(body) != w.body || m.Tags != w.tag || m.Keys != w.key ||
			int(m.QueueID) != w.queue || m.QueueOffset != w.offset || m.StoreTimestamp == 0 || m.OffsetMsgID == "" {
			t.Fatalf("message %s: got %+v (body %q), want %+v", w.id, m, body, w)
		}
	}
	if !strings.Contains(errOut, fmt.Sprintf("%d messages of %s", len(want), topic)) {
		t.Fatalf("no summary: %s", errOut)
	}

	// Filters and raw bodies.
	count := func(args ...string) int {
		t.Helper()
		code, out, errOut := replayCmd(append([]string{"--topic", topic}, args...)...)
		if code != 0 {
			t.Fatalf("replay %v: exit %d: %s", args, code, errOut)
		}
		if strings.TrimSpace(out) == "" {
			return 0
		}
		return len(strings.Split(strings.TrimSpace(out), "\n"))
	}
	byQueue, byTag, late := 0, 0, 0
	for _, w := range want {
		if w.queue == 1 {
			byQueue++
		}
		if w.tag == "red" {
			byTag++
		}
		if w.offset >= 5 {
			late++
		}
	}
	if n := count("--queue", "1"); n != byQueue {
		t.Fatalf("--queue 1: %d messages, want %d", n, byQueue)
	}
	if n := count("--tag", "red"); n != byTag {
		t.Fatalf("--tag red: %d messages, want %d", n, byTag)
	}
	if n := count("--key", "k7"); n != 1 {
		t.Fatalf("--key k7: %d messages, want 1", n)
	}
	if n := count("--from-offset", "5"); n != late {
		t.Fatalf("--from-offset 5: %d messages, want %d", n, late)
	}
	if n := count("--limit", "3"); n != 3 {
		t.Fatalf("--limit 3: %d messages", n)
	}
	code, out, _ = replayCmd("--topic", topic, "--format", "raw", "--key", "k42")
	if code != 0 || out != "replay body 42\n" {
		t.Fatalf("--format raw --key k42: exit %d, %q", code, out)
	}
	code, out, _ = replayCmd("--topic", topic, "--body", "text", "--key", "k3")
	if code != 0 || !strings.Contains(out, `"body":"replay body 3"`) {
		t.Fatalf("--body text: exit %d, %q", code, out)
	}

	// Republish the red ones to another topic on a running broker, paced.
	s.start()
	copyTopic := uniqueName(t, "Copy")
	s.createTopic(copyTopic, 2)
	if code, _, errOut := replayCmd("--topic", topic, "--tag", "red", "--to-topic", copyTopic, "-n", s.nsAddr, "--rate", "500"); code != 0 {
		t.Fatalf("republish: exit %d: %s", code, errOut)
	}
	origins := map[string]bool{}
	for q := range 2 {
		h := remoting.PullMessageRequestHeader{ConsumerGroup: "check", Topic: copyTopic, QueueID: int32(q), QueueOffset: 0,
			MaxMsgNums: 64, SysFlag: remoting.PullFlagSubscription, Subscription: "*", ExpressionType: "TAG"}
		resp, ok := ask(s.brokAddr, remoting.NewRequest(remoting.PullMessage, h.Encode(), nil), 5*time.Second)
		if !ok {
			t.Fatalf("pull %s/%d", copyTopic, q)
		}
		for b := resp.Body; len(b) > 0; {
			r, n, err := store.DecodeRecord(b)
			if err != nil {
				t.Fatal(err)
			}
			b = b[n:]
			p := replayProps(r.Properties)
			if p["TAGS"] != "red" || p["REPLAY_FROM_TOPIC"] != topic || !strings.HasPrefix(string(r.Body), "replay body ") {
				t.Fatalf("republished %q with %v", r.Body, p)
			}
			origins[p["ORIGIN_MSG_ID"]] = true
		}
	}
	if len(origins) != byTag {
		t.Fatalf("%d distinct messages republished, want the %d red ones", len(origins), byTag)
	}
	for _, w := range want {
		if w.tag == "red" && !origins[w.id] {
			t.Fatalf("red message %s not republished", w.id)
		}
	}
	if code, _, errOut := replayCmd("--topic", topic, "--to-topic", copyTopic); code != 2 || !strings.Contains(errOut, "--namesrv") {
		t.Fatalf("--to-topic without a name server: exit %d: %s", code, errOut)
	}

	// Usage errors.
	if code, _, _ := replayCmd(); code != 2 {
		t.Fatalf("no --topic: exit %d, want 2", code)
	}
	if code, _, _ := replayCmd("--topic", topic, "--format", "xml"); code != 2 {
		t.Fatalf("--format xml: exit %d, want 2", code)
	}
	if code, _, errOut := replayCmd("--topic", topic, "--broker-name", "nobody"); code != 1 || !strings.Contains(errOut, "no commitlog segment") {
		t.Fatalf("unknown broker name: exit %d: %s", code, errOut)
	}
}
