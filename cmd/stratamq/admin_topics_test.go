package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// The topic, cluster and progress commands of `stratamq admin` against a
// running broker, with messages sent by the official client and a group's
// offsets committed: topicList prints the topic names one a line,
// topicRoute and clusterList the broker, topicStatus each queue's min and
// max, consumerProgress each queue's lag and the total, each with --json;
// deleteTopic removes the topic from the broker and the route.
func TestAdminTopicCommands(t *testing.T) {
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "AdminT")
	s.createTopic(topic, 4)
	p := newClientProducer(t, s.nsAddr)
	perQueue := map[int]int64{}
	for i := range 20 {
		r, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(fmt.Sprintf("m%d", i))))
		if err != nil || r.Status != primitive.SendOK {
			t.Fatalf("send %d: %v %v", i, r, err)
		}
		perQueue[r.MessageQueue.QueueId]++
	}
	group := uniqueName(t, "g")
	// The group consumed 1 message of queue 0 and none of the others.
	commit := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: 0, CommitOffset: 1}
	if _, ok := ask(s.brokAddr, remoting.NewRequest(remoting.UpdateConsumerOffset, commit.Encode(), nil), 5*time.Second); !ok {
		t.Fatal("commit an offset")
	}
	waitFor(t, 10*time.Second, "the commit to land", func() bool { return committedOffset(t, s.brokAddr, group, topic, 0) == 1 })
	env := map[string]string{"NAMESRV_ADDR": s.nsAddr}
	admin := func(args ...string) string {
		t.Helper()
		code, out, errOut := runAdminCmd(env, args...)
		if code != 0 {
			t.Fatalf("admin %v: exit %d: %s", args, code, errOut)
		}
		return out
	}

	// topicList: the names, one a line (-n from NAMESRV_ADDR, as mqadmin).
	lines := strings.Split(strings.TrimSpace(admin("topicList")), "\n")
	found := false
	for _, l := range lines {
		found = found || l == topic
	}
	if !found {
		t.Fatalf("topicList lacks %s:\n%s", topic, strings.Join(lines, "\n"))
	}
	var names []string
	if err := json.Unmarshal([]byte(admin("topicList", "-n", s.nsAddr, "--json")), &names); err != nil || len(names) != len(lines) {
		t.Fatalf("topicList --json: %v %v", names, err)
	}

	// topicRoute and clusterList: the one master.
	if out := admin("topicRoute", "-t", topic); !strings.Contains(out, "broker-a") || !strings.Contains(out, s.brokAddr) {
		t.Fatalf("topicRoute:\n%s", out)
	}
	if out := admin("clusterList"); !strings.Contains(out, "DefaultCluster") || !strings.Contains(out, s.brokAddr) {
		t.Fatalf("clusterList:\n%s", out)
	}

	// topicStatus: each queue's max is what was sent to it.
	var st []queueStatus
	if err := json.Unmarshal([]byte(admin("topicStatus", "-t", topic, "--json")), &st); err != nil || len(st) != 4 {
		t.Fatalf("topicStatus --json: %+v %v", st, err)
	}
	for _, q := range st {
		if q.Min != 0 || q.Max != perQueue[int(q.QueueID)] {
			t.Fatalf("queue %d: min %d max %d, want 0 and %d", q.QueueID, q.Min, q.Max, perQueue[int(q.QueueID)])
		}
	}
	if out := admin("topicStatus", "-t", topic); !strings.Contains(out, "MAX OFFSET") || strings.Count(out, "broker-a") != 4 {
		t.Fatalf("topicStatus:\n%s", out)
	}

	// consumerProgress: queue 0 lags by all but one, the others by all
	// (with no commit the broker answers 0, as RocketMQ does for a queue
	// whose messages start at 0).
	var prog struct {
		Queues   []queueStatus `json:"queues"`
		TotalLag int64         `json:"totalLag"`
	}
	if err := json.Unmarshal([]byte(admin("consumerProgress", "-g", group, "-t", topic, "--json")), &prog); err != nil {
		t.Fatal(err)
	}
	if prog.TotalLag != 19 || len(prog.Queues) != 4 {
		t.Fatalf("consumerProgress: total lag %d over %d queues, want 19 over 4", prog.TotalLag, len(prog.Queues))
	}
	for _, q := range prog.Queues {
		want, off := perQueue[int(q.QueueID)], int64(0)
		if q.QueueID == 0 {
			want, off = want-1, 1
		}
		if *q.Lag != want || *q.Consumer != off {
			t.Fatalf("queue %d: lag %d offset %d, want %d and %d", q.QueueID, *q.Lag, *q.Consumer, want, off)
		}
	}
	out := admin("consumerProgress", "-g", group, "-t", topic)
	if !strings.Contains(out, "LAG") || !strings.Contains(out, "total") || !strings.Contains(out, strconv.Itoa(19)) {
		t.Fatalf("consumerProgress:\n%s", out)
	}

	// tierStatus: the messages are in the active segment, none uploaded yet.
	var ts broker.TierStatus
	if err := json.Unmarshal([]byte(admin("tierStatus", "--json")), &ts); err != nil {
		t.Fatal(err)
	}
	if !ts.Bucket || ts.LocalSegments < 1 || ts.LocalBytes <= 0 || ts.MaxPhysOffset <= 0 || ts.OldestRetained == 0 || ts.Role != "async_master" {
		t.Fatalf("tierStatus: %+v", ts)
	}
	if out := admin("tierStatus", "-b", s.brokAddr); !strings.Contains(out, "LOCAL SEGMENTS") || !strings.Contains(out, s.brokAddr) {
		t.Fatalf("tierStatus:\n%s", out)
	}

	// Usage errors exit 2.
	if code, _, _ := runAdminCmd(env, "topicStatus"); code != 2 {
		t.Fatalf("topicStatus without -t: exit %d, want 2", code)
	}
	if code, _, _ := runAdminCmd(map[string]string{}, "topicList"); code != 2 {
		t.Fatalf("topicList without a name server: exit %d, want 2", code)
	}

	// deleteTopic: gone from the broker's topics and from the route.
	admin("deleteTopic", "-t", topic)
	waitFor(t, 10*time.Second, "the route of the deleted topic gone", func() bool { return !routeExists(s.nsAddr, topic) })
	for _, l := range strings.Split(admin("topicList"), "\n") {
		if l == topic {
			t.Fatalf("topicList still lists %s after deleteTopic", topic)
		}
	}
}

// TestParseAdminTime: mqadmin's -s forms and RFC 3339 (issue 13: "-s
// timestamp (ms or RFC 3339)").
func TestParseAdminTime(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	loc := time.Date(2026, 12, 2, 6, 30, 0, 250e6, time.Local).UnixMilli()
	for in, want := range map[string]int64{
		"now":                         now.UnixMilli(),
		"1700000000000":               1_700_000_000_000,
		"2026-12-02T06:30:00Z":        time.Date(2026, 12, 2, 6, 30, 0, 0, time.UTC).UnixMilli(),
		"2026-12-02T07:30:00.5+01:00": time.Date(2026, 12, 2, 6, 30, 0, 500e6, time.UTC).UnixMilli(),
		"2026-12-02#06:30:00:250":     loc,
	} {
		if got, err := parseAdminTime(in, now); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	if _, err := parseAdminTime("yesterday", now); err == nil {
		t.Error("a bad time was accepted")
	}
}
