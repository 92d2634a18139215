package broker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/remoting"
)

// Names every entry point must refuse: path-like, outside the charset,
// too long.
var badTopicNames = []string{"../../../victim", "..", ".", "", "a/b", `a\b`, "a.b", "a b", "x\x00y", "%RETRY%../x", strings.Repeat("t", 128)}
var badGroupNames = []string{"../../../victim", "..", ".", "", "g/h", "g.h", "g h", "g\x00", strings.Repeat("g", 256)}

// TestBrokerRefusesBadNamesAtEveryEntryPoint sends every request code that
// takes a topic or a consumer group to a path, a table key or a config
// table with each bad name: each gets SYSTEM_ERROR with a remark quoting
// the name and naming the rule, and nothing is created (issue 9 item 5).
func TestBrokerRefusesBadNamesAtEveryEntryPoint(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	victim := filepath.Join(root, "victim")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	b, cl := startBroker(t, func(c *Config) { c.DataDir = filepath.Join(root, "data") })
	addr := b.Addr().String()
	if r := invoke(t, cl, addr, sendReq("Good", 0, []byte("m"), "")); r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	topicReqs := map[string]func(topic string) *remoting.Command{
		"SEND_MESSAGE(10)": func(topic string) *remoting.Command { return sendReq(topic, 0, []byte("m"), "") },
		"SEND_MESSAGE_V2(310)": func(topic string) *remoting.Command {
			h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: topic, DefaultTopic: DefaultTopic, DefaultTopicQueueNums: 4, BornTimestamp: 1}
			return remoting.NewRequest(remoting.SendMessageV2, h.EncodeV2(), []byte("m"))
		},
		"SEND_BATCH_MESSAGE(320)": func(topic string) *remoting.Command {
			r := sendReq(topic, 0, nil, "")
			r.Code = int32(remoting.SendBatchMessage)
			r.Body = []byte("m")
			return r
		},
		"PULL_MESSAGE(11)":          func(topic string) *remoting.Command { return pullReq("cg", topic, 0, 0, 0, "*") },
		"QUERY_CONSUMER_OFFSET(14)": func(topic string) *remoting.Command { return queryOffsetReq("cg", topic, 0) },
		"UPDATE_CONSUMER_OFFSET(15)": func(topic string) *remoting.Command {
			return updateOffsetReq("cg", topic, 0, 1)
		},
		"UPDATE_AND_CREATE_TOPIC(17)": func(topic string) *remoting.Command { return createTopicReq(topic, 1) },
		"DELETE_TOPIC_IN_BROKER(215)": deleteTopicReq,
		"LOCK_BATCH_MQ(41)": func(topic string) *remoting.Command {
			return lockReq(remoting.LockBatchMQ, "cg", topic)
		},
		"UNLOCK_BATCH_MQ(42)": func(topic string) *remoting.Command {
			return lockReq(remoting.UnlockBatchMQ, "cg", topic)
		},
	}
	groupReqs := map[string]func(group string) *remoting.Command{
		"PULL_MESSAGE(11)":           func(g string) *remoting.Command { return pullReq(g, "Good", 0, 0, 0, "*") },
		"QUERY_CONSUMER_OFFSET(14)":  func(g string) *remoting.Command { return queryOffsetReq(g, "Good", 0) },
		"UPDATE_CONSUMER_OFFSET(15)": func(g string) *remoting.Command { return updateOffsetReq(g, "Good", 0, 1) },
		"HEART_BEAT(34)": func(g string) *remoting.Command {
			body, _ := json.Marshal(remoting.HeartbeatData{ClientID: "c1", ConsumerDataSet: []remoting.ConsumerData{{
				GroupName: g, ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING", ConsumeFromWhere: "CONSUME_FROM_LAST_OFFSET",
				SubscriptionDataSet: []remoting.SubscriptionData{{Topic: "Good", SubString: "*"}}}}})
			return remoting.NewRequest(remoting.HeartBeat, nil, body)
		},
		"CONSUMER_SEND_MSG_BACK(36)": func(g string) *remoting.Command {
			h := remoting.ConsumerSendMsgBackRequestHeader{Offset: 0, Group: g, DelayLevel: 1}
			return remoting.NewRequest(remoting.ConsumerSendMsgBack, h.Encode(), nil)
		},
		"LOCK_BATCH_MQ(41)":   func(g string) *remoting.Command { return lockReq(remoting.LockBatchMQ, g, "Good") },
		"UNLOCK_BATCH_MQ(42)": func(g string) *remoting.Command { return lockReq(remoting.UnlockBatchMQ, g, "Good") },
		"UPDATE_AND_CREATE_SUBSCRIPTIONGROUP(200)": func(g string) *remoting.Command {
			body, _ := json.Marshal(DefaultSubscriptionGroup(g))
			return remoting.NewRequest(remoting.UpdateAndCreateSubscriptionGroup, nil, body)
		},
		"SEND_MESSAGE(10) to %RETRY%<group>": func(g string) *remoting.Command {
			return sendReq(RetryGroupTopicPrefix+g, 0, []byte("m"), "")
		},
	}
	check := func(what, kind, name string, r *remoting.Command) {
		t.Helper()
		if r.Code != int32(remoting.SystemError) {
			t.Errorf("%s with %s %q: code %d (%s), want SYSTEM_ERROR", what, kind, name, r.Code, r.Remark)
			return
		}
		if name == "" {
			return // some headers refuse an empty required field before the name rule
		}
		// The send to %RETRY%<group> is judged on its topic first.
		if !strings.Contains(r.Remark, remoting.QuoteName(name)) && !strings.Contains(r.Remark, remoting.QuoteName(RetryGroupTopicPrefix+name)) {
			t.Errorf("%s with %s %q: remark %q does not quote the name", what, kind, name, r.Remark)
		}
		if !strings.Contains(r.Remark, "illegal characters") && !strings.Contains(r.Remark, "max length") &&
			!strings.Contains(r.Remark, "blank") {
			t.Errorf("%s with %s %q: remark %q does not name the rule", what, kind, name, r.Remark)
		}
	}
	for what, mk := range topicReqs {
		for _, name := range badTopicNames {
			check(what, "topic", name, invoke(t, cl, addr, mk(name)))
		}
	}
	for what, mk := range groupReqs {
		for _, name := range badGroupNames {
			check(what, "group", name, invoke(t, cl, addr, mk(name)))
		}
	}

	// Nothing was created or removed.
	for _, n := range b.topics.Names() {
		if remoting.ValidateTopic(n) != nil {
			t.Errorf("topic table holds %q", n)
		}
	}
	for _, n := range b.groups.Names() {
		if remoting.ValidateGroup(n) != nil {
			t.Errorf("group table holds %q", n)
		}
	}
	body, _, _ := b.offsets.Encode()
	var off struct {
		OffsetTable map[string]map[string]int64 `json:"offsetTable"`
	}
	if err := json.Unmarshal(body, &off); err != nil || len(off.OffsetTable) != 0 {
		t.Errorf("offsets: %s (%v)", body, err)
	}
	if names, _ := os.ReadDir(root); len(names) != 2 {
		t.Errorf("next to the data dir: %v", names)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("victim: %v", err)
	}
	if err := b.store.Flush(); err != nil {
		t.Fatal(err)
	}
	cq, _ := os.ReadDir(filepath.Join(root, "data", "store", "consumequeue"))
	if len(cq) != 1 || cq[0].Name() != "Good" {
		t.Errorf("consumequeue/ holds %v", cq)
	}
	r := invoke(t, cl, addr, pullReq("cg", "Good", 0, 0, 0, "*"))
	if r.Code != int32(remoting.Success) || len(r.Body) == 0 {
		t.Fatalf("the good topic after all that: %d %s", r.Code, r.Remark)
	}
}

