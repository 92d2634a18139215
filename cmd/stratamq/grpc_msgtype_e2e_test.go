package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/proxy/nodetest"
)

// msgTypeEvent is a line producer.js prints, with the error's code (the
// v2 status code the client raised).
type msgTypeEvent struct {
	Event   string `json:"event"`
	I       int    `json:"i"`
	Message string `json:"message"`
	Code    int    `json:"code"`
}

// TestGRPCNodeSendsCheckedByTopicMessageType: topics typed with `stratamq
// admin updateTopic -a +message.type=...`; the official Node.js 5.x
// Producer's FIFO send (a message group) to a NORMAL topic is refused with
// the Proxy's code (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, 40014) and
// remark, and stores nothing, while its normal send to that topic and its
// FIFO send to a FIFO topic are stored. topicRoute and topicStatus show
// the types; a value RocketMQ refuses is refused by the broker, naming the
// values it takes.
func TestGRPCNodeSendsCheckedByTopicMessageType(t *testing.T) {
	nodetest.Need(t)
	s, addr := startServeGRPC(t, nil)
	env := map[string]string{"NAMESRV_ADDR": s.nsAddr}
	admin := func(args ...string) string {
		t.Helper()
		code, out, errOut := runAdminCmd(env, args...)
		if code != 0 {
			t.Fatalf("admin %v: exit %d: %s%s", args, code, out, errOut)
		}
		return out
	}
	normal, fifo := uniqueName(t, "MTN"), uniqueName(t, "MTF")
	admin("updateTopic", "-t", normal, "-r", "2", "-w", "2", "-a", "+message.type=NORMAL")
	admin("updateTopic", "-t", fifo, "-r", "2", "-w", "2", "-a", "+message.type=FIFO")
	code, out, errOut := runAdminCmd(env, "updateTopic", "-t", fifo, "-a", "+message.type=fifo")
	if code == 0 || !strings.Contains(out+errOut, "want one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED") {
		t.Fatalf("updateTopic with message.type=fifo: exit %d: %s%s", code, out, errOut)
	}

	send := func(topic string, msgs []map[string]any) []msgTypeEvent {
		t.Helper()
		return nodetest.Run[msgTypeEvent](t, "producer.js", map[string]any{"endpoints": addr, "topic": topic,
			"timeoutMs": 30000, "messages": msgs}, 90*time.Second, false)
	}
	evs := send(normal, []map[string]any{
		{"kind": "fifo", "body": "fifo to normal", "group": "g1"},
		{"kind": "normal", "body": "normal to normal"},
	})
	want := "TopicMessageType validate failed, the expected type is NORMAL, but actual type is FIFO"
	var refused, sent []msgTypeEvent
	for _, ev := range evs {
		switch ev.Event {
		case "error":
			refused = append(refused, ev)
		case "sent":
			sent = append(sent, ev)
		}
	}
	if len(refused) != 1 || refused[0].I != 0 || refused[0].Code != 40014 || !strings.Contains(refused[0].Message, want) {
		t.Fatalf("the FIFO send to the NORMAL topic: %+v, want one refusal of message 0 with code 40014 and %q", refused, want)
	}
	if len(sent) != 1 || sent[0].I != 1 {
		t.Fatalf("the normal send to the NORMAL topic: %+v", evs)
	}
	evs = send(fifo, []map[string]any{{"kind": "fifo", "body": "fifo to fifo", "group": "g1"}})
	if len(evs) != 2 || evs[0].Event != "sent" {
		t.Fatalf("the FIFO send to the FIFO topic: %+v", evs)
	}

	// What was stored: one message in each topic.
	waitFor(t, 20*time.Second, "both routes on the name server", func() bool {
		return routeExists(s.nsAddr, normal) && routeExists(s.nsAddr, fifo)
	})
	for topic, mt := range map[string]string{normal: "NORMAL", fifo: "FIFO"} {
		var st []queueStatus
		if err := json.Unmarshal([]byte(admin("topicStatus", "-t", topic, "--json")), &st); err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, q := range st {
			total += q.Max - q.Min
			if q.MessageType != mt {
				t.Fatalf("topicStatus of %s: queue %d message type %q, want %s", topic, q.QueueID, q.MessageType, mt)
			}
		}
		if total != 1 {
			t.Fatalf("%s holds %d messages, want 1 (the refused send stored nothing)", topic, total)
		}
		if out := admin("topicRoute", "-t", topic); !strings.Contains(out, "MESSAGE TYPE") || !strings.Contains(out, "message.type="+mt) {
			t.Fatalf("topicRoute of %s:\n%s", topic, out)
		}
		var r struct {
			Attributes map[string]map[string]string `json:"topicAttributes"`
		}
		if err := json.Unmarshal([]byte(admin("topicRoute", "-t", topic, "--json")), &r); err != nil || r.Attributes["broker-a"]["message.type"] != mt {
			t.Fatalf("topicRoute --json of %s: %+v %v", topic, r, err)
		}
	}
}
