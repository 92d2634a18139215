package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/broker"
)

// `stratamq admin updateTopic -a +retention.time=...` sets a topic's own
// retention (by -b and by -n), a bad value is a usage error naming it,
// and `stratamq admin topicRetention` lists it.
func TestAdminUpdateTopicRetention(t *testing.T) {
	m := startServe(t, t.TempDir(), nil)
	env := map[string]string{}
	if code, out, errOut := runAdminCmd(env, "updateTopic", "-t", "Short", "-r", "2", "-w", "2", "-a", "+retention.time=1m", "-b", m.brokAddr); code != 0 || !strings.Contains(out, "success") {
		t.Fatalf("updateTopic -b: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := runAdminCmd(env, "updateTopic", "-t", "Long", "-a", "+retention.time=forever", "-n", m.nsAddr); code != 0 {
		t.Fatalf("updateTopic -n: %d %s", code, errOut)
	}
	if code, _, errOut := runAdminCmd(env, "updateTopic", "-t", "Bad", "-a", "+retention.time=soon", "-b", m.brokAddr); code != 2 || !strings.Contains(errOut, "retention.time") {
		t.Fatalf("updateTopic with a bad retention: %d %s", code, errOut)
	}
	code, out, errOut := runAdminCmd(env, "topicRetention", "-b", m.brokAddr)
	if code != 0 || !strings.Contains(out, "default retention unlimited") {
		t.Fatalf("topicRetention: %d %s %s", code, out, errOut)
	}
	var short, long bool
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "Short" && f[1] == "1m" {
			short = true
		}
		if len(f) >= 2 && f[0] == "Long" && f[1] == "forever" {
			long = true
		}
		if len(f) > 0 && f[0] == "Bad" {
			t.Fatalf("topic Bad was created:\n%s", out)
		}
	}
	if !short || !long {
		t.Fatalf("topicRetention does not list Short (1m) and Long (forever):\n%s", out)
	}
	code, out, _ = runAdminCmd(env, "topicRetention", "-b", m.brokAddr, "--json")
	var rep broker.TopicRetentionReport
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rep); code != 0 || err != nil {
		t.Fatalf("topicRetention --json: %d %v %s", code, err, out)
	}
	for _, s := range rep.Topics {
		if s.Topic == "Short" && (!s.Override || s.RetentionMillis != 60000) || s.Topic == "Long" && s.RetentionMillis != -1 {
			t.Fatalf("report: %+v", s)
		}
	}
}
