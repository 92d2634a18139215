package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"

	"github.com/stratamq/stratamq/proxy/nodetest"
)

// The gRPC endpoint (package proxy) against the official RocketMQ 5
// Node.js client (npm rocketmq-client-nodejs, installed in proxy/nodetest
// by .ci/run with its lockfile), and messages sent through it read by
// the official Go remoting client.

// nodeEvent is one JSON line a Node script prints.
type nodeEvent struct {
	Event         string `json:"event"`
	I             int    `json:"i"`
	MessageID     string `json:"messageId"`
	Offset        int64  `json:"offset"`
	TransactionID string `json:"transactionId"`
	RecallHandle  string `json:"recallHandle"`
	Body          string `json:"body"`
	Resolution    string `json:"resolution"`
	Op            string `json:"op"`
	Message       string `json:"message"`
}

// runNode runs a Node script of proxy/nodetest with plan and returns its
// events; it fails the test when the script fails or never prints "done".
func runNode(t *testing.T, script string, plan any, timeout time.Duration) []nodeEvent {
	t.Helper()
	return nodetest.Run[nodeEvent](t, script, plan, timeout, false)
}

// startServeGRPC is startServe with the gRPC endpoint on a free loopback
// port; it returns the serve and the endpoint's address.
func startServeGRPC(t *testing.T, extra map[string]string) (*testServe, string) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := map[string]string{"STRATAMQ_GRPC_LISTEN": addr}
	maps.Copy(env, extra)
	return startServe(t, t.TempDir(), env), addr
}