// TestBrokerSystemTopicsAsRocketMQ49: the admin codes refuse RocketMQ's
// system topics (SYSTEM_ERROR "conflict with system topic"), sends to the
// not-allowed ones are NO_PERMISSION, and the topics stay.
func TestBrokerSystemTopicsAsRocketMQ49(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()
	for _, topic := range []string{DefaultTopic, "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRACE_TOPIC", "rmq_sys_anything", "OFFSET_MOVED_EVENT"} {
		for what, req := range map[string]*remoting.Command{"create": createTopicReq(topic, 1), "delete": deleteTopicReq(topic)} {
			r := invoke(t, cl, addr, req)
			if r.Code != int32(remoting.SystemError) || !strings.Contains(r.Remark, "conflict with system topic") {
				t.Errorf("%s %s: %d %q", what, topic, r.Code, r.Remark)
			}
		}
	}
	if _, ok := b.topics.Get(DefaultTopic); !ok {
		t.Fatal("TBW102 is gone")
	}
	for _, topic := range []string{"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "SELF_TEST_TOPIC"} {
		r := invoke(t, cl, addr, sendReq(topic, 0, []byte("m"), ""))
		if r.Code != int32(remoting.NoPermission) || !strings.Contains(r.Remark, "is forbidden") {
			t.Errorf("send to %s: %d %q", topic, r.Code, r.Remark)
		}
	}
}

// TestBrokerLongGroupHasNoRetryTopic: a valid 200-byte group consumes (its
// heartbeat succeeds) though %RETRY%<group> would be over 127 bytes; no
// such topic is made, and a send-back says why.
func TestBrokerLongGroupHasNoRetryTopic(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()
	g := strings.Repeat("G", 200)
	body, _ := json.Marshal(remoting.HeartbeatData{ClientID: "c1", ConsumerDataSet: []remoting.ConsumerData{{
		GroupName: g, ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING"}}})
	if r := invoke(t, cl, addr, remoting.NewRequest(remoting.HeartBeat, nil, body)); r.Code != 0 {
		t.Fatalf("heartbeat: %d %s", r.Code, r.Remark)
	}
	if slices.ContainsFunc(b.topics.Names(), func(n string) bool { return len(n) > remoting.TopicMaxLen }) {
		t.Fatalf("topics: %v", b.topics.Names())
	}
	h := remoting.ConsumerSendMsgBackRequestHeader{Offset: 0, Group: g, DelayLevel: 1}
	r := invoke(t, cl, addr, remoting.NewRequest(remoting.ConsumerSendMsgBack, h.Encode(), nil))
	if r.Code != int32(remoting.SystemError) || !strings.Contains(r.Remark, "retry topic") {
		t.Fatalf("send back: %d %q", r.Code, r.Remark)
	}
}

func deleteTopicReq(topic string) *remoting.Command {
	h := remoting.DeleteTopicRequestHeader{Topic: topic}
	return remoting.NewRequest(remoting.DeleteTopicInBroker, h.Encode(), nil)
}

func lockReq(code remoting.RequestCode, group, topic string) *remoting.Command {
	body, _ := json.Marshal(remoting.LockBatchRequestBody{ConsumerGroup: group, ClientID: "c1",
		MQSet: []remoting.MessageQueue{{Topic: topic, BrokerName: "b", QueueID: 0}}})
	return remoting.NewRequest(code, nil, body)
}
