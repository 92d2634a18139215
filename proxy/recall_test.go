package proxy_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
)

// recallACL: the attacker may publish anywhere but on the victim's topic.
const recallACL = `
accounts:
  - accessKey: victim-app
    secretKey: VICTIM-secret-3
    defaultTopicPerm: DENY
    topicPerms:
      - VictimDelay=PUB|SUB
  - accessKey: attacker-app
    secretKey: ATTACKER-secret-4
    defaultTopicPerm: PUB
    topicPerms:
      - VictimDelay=DENY
`

// delayMsg is a message of topic with id, due at due.
func delayMsg(topic, id string, due time.Time) *apiv2.Message {
	m := textMsg(topic, id, "body of "+id)
	m.SystemProperties.MessageType = apiv2.MessageType_DELAY
	m.SystemProperties.DeliveryTimestamp = timestamppb.New(due)
	return m
}

// TestGRPCRecallOnlyOwnTopic: a recall drops only the message of its own
// topic with its id. An account that sends a timer message of its own
// topic under the id of another account's timer message (ids are the
// client's choice) and recalls it cancels its own message only: the
// victim's, on a topic the attacker may not publish to, is delivered. The
// recall markers' system topic (and the timer wheel's) refuse client
// sends, over gRPC and remoting, with a clear error.
func TestGRPCRecallOnlyOwnTopic(t *testing.T) {
	e := aclEnv(t, recallACL)
	victim := func() context.Context { return signedAs(t, "victim-app", "VICTIM-secret-3", "victim", "") }
	attacker := func() context.Context { return signedAs(t, "attacker-app", "ATTACKER-secret-4", "attacker", "") }
	const id, id2 = "01VICTIMDELAYED", "01VICTIMDELAYED2"
	now := time.Now()
	send := func(ctx context.Context, m *apiv2.Message) *apiv2.SendResultEntry {
		t.Helper()
		r, err := e.cli.SendMessage(ctx, &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
		if err != nil || r.GetStatus().GetCode() != apiv2.Code_OK {
			t.Fatalf("send %s: %v %v", m.GetTopic().GetName(), r, err)
		}
		return r.Entries[0]
	}
	send(victim(), delayMsg("VictimDelay", id, now.Add(3*time.Second)))
	send(victim(), delayMsg("VictimDelay", id2, now.Add(3*time.Second)))
	own := send(attacker(), delayMsg("AttackerDelay", id, now.Add(2*time.Second)))
	if own.GetRecallHandle() == "" {
		t.Fatal("no recall handle")
	}
	rr, err := e.cli.RecallMessage(attacker(), &apiv2.RecallMessageRequest{Topic: res("AttackerDelay"), RecallHandle: own.GetRecallHandle()})
	if err != nil || rr.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("recall of its own message: %v %v", rr, err)
	}

	// A marker (or a timer record) written by hand, naming the victim's
	// second message: refused, over gRPC and over remoting.
	due := strconv.FormatInt(now.Add(time.Hour).UnixMilli(), 10)
	props := "UNIQ_KEY\x0101FORGED\x02REAL_TOPIC\x01VictimDelay\x02TIMER_DELIVER_MS\x01" + due + "\x02RECALL_UNIQ_KEY\x01" + id2 + "\x02"
	for _, topic := range []string{broker.RecallTopic, broker.TimerTopic} {
		m := textMsg(topic, "01FORGED", id2)
		m.Body = []byte(id2)
		m.UserProperties = nil
		r, err := e.cli.SendMessage(attacker(), &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
		if err != nil || r.GetStatus().GetCode() != apiv2.Code_FORBIDDEN || !strings.Contains(r.GetStatus().GetMessage(), "system topic") {
			t.Errorf("gRPC send to %s: %v %v, want FORBIDDEN naming a system topic", topic, r.GetStatus(), err)
		}
		h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: topic, DefaultTopic: "TBW102",
			DefaultTopicQueueNums: 1, QueueID: 0, BornTimestamp: time.Now().UnixMilli(), Properties: props}
		req := remoting.NewRequest(remoting.SendMessage, h.Encode(), []byte(id2))
		acl.Credentials{AccessKey: "attacker-app", SecretKey: "ATTACKER-secret-4"}.Sign(req)
		cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
		resp, err := cl.Invoke(callCtx(t, "x"), e.b.Addr().String(), req)
		cl.Close()
		if err != nil || resp.Code != int32(remoting.NoPermission) || !strings.Contains(resp.Remark, "system topic") {
			t.Errorf("remoting send to %s: %v %v, want NO_PERMISSION naming a system topic", topic, resp, err)
		}
	}

	// Both of the victim's messages are delivered on their due time.
	for _, want := range []string{id, id2} {
		waitCond(t, 20*time.Second, "the victim's delayed message "+want+" delivered", func() bool {
			for q := int32(0); q < 8; q++ {
				if e.b.Store().MaxQueueOffset("VictimDelay", q) == 0 {
					continue
				}
				for _, r := range queueBodies(t, e.b, "VictimDelay", q) {
					if string(r.Body) == "body of "+want {
						return true
					}
				}
			}
			return false
		})
	}
	// The attacker's own message, due a second earlier, was recalled.
	for q := int32(0); q < 8; q++ {
		if n := e.b.Store().MaxQueueOffset("AttackerDelay", q); n != 0 {
			t.Errorf("the recalled message was delivered (AttackerDelay queue %d holds %d)", q, n)
		}
	}
}

// waitCond waits until cond holds, polling, failing after d.
func waitCond(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