// TestGRPCNodeProducerToGoConsumer: the official Node.js 5.x Producer sends
// normal, FIFO, delayed and transactional messages (commit, rollback, and
// one left open that the broker checks back through Telemetry and the
// producer's checker commits); the official Go remoting client consumes
// exactly the committed ones, byte-identical: body, tag, keys, user
// properties and message id. FIFO messages of one group are stored in one
// queue in send order; the delayed one is stored for delivery no earlier
// than its delivery time.
func TestGRPCNodeProducerToGoConsumer(t *testing.T) {
	t.Parallel()
	nodetest.Need(t)
	s, addr := startServeGRPC(t, map[string]string{
		"STRATAMQ_TRANSACTION_TIMEOUT":        "1s",
		"STRATAMQ_TRANSACTION_CHECK_INTERVAL": "300ms",
	})
	topic := uniqueName(t, "G")
	s.createTopic(topic, 4)
	binBody := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0x01, 0x02, 'x'}
	type plannedMsg struct {
		Kind    string            `json:"kind"`
		Body    string            `json:"body,omitempty"`
		BodyB64 string            `json:"bodyB64,omitempty"`
		Tag     string            `json:"tag,omitempty"`
		Keys    []string          `json:"keys,omitempty"`
		Props   map[string]string `json:"props,omitempty"`
		Group   string            `json:"group,omitempty"`
		DelayMs int               `json:"delayMs,omitempty"`
	}
	msgs := []plannedMsg{
		{Kind: "normal", Body: "plain ascii", Tag: "TagA", Keys: []string{"k1", "k2"}, Props: map[string]string{"color": "red", "n": "1"}},
		{Kind: "normal", Body: "ünïcødé ✓", Tag: "TagB", Keys: []string{"only"}, Props: map[string]string{"empty": ""}},
		{Kind: "normal", BodyB64: base64.StdEncoding.EncodeToString(binBody), Tag: "TagC"},
	}
	for i := range 4 {
		for _, g := range []string{"g1", "g2"} {
			msgs = append(msgs, plannedMsg{Kind: "fifo", Body: fmt.Sprintf("fifo-%s-%d", g, i), Group: g, Tag: "F"})
		}
	}
	msgs = append(msgs,
		plannedMsg{Kind: "delay", Body: "delayed", Tag: "D", DelayMs: 2000},
		plannedMsg{Kind: "tx-commit", Body: "tx-committed", Tag: "T"},
		plannedMsg{Kind: "tx-rollback", Body: "tx-rolled-back", Tag: "T"},
		plannedMsg{Kind: "tx-open", Body: "tx-checked", Tag: "T"},
	)
	sendStart := time.Now()
	evs := runNode(t, "producer.js", map[string]any{"endpoints": addr, "topic": topic, "messages": msgs,
		"waitChecks": 1, "checkResolution": "COMMIT", "timeoutMs": 60000}, 90*time.Second)
	sent := map[int]nodeEvent{}
	checked := 0
	for _, ev := range evs {
		switch ev.Event {
		case "sent":
			sent[ev.I] = ev
		case "checked":
			checked++
			if ev.Body != "tx-checked" {
				t.Errorf("the transaction check asked about %q, want the open transaction's message", ev.Body)
			}
		case "error":
			t.Errorf("node: %+v", ev)
		}
	}
	if len(sent) != len(msgs) || checked != 1 {
		t.Fatalf("node sent %d of %d messages, %d checks (want 1): %+v", len(sent), len(msgs), checked, evs)
	}
	for i, m := range msgs {
		if strings.HasPrefix(m.Kind, "tx-") != (sent[i].TransactionID != "") {
			t.Errorf("message %d (%s): transaction id %q", i, m.Kind, sent[i].TransactionID)
		}
	}

	want := map[string]int{} // message id → index, for every message a consumer must get
	for i, m := range msgs {
		if m.Kind != "tx-rollback" {
			want[sent[i].MessageID] = i
		}
	}
	r := newReceived()
	newPushConsumer(t, s.nsAddr, uniqueName(t, "cg"), topic, rmqconsumer.MessageSelector{}, r, "c1")
	waitFor(t, 60*time.Second, "every committed message at the Go consumer", func() bool { return r.distinct() >= len(want) })

	r.mu.Lock()
	defer r.mu.Unlock()
	type fifoPos struct {
		queue  int
		offset int64
	}
	fifo := map[string][]fifoPos{}
	for _, deliveries := range r.msgs {
		m := deliveries[0]
		i, ok := want[m.MsgId]
		if !ok {
			t.Errorf("unexpected message %s (body %q): a rolled-back or unknown message was delivered", m.MsgId, m.Body)
			continue
		}
		p := msgs[i]
		body := []byte(p.Body)
		if p.BodyB64 != "" {
			body = binBody
		}
		if !bytes.Equal(m.Body, body) {
			t.Errorf("message %d: body %q, want %q", i, m.Body, body)
		}
		if m.GetTags() != p.Tag {
			t.Errorf("message %d: tag %q, want %q", i, m.GetTags(), p.Tag)
		}
		if got := m.GetKeys(); got != strings.Join(p.Keys, " ") {
			t.Errorf("message %d: keys %q, want %q", i, got, strings.Join(p.Keys, " "))
		}
		for k, v := range p.Props {
			if got, ok := m.GetProperties()[k]; !ok || got != v {
				t.Errorf("message %d: user property %s = %q (present %v), want %q", i, k, got, ok, v)
			}
		}
		switch p.Kind {
		case "fifo":
			// RocketMQ's sharding key property (MessageConst
			// PROPERTY_SHARDING_KEY; client-go's GetShardingKey reads
			// another name).
			if got := m.GetProperty("__SHARDINGKEY"); got != p.Group {
				t.Errorf("message %d: __SHARDINGKEY %q, want the message group %q", i, got, p.Group)
			}
			fifo[p.Group] = append(fifo[p.Group], fifoPos{m.Queue.QueueId, m.QueueOffset})
		case "delay":
			deliver, _ := strconv.ParseInt(m.GetProperty("TIMER_DELIVER_MS"), 10, 64)
			if deliver < sendStart.Add(2*time.Second).UnixMilli() || m.StoreTimestamp < deliver {
				t.Errorf("delayed message: TIMER_DELIVER_MS %d, stored for delivery at %d; sent from %d with a 2s delay",
					deliver, m.StoreTimestamp, sendStart.UnixMilli())
			}
		}
	}
	for g, pos := range fifo {
		// Sent in order i = 0..3: the consumer's offsets per group must be
		// in one queue and rise with the send order; r.msgs is a map, so
		// sort by body index.
		if len(pos) != 4 {
			t.Errorf("group %s: %d messages delivered, want 4", g, len(pos))
			continue
		}
		slices.SortFunc(pos, func(a, b fifoPos) int { return int(a.offset - b.offset) })
		for _, p := range pos {
			if p.queue != pos[0].queue {
				t.Errorf("group %s: messages in queues %v, want one queue", g, pos)
				break
			}
		}
	}
	for g := range fifo {
		var order []int64
		for _, deliveries := range r.msgs {
			m := deliveries[0]
			if m.GetProperty("__SHARDINGKEY") == g {
				n, _ := strconv.Atoi(strings.TrimPrefix(string(m.Body), "fifo-"+g+"-"))
				order = append(order, m.QueueOffset*100+int64(n))
			}
		}
		slices.Sort(order)
		for k, v := range order {
			if int(v%100) != k {
				t.Errorf("group %s: queue order %v is not the send order", g, order)
				break
			}
		}
	}
}

