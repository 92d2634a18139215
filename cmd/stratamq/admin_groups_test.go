package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// groupConfig is the broker's config of group, from
// GET_ALL_SUBSCRIPTIONGROUP_CONFIG; ok false when it has none.
func groupConfig(t *testing.T, brokerAddr, group string) (remoting.SubscriptionGroupConfig, bool) {
	t.Helper()
	resp, ok := ask(brokerAddr, remoting.NewRequest(remoting.GetAllSubscriptionGroupConfig, nil, nil), 5*time.Second)
	if !ok {
		t.Fatal("GET_ALL_SUBSCRIPTIONGROUP_CONFIG failed")
	}
	var w struct {
		SubscriptionGroupTable map[string]remoting.SubscriptionGroupConfig `json:"subscriptionGroupTable"`
	}
	if err := json.Unmarshal(resp.Body, &w); err != nil {
		t.Fatal(err)
	}
	g, ok := w.SubscriptionGroupTable[group]
	return g, ok
}

// The group and broker commands of `stratamq admin` against a running
// broker: updateSubGroup and deleteSubGroup change the broker's group
// config; consumerConnection shows an official push consumer's client and
// subscription (and CONSUMER_NOT_ONLINE for a group with none);
// brokerStatus and getBrokerConfig print the broker's state and settings;
// queryMsgByOffset the message the official client sent to that offset.
func TestAdminGroupAndBrokerCommands(t *testing.T) {
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "GroupsT")
	s.createTopic(topic, 2)
	env := map[string]string{"NAMESRV_ADDR": s.nsAddr}
	admin := func(args ...string) string {
		t.Helper()
		code, out, errOut := runAdminCmd(env, args...)
		if code != 0 {
			t.Fatalf("admin %v: exit %d: %s", args, code, errOut)
		}
		return out
	}

	group := uniqueName(t, "cfg")
	admin("updateSubGroup", "-g", group, "-r", "3", "-q", "2")
	if g, ok := groupConfig(t, s.brokAddr, group); !ok || g.RetryMaxTimes != 3 || g.RetryQueueNums != 2 || !g.ConsumeEnable {
		t.Fatalf("after updateSubGroup: %+v %v", g, ok)
	}
	admin("deleteSubGroup", "-g", group, "--removeOffset")
	if _, ok := groupConfig(t, s.brokAddr, group); ok {
		t.Fatal("the group's config is still there after deleteSubGroup")
	}

	p := newClientProducer(t, s.nsAddr)
	r, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte("at an offset")))
	if err != nil {
		t.Fatal(err)
	}
	out := admin("queryMsgByOffset", "-t", topic, "-i", fmt.Sprint(r.MessageQueue.QueueId), "-o", fmt.Sprint(r.QueueOffset))
	if !strings.Contains(out, "msgId="+r.MsgID) || !strings.Contains(out, fmt.Sprintf("queueOffset=%d", r.QueueOffset)) {
		t.Fatalf("queryMsgByOffset:\n%s\nwant msgId %s", out, r.MsgID)
	}
	if code, _, errOut := runAdminCmd(env, "queryMsgByOffset", "-t", topic, "-i", fmt.Sprint(r.MessageQueue.QueueId), "-o", "99"); code != 1 || !strings.Contains(errOut, "no message") {
		t.Fatalf("queryMsgByOffset past the end: exit %d: %s", code, errOut)
	}

	live := uniqueName(t, "live")
	if code, _, errOut := runAdminCmd(env, "consumerConnection", "-g", live); code != 1 || !strings.Contains(errOut, "CONSUMER_NOT_ONLINE") {
		t.Fatalf("consumerConnection of a group with no client: exit %d: %s", code, errOut)
	}
	newPushConsumer(t, s.nsAddr, live, topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "a || b"}, newReceived(), "c1")
	var cc broker.ConsumerConnection
	waitFor(t, 20*time.Second, "the push consumer's heartbeat", func() bool {
		code, out, _ := runAdminCmd(env, "consumerConnection", "-g", live, "--json")
		return code == 0 && json.Unmarshal([]byte(out), &cc) == nil && len(cc.ConnectionSet) == 1
	})
	if sub, ok := cc.SubscriptionTable[topic]; !ok || sub.SubString != "a || b" || cc.MessageModel != "CLUSTERING" || cc.ConnectionSet[0].ClientAddr == "" {
		t.Fatalf("consumerConnection: %+v", cc)
	}
	if out := admin("consumerConnection", "-g", live); !strings.Contains(out, cc.ConnectionSet[0].ClientID) || !strings.Contains(out, topic) {
		t.Fatalf("consumerConnection:\n%s", out)
	}

	var kv remoting.KVTable
	if err := json.Unmarshal([]byte(admin("brokerStatus", "--json")), &kv); err != nil || kv.Table["brokerRole"] != "async_master" || kv.Table["commitLogMaxOffset"] == "0" {
		t.Fatalf("brokerStatus --json: %+v %v", kv, err)
	}
	if out := admin("brokerStatus", "-b", s.brokAddr); !strings.Contains(out, "commitLogMaxOffset") {
		t.Fatalf("brokerStatus:\n%s", out)
	}
	if out := admin("getBrokerConfig"); !strings.Contains(out, "brokerName=broker-a\n") || !strings.Contains(out, "STRATAMQ_FLUSH=async\n") {
		t.Fatalf("getBrokerConfig:\n%s", out)
	}
}
