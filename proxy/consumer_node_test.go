package proxy_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/proxy/nodetest"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// The official Node.js 5.x client's consumers against the in-process
// broker's gRPC endpoint (scripts in proxy/nodetest, installed by .ci/run).

// consumerEvent is one JSON line of a consumer script.
type consumerEvent struct {
	Event     string            `json:"event"`
	MessageID string            `json:"messageId"`
	BodyB64   string            `json:"bodyB64"`
	Body      string            `json:"body"`
	Attempt   int32             `json:"attempt"`
	Tag       string            `json:"tag"`
	Keys      []string          `json:"keys"`
	Group     string            `json:"group"`
	Props     map[string]string `json:"props"`
	At        int64             `json:"at"`
	Code      any               `json:"code"`
	Message   string            `json:"message"`
}

// runConsumerScript runs a consumer script with plan and returns its
// events; an "error" event fails the test.
func runConsumerScript(t *testing.T, script string, plan any, timeout time.Duration) []consumerEvent {
	t.Helper()
	return nodetest.Run[consumerEvent](t, script, plan, timeout, true)
}

// remotingInvoke sends one remoting request to the broker.
func remotingInvoke(t *testing.T, b *broker.Broker, req *remoting.Command) *remoting.Command {
	t.Helper()
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Invoke(ctx, b.Addr().String(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Code != int32(remoting.Success) {
		t.Fatalf("request %d: %d %s", req.Code, resp.Code, resp.Remark)
	}
	return resp
}

// setGroup creates or updates a subscription group over remoting, as
// mqadmin updateSubGroup does.
func setGroup(t *testing.T, b *broker.Broker, group string, fifo bool, retryMaxTimes int32) {
	t.Helper()
	g := remoting.DefaultSubscriptionGroupConfig(group)
	g.ConsumeMessageOrderly, g.RetryMaxTimes = fifo, retryMaxTimes
	body, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	remotingInvoke(t, b, remoting.NewRequest(remoting.UpdateAndCreateSubscriptionGroup, nil, body))
}

// remotingSend sends one message over remoting to topic's queue.
func remotingSend(t *testing.T, b *broker.Broker, topic string, queue int32, body []byte, props string) {
	t.Helper()
	h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: topic, DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, QueueID: queue, BornTimestamp: time.Now().UnixMilli(), Properties: props}
	remotingInvoke(t, b, remoting.NewRequest(remoting.SendMessage, h.Encode(), body))
}

// queueBodies reads every record of a queue from the store.
func queueBodies(t *testing.T, b *broker.Broker, topic string, q int32) []store.Record {
	t.Helper()
	res, err := b.Store().Get(context.Background(), store.GetRequest{Topic: topic, QueueID: q, Offset: 0, MaxMsgs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Record
	for _, raw := range res.Records {
		rec, _, err := store.DecodeRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

// TestGRPCNodeSimpleConsumerReceiveAck: the Node SimpleConsumer receives
// messages a remoting producer sent, byte-identical with their tag, keys
// and properties, and acks them; the group's progress is then at the end.
func TestGRPCNodeSimpleConsumerReceiveAck(t *testing.T) {
	nodetest.Need(t)
	e := startEnv(t, envOpts{})
	const n = 10
	bodies := map[string]bool{}
	for i := range n {
		body := []byte(fmt.Sprintf("body-%d-\x00\xff", i))
		bodies[base64.StdEncoding.EncodeToString(body)] = true
		remotingSend(t, e.b, "NodeSC", int32(i%4), body, fmt.Sprintf("TAGS\x01t%d\x02KEYS\x01k%d\x02color\x01blue\x02", i%2, i))
	}
	evs := runConsumerScript(t, "simple_consumer.js", map[string]any{"endpoints": e.srv.Addr().String(),
		"group": "GSC", "topic": "NodeSC", "mode": "drain", "expect": n, "awaitMs": 2000, "timeoutMs": 60000}, 90*time.Second)
	got := 0
	for _, ev := range evs {
		if ev.Event != "received" {
			continue
		}
		got++
		if !bodies[ev.BodyB64] {
			t.Fatalf("unexpected body %q", ev.BodyB64)
		}
		delete(bodies, ev.BodyB64)
		if ev.Attempt != 1 || !strings.HasPrefix(ev.Tag, "t") || len(ev.Keys) != 1 || ev.Props["color"] != "blue" {
			t.Fatalf("message %+v", ev)
		}
	}
	if got != n || len(bodies) != 0 {
		t.Fatalf("received %d messages, %d bodies missing", got, len(bodies))
	}
	for q := range int32(4) {
		_, mx := e.b.QueueRange("NodeSC", q)
		if off, ok := e.b.CommittedOffset("GSC", "NodeSC", q); !ok || off != mx {
			t.Fatalf("queue %d: committed %d (%v), want %d", q, off, ok, mx)
		}
	}
	if n := e.b.PopInflight("GSC"); n != 0 {
		t.Fatalf("%d in flight after the acks", n)
	}
}

// TestGRPCNodeSimpleConsumerRedeliveryThenDLQ: a message the Node
// SimpleConsumer never acks: an extension moves its deadline and refuses
// the old handle; it comes back after the new deadline with attempt 2,
// again with attempt 3 (the group's retryMaxTimes 2 + 1), then goes to the
// group's DLQ and is not received again.
func TestGRPCNodeSimpleConsumerRedeliveryThenDLQ(t *testing.T) {
	nodetest.Need(t)
	e := startEnv(t, envOpts{})
	setGroup(t, e.b, "GLC", false, 2)
	remotingSend(t, e.b, "NodeLC", 0, []byte("never acked"), "")
	evs := runConsumerScript(t, "simple_consumer.js", map[string]any{"endpoints": e.srv.Addr().String(),
		"group": "GLC", "topic": "NodeLC", "mode": "lifecycle", "invisibleMs": 2000, "extendMs": 4000,
		"emptyMs": 6000, "awaitMs": 2000, "timeoutMs": 80000}, 120*time.Second)
	var attempts []int32
	var extendedAt, secondAt int64
	refused, empty := false, false
	for _, ev := range evs {
		switch ev.Event {
		case "received":
			attempts = append(attempts, ev.Attempt)
			if len(attempts) == 2 {
				secondAt = ev.At
			}
			if ev.Body != "" || ev.BodyB64 != base64.StdEncoding.EncodeToString([]byte("never acked")) {
				t.Fatalf("body %q", ev.BodyB64)
			}
		case "extended":
			extendedAt = ev.At
		case "staleAckRefused":
			refused = true
		case "staleAckAccepted":
			t.Fatal("an ack with the handle an extension replaced was accepted")
		case "empty":
			empty = true
		}
	}
	if fmt.Sprint(attempts) != "[1 2 3]" || !refused || !empty {
		t.Fatalf("attempts %v, stale ack refused %v, empty at the end %v: %+v", attempts, refused, empty, evs)
	}
	if d := time.Duration(secondAt-extendedAt) * time.Millisecond; d < 3500*time.Millisecond {
		t.Fatalf("delivered again %s after a 4 s extension", d)
	}
	dlq := queueBodies(t, e.b, "%DLQ%GLC", 0)
	if len(dlq) != 1 || string(dlq[0].Body) != "never acked" || dlq[0].ReconsumeTimes != 3 {
		t.Fatalf("DLQ holds %d messages: %+v", len(dlq), dlq)
	}
}

// messageGroupQueue is the queue a FIFO producer puts a message group in:
// a hash of the group over the topic's queues (the clients' choice).
func messageGroupQueue(group string, n int) int32 {
	h := fnv.New32a()
	h.Write([]byte(group))
	return int32(h.Sum32() % uint32(n))
}

// TestGRPCNodePushConsumerFIFOOrder: a FIFO group's Node PushConsumer
// consumes every message group in the order it was sent, also when its
// listener fails some deliveries (they are consumed again before the
// group goes on).
func TestGRPCNodePushConsumerFIFOOrder(t *testing.T) {
	nodetest.Need(t)
	e := startEnv(t, envOpts{})
	setGroup(t, e.b, "GPF", true, 5)
	groups := []string{"alpha", "beta", "gamma", "delta", "epsilon"}
	const per = 8
	for i := range per {
		for _, g := range groups {
			remotingSend(t, e.b, "NodePF", messageGroupQueue(g, 4), []byte(fmt.Sprintf("%s-%d", g, i)),
				"__SHARDINGKEY\x01"+g+"\x02")
		}
	}
	evs := runConsumerScript(t, "push_consumer.js", map[string]any{"endpoints": e.srv.Addr().String(),
		"group": "GPF", "topic": "NodePF", "expect": per * len(groups), "failFirst": 3, "timeoutMs": 90000}, 120*time.Second)
	next := map[string]int{}
	consumed := 0
	for _, ev := range evs {
		if ev.Event != "consumed" {
			continue
		}
		consumed++
		g, seq, ok := strings.Cut(ev.Body, "-")
		if !ok || ev.Group != g {
			t.Fatalf("message %q has message group %q", ev.Body, ev.Group)
		}
		var i int
		fmt.Sscan(seq, &i)
		switch {
		case i == next[g]:
			next[g] = i + 1
		case i == next[g]-1:
			// the same message again, after a failed delivery
		default:
			t.Fatalf("group %s: %s consumed after %s-%d: out of order", g, ev.Body, g, next[g]-1)
		}
	}
	for _, g := range groups {
		if next[g] != per {
			t.Fatalf("group %s: consumed up to %d of %d", g, next[g], per)
		}
	}
	if consumed < per*len(groups)+3 {
		t.Fatalf("%d listener calls, want the 3 failed ones consumed again", consumed)
	}
}