// TestGRPCNodeProducerSignsForACL: with STRATAMQ_ACL_FILE, the Node client
// signing with an account's keys sends; with a wrong secret it is refused,
// and with no keys too.
func TestGRPCNodeProducerSignsForACL(t *testing.T) {
	t.Parallel()
	nodetest.Need(t)
	aclFile := filepath.Join(t.TempDir(), "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(e2eACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	s, addr := startServeGRPC(t, map[string]string{"STRATAMQ_ACL_FILE": aclFile})
	_ = s
	topic := uniqueName(t, "A")
	plan := func(ak, sk string) map[string]any {
		p := map[string]any{"endpoints": addr, "topic": topic, "timeoutMs": 20000,
			"messages": []map[string]any{{"kind": "normal", "body": "signed"}}}
		if ak != "" {
			p["accessKey"], p["secretKey"] = ak, sk
		}
		return p
	}
	evs := runNode(t, "producer.js", plan("e2e-user", e2eUserSecret), 60*time.Second)
	if len(evs) != 2 || evs[0].Event != "sent" || evs[0].MessageID == "" {
		t.Fatalf("signed producer: %+v", evs)
	}
	for _, p := range []map[string]any{plan("e2e-user", e2eWrongSecret), plan("", "")} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := nodetest.Command(ctx, t, "producer.js", p).CombinedOutput()
		cancel()
		if err == nil || strings.Contains(string(out), `"event":"sent"`) {
			t.Fatalf("producer with accessKey %q: sent (err %v):\n%s", p["accessKey"], err, out)
		}
		if !strings.Contains(string(out), "ACL") && !strings.Contains(strings.ToLower(string(out)), "unauthorized") {
			t.Errorf("producer with accessKey %q: the refusal does not say why:\n%s", p["accessKey"], out)
		}
	}
}

// TestGRPCNodeRecallCancelsDelayedMessage: the Node client recalls a
// delayed message by the handle its send returned; the broker restarts
// before it is due (the recall is in the log, not only in memory); a Go
// consumer gets the delayed message sent after it (due later) and never
// the recalled one.
func TestGRPCNodeRecallCancelsDelayedMessage(t *testing.T) {
	t.Parallel()
	nodetest.Need(t)
	s, addr := startServeGRPC(t, nil)
	topic := uniqueName(t, "R")
	s.createTopic(topic, 2)
	evs := runNode(t, "producer.js", map[string]any{"endpoints": addr, "topic": topic, "timeoutMs": 20000, "recall": true,
		"messages": []map[string]any{{"kind": "delay", "body": "recalled", "delayMs": 8000}}}, 60*time.Second)
	var recalled nodeEvent
	for _, ev := range evs {
		switch ev.Event {
		case "recalled":
			recalled = ev
		case "error":
			t.Fatalf("node: %+v", ev)
		}
	}
	if recalled.MessageID == "" {
		t.Fatalf("no recall: %+v", evs)
	}
	s.restart()
	evs = runNode(t, "producer.js", map[string]any{"endpoints": addr, "topic": topic, "timeoutMs": 20000,
		"messages": []map[string]any{{"kind": "delay", "body": "kept", "delayMs": 2000}}}, 60*time.Second)
	if evs[0].Event != "sent" || evs[0].RecallHandle == "" {
		t.Fatalf("second delayed send: %+v", evs)
	}
	r := newReceived()
	newPushConsumer(t, s.nsAddr, uniqueName(t, "cg"), topic, rmqconsumer.MessageSelector{}, r, "c1")
	waitFor(t, 30*time.Second, "the delayed message that was not recalled", func() bool { return r.distinct() >= 1 })
	// The recalled one was due before the kept one only if the restart
	// was quick; wait for its due time to have passed either way.
	waitFor(t, 30*time.Second, "the recalled message's due time", func() bool {
		return strings.Contains(s.logs.String(), "recalled timer message dropped")
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.msgs["recalled"]; ok || len(r.msgs) != 1 {
		t.Fatalf("delivered %v: the recalled message arrived", slices.Collect(maps.Keys(r.msgs)))
	}
}
