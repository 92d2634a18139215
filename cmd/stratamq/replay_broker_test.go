package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// TestReplayFromBroker (issue 13 item 2): `stratamq replay -n NAMESRV
// --topic T` against a running broker prints exactly the messages sent to
// T, each once with its queue, offset, msgId, tags, keys and body; --from
// and --to (a time between two batches) and --queue select exactly the
// right subset, as do the offset, tag and key filters; --to-topic
// republishes; the replay commits no offset; the choice of source is
// validated.
func TestReplayFromBroker(t *testing.T) {
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := startServe(t, t.TempDir(), map[string]string{"STRATAMQ_HTTP_LISTEN": httpAddr})
	topic, other := uniqueName(t, "ReplayB"), uniqueName(t, "OtherB")
	s.createTopic(topic, 4)
	s.createTopic(other, 2)
	p := newClientProducer(t, s.nsAddr)
	type sent struct {
		id, body, tag, key string
		queue              int
		offset             int64
		late               bool // sent after the mark
	}
	var want []sent
	send := func(i int, late bool) {
		t.Helper()
		m := primitive.NewMessage(topic, fmt.Appendf(nil, "broker replay body %d", i))
		tag := []string{"red", "blue"}[i%2]
		m.WithTag(tag)
		m.WithKeys([]string{fmt.Sprintf("k%d", i)})
		r, err := p.SendSync(context.Background(), m)
		if err != nil || r.Status != primitive.SendOK {
			t.Fatalf("send %d: %v %v", i, r, err)
		}
		want = append(want, sent{id: r.MsgID, body: string(m.Body), tag: tag, key: fmt.Sprintf("k%d", i), queue: r.MessageQueue.QueueId, offset: r.QueueOffset, late: late})
		if _, err := p.SendSync(context.Background(), primitive.NewMessage(other, []byte("not this topic"))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 24 {
		send(i, false)
	}
	// The mark: every early message was stored (acknowledged) before it,
	// every late one is stored after it (the broker's clock is this one).
	mark := time.Now().UnixMilli() + 1
	waitFor(t, 5*time.Second, "a millisecond past the mark", func() bool { return time.Now().UnixMilli() > mark })
	for i := 24; i < 40; i++ {
		send(i, true)
	}

	replayCmd := func(environ map[string]string, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"replay"}, args...), environ, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	// read replays with args and returns the messages printed, by msgId.
	read := func(args ...string) map[string]replayMessage {
		t.Helper()
		code, out, errOut := replayCmd(map[string]string{}, append([]string{"-n", s.nsAddr, "--topic", topic}, args...)...)
		if code != 0 {
			t.Fatalf("replay %v: exit %d: %s", args, code, errOut)
		}
		got := map[string]replayMessage{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var m replayMessage
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			if _, dup := got[m.MsgID]; dup {
				t.Fatalf("replay %v printed %s twice", args, m.MsgID)
			}
			got[m.MsgID] = m
		}
		return got
	}
	// expect checks that replay with args printed exactly the sent
	// messages sel picks, each as sent.
	expect := func(sel func(w sent) bool, args ...string) {
		t.Helper()
		got := read(args...)
		n := 0
		for _, w := range want {
			if !sel(w) {
				continue
			}
			n++
			m, ok := got[w.id]
			body, _ := base64.StdEncoding.DecodeString(m.Body)
			if !ok || m.Topic != topic || string(body) != w.body || m.Tags != w.tag || m.Keys != w.key ||
				int(m.QueueID) != w.queue || m.QueueOffset != w.offset || m.StoreTimestamp == 0 || m.OffsetMsgID == "" {
				t.Fatalf("replay %v: message %s: got %+v (%v, body %q), want %+v", args, w.id, m, ok, body, w)
			}
			if (m.StoreTimestamp >= mark) != w.late {
				t.Fatalf("message %s stored at %d, mark %d, late %v", w.id, m.StoreTimestamp, mark, w.late)
			}
		}
		if len(got) != n {
			t.Fatalf("replay %v printed %d messages, want %d", args, len(got), n)
		}
	}
	all := func(sent) bool { return true }
	expect(all)
	code, _, errOut := replayCmd(map[string]string{}, "-n", s.nsAddr, "--topic", topic)
	if code != 0 || !strings.Contains(errOut, fmt.Sprintf("%d messages of %s from 4 queues", len(want), topic)) {
		t.Fatalf("summary: exit %d: %s", code, errOut)
	}
	markS := strconv.FormatInt(mark, 10)
	expect(func(w sent) bool { return w.late }, "--from", markS)
	expect(func(w sent) bool { return !w.late }, "--to", markS)
	expect(func(w sent) bool { return !w.late }, "--to", time.UnixMilli(mark).UTC().Format(time.RFC3339Nano))
	expect(func(w sent) bool { return w.queue == 1 }, "--queue", "1")
	expect(func(w sent) bool { return w.queue == 2 && w.late }, "--queue", "2", "--from", markS)
	expect(func(w sent) bool { return w.offset >= 2 && w.offset < 4 }, "--from-offset", "2", "--to-offset", "4")
	expect(func(w sent) bool { return w.tag == "red" }, "--tag", "red")
	expect(func(w sent) bool { return w.key == "k7" }, "--key", "k7")
	if got := read("--limit", "5"); len(got) != 5 {
		t.Fatalf("--limit 5: %d messages", len(got))
	}
	code, out, errOut := replayCmd(map[string]string{}, "-n", s.nsAddr, "--topic", topic, "--format", "raw", "--key", "k31")
	if code != 0 || out != "broker replay body 31\n" {
		t.Fatalf("--format raw --key k31: exit %d, %q: %s", code, out, errOut)
	}
	// An explicit -n wins over STRATAMQ_BUCKET from the environment.
	code, out, errOut = replayCmd(map[string]string{"STRATAMQ_BUCKET": "file://" + filepath.Join(t.TempDir(), "none")},
		"-n", s.nsAddr, "--topic", topic, "--key", "k3", "--body", "text")
	if code != 0 || !strings.Contains(out, `"body":"broker replay body 3"`) {
		t.Fatalf("-n with STRATAMQ_BUCKET set: exit %d, %q: %s", code, out, errOut)
	}

	// No side effect on consumer groups: the broker holds no offset of the
	// replay's group (no lag series), and answers for it as for a group
	// never seen.
	for q := range 4 {
		series := fmt.Sprintf(`rocketmq_consumer_lag_messages{consumer_group="%s",queue_id="%d",topic="%s"}`, replayGroup, q, topic)
		if v, err := scrapeMetric(httpAddr, series); err == nil {
			t.Fatalf("%s = %v: the replay committed an offset", series, v)
		}
		query := func(group string) string {
			h := remoting.QueryConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: int32(q)}
			resp, _ := ask(s.brokAddr, remoting.NewRequest(remoting.QueryConsumerOffset, h.Encode(), nil), 5*time.Second)
			if resp == nil {
				t.Fatalf("QUERY_CONSUMER_OFFSET of %s: no answer", group)
			}
			return fmt.Sprint(resp.Code, resp.ExtFields)
		}
		if a, b := query(replayGroup), query(uniqueName(t, "never")); a != b {
			t.Fatalf("queue %d: the replay's group's offset %s, a new group's %s", q, a, b)
		}
	}

	// Republish the late red ones to another topic on the same cluster.
	copyTopic := uniqueName(t, "CopyB")
	s.createTopic(copyTopic, 2)
	if code, _, errOut := replayCmd(map[string]string{}, "-n", s.nsAddr, "--topic", topic, "--tag", "red", "--from", markS, "--to-topic", copyTopic); code != 0 {
		t.Fatalf("republish: exit %d: %s", code, errOut)
	}
	origins := map[string]bool{}
	for q := range 2 {
		h := remoting.PullMessageRequestHeader{ConsumerGroup: "check", Topic: copyTopic, QueueID: int32(q), QueueOffset: 0,
			MaxMsgNums: 64, SysFlag: remoting.PullFlagSubscription, Subscription: "*", ExpressionType: "TAG"}
		resp, ok := ask(s.brokAddr, remoting.NewRequest(remoting.PullMessage, h.Encode(), nil), 5*time.Second)
		if !ok {
			continue // an empty queue answers PULL_NOT_FOUND
		}
		for b := resp.Body; len(b) > 0; {
			r, n, err := store.DecodeRecord(b)
			if err != nil {
				t.Fatal(err)
			}
			b = b[n:]
			origins[replayProps(r.Properties)["ORIGIN_MSG_ID"]] = true
		}
	}
	nRed := 0
	for _, w := range want {
		if w.tag == "red" && w.late {
			nRed++
			if !origins[w.id] {
				t.Fatalf("late red message %s not republished", w.id)
			}
		}
	}
	if len(origins) != nRed {
		t.Fatalf("%d messages republished, want the %d late red ones", len(origins), nRed)
	}

	// The source is validated before anything is read.
	for _, c := range []struct {
		environ map[string]string
		args    []string
		want    string
	}{
		{map[string]string{}, []string{"--topic", topic}, "where to read from"},
		{map[string]string{}, []string{"--bucket", "file:///nowhere", "-n", s.nsAddr, "--topic", topic}, "--bucket and -n both"},
		{map[string]string{}, []string{"-n", s.nsAddr, "--topic", topic, "--to-topic", topic}, "into itself"},
		{map[string]string{}, []string{"-n", s.nsAddr, "--topic", topic, "--to-namesrv", s.nsAddr}, "--to-namesrv goes with --to-topic"},
	} {
		if code, _, errOut := replayCmd(c.environ, c.args...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Fatalf("replay %v: exit %d: %s, want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	if code, _, errOut := replayCmd(map[string]string{}, "-n", s.nsAddr, "--topic", topic, "--queue", "9"); code != 1 || !strings.Contains(errOut, "no such queue") {
		t.Fatalf("--queue 9: exit %d: %s", code, errOut)
	}
}

// TestReplayFromBrokerCold: `replay -n` reads through the broker the
// messages that are only in the bucket (1 MiB segments, local retention
// 0, the first segments uploaded and dropped) as well as the local tail:
// exactly the messages sent, bodies intact.
func TestReplayFromBrokerCold(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(t.TempDir(), "bucket")
	s := startServe(t, dir, map[string]string{"STRATAMQ_BUCKET": bucket, "STRATAMQ_SEGMENT_SIZE": "1MiB", "STRATAMQ_LOCAL_RETENTION": "0"})
	topic := uniqueName(t, "ReplayCold")
	s.createTopic(topic, 2)
	p := newClientProducer(t, s.nsAddr)
	want := map[string]string{} // msgId → body (base64)
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 300 // ≈ 2.4 MiB: a few sealed segments
	for i := range n {
		// 8 KiB of noise: the client compresses it (past 4 KiB) and it
		// stays 8 KiB in the log; replay prints it inflated.
		body := make([]byte, 8<<10)
		for j := range body {
			body[j] = byte(rng.UintN(256))
		}
		r, err := p.SendSync(context.Background(), primitive.NewMessage(topic, body))
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		want[r.MsgID] = base64.StdEncoding.EncodeToString(body)
	}
	waitFor(t, time.Minute, "the first segment uploaded and dropped locally", func() bool {
		_, err := os.Stat(filepath.Join(dir, "store", "commitlog", "00000000000000000000"))
		return os.IsNotExist(err)
	})
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"replay", "-n", s.nsAddr, "--topic", topic}, map[string]string{}, &out, &errOut); code != 0 {
		t.Fatalf("replay: exit %d: %s", code, errOut.String())
	}
	got := 0
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m replayMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %.100q: %v", line, err)
		}
		body, ok := want[m.MsgID]
		if !ok || m.Body != body {
			t.Fatalf("message %s (queue %d offset %d): unknown or body differs (%d bytes, want %d)", m.MsgID, m.QueueID, m.QueueOffset, len(m.Body), len(body))
		}
		delete(want, m.MsgID)
		got++
	}
	if got != n || len(want) != 0 {
		t.Fatalf("replay printed %d messages, %d of the %d sent missing", got, len(want), n)
	}
}
