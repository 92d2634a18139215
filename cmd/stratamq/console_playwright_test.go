package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// TestConsolePlaywright drives the web console in a real headless Chromium
// through Playwright (playwright-core from npm, installed by .ci/deps.sh,
// with Debian's chromium), against `stratamq serve` with ACL 2.0 on: it
// signs in as the broker's super user, creates a topic, sends a test
// message and finds it by key, resets a group by time and sees its lag go
// from 0 to the messages sent since, resends a dead-lettered message, and
// reads the charts. The test then checks the broker's side of each action
// and that the messages-in chart's rates integrate to what /metrics says
// arrived over the same window. With STRATAMQ_CONSOLE_SCREENSHOTS=<dir>
// (docs/console) it saves the pages' screenshots there.
func TestConsolePlaywright(t *testing.T) {
	chromium := findChromium(t)
	script, err := filepath.Abs("../../console/browsertest/console.js")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("../../console/browsertest/node_modules/playwright-core"); err != nil {
		t.Fatal("console/browsertest/node_modules/playwright-core is missing: run `npm ci` in console/browsertest (.ci/deps.sh does)")
	}
	const rootPw = "console-root-4711"
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := startServe(t, t.TempDir(), map[string]string{
		"STRATAMQ_HTTP_LISTEN":              httpAddr,
		"STRATAMQ_BUCKET":                   "file://" + filepath.Join(t.TempDir(), "bucket"),
		"STRATAMQ_AUTHENTICATION_ENABLED":   "true",
		"STRATAMQ_AUTHORIZATION_ENABLED":    "true",
		"STRATAMQ_INIT_AUTHENTICATION_USER": `{"username":"root","password":"` + rootPw + `"}`,
		"STRATAMQ_CONSOLE_HISTORY_STEP":     "1s",
	})
	root := acl.Credentials{AccessKey: "root", SecretKey: rootPw}
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	call := func(req *remoting.Command) *remoting.Command {
		t.Helper()
		root.Sign(req)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cl.Invoke(ctx, s.brokAddr, req)
		if err != nil || resp.Code != int32(remoting.Success) {
			t.Fatalf("request %v: %v %v", remoting.RequestCode(req.Code), resp, err)
		}
		return resp
	}
	send := func(topic, body, props string) *remoting.Command {
		h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: topic, DefaultTopic: "TBW102", DefaultTopicQueueNums: 1,
			QueueID: 0, BornTimestamp: time.Now().UnixMilli(), Properties: props}
		return call(remoting.NewRequest(remoting.SendMessage, h.Encode(), []byte(body)))
	}
	topic, group, dlqGroup := uniqueName(t, "Orders"), uniqueName(t, "billing"), uniqueName(t, "failing")
	th := remoting.CreateTopicRequestHeader{Topic: topic, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}
	call(remoting.NewRequest(remoting.UpdateAndCreateTopic, th.Encode(), nil))

	// The group has read everything; ten messages arrive after resetTo.
	send(topic, "before", "")
	// resetTo: the next whole second (the form takes RFC 3339 seconds),
	// after "before" was stored and before the ten are.
	resetTo := time.Now().UTC().Truncate(time.Second).Add(time.Second)
	waitFor(t, 3*time.Second, "the clock past resetTo", func() bool { return time.Now().After(resetTo.Add(10 * time.Millisecond)) })
	for i := range 10 {
		send(topic, fmt.Sprintf("after-%d", i), "")
	}
	uh := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: 0, CommitOffset: 11}
	call(remoting.NewRequest(remoting.UpdateConsumerOffset, uh.Encode(), nil))
	// A message in dlqGroup's DLQ: sent back with delay level -1.
	res := send(topic, "dead letter", "")
	_, phys, err := store.DecodeMessageID(res.ExtFields["msgId"])
	if err != nil {
		t.Fatal(err)
	}
	bh := remoting.ConsumerSendMsgBackRequestHeader{Offset: phys, Group: dlqGroup, DelayLevel: -1, OriginTopic: topic}
	call(remoting.NewRequest(remoting.ConsumerSendMsgBack, bh.Encode(), nil))
	retryTopic := "%RETRY%" + dlqGroup

	// Traffic stops: the messages-in counter's value now and after the
	// browser's run bound the chart's window check.
	metricsIn := func() float64 { return scrape(t, httpAddr, "rocketmq_messages_in_total", "") }
	args := map[string]string{"base": "http://" + httpAddr, "user": "root", "secret": rootPw, "chromium": chromium,
		"topic": topic, "newTopic": uniqueName(t, "Console"), "key": "k-" + uniqueName(t, "key"), "group": group,
		"dlqGroup": dlqGroup, "resetTo": resetTo.Format(time.RFC3339), "screenshots": os.Getenv("STRATAMQ_CONSOLE_SCREENSHOTS")}
	raw, _ := json.Marshal(args)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script, string(raw))
	cmd.Dir = filepath.Dir(script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	var out struct {
		Steps []struct {
			Name   string `json:"name"`
			User   string `json:"user"`
			Plan   string `json:"plan"`
			Result string `json:"result"`
			Text   string `json:"text"`
			Before int64  `json:"before"`
			After  int64  `json:"after"`
		} `json:"steps"`
		Charts []struct {
			Chart  string `json:"chart"`
			Series []struct {
				Label  string `json:"label"`
				Points string `json:"points"`
			} `json:"series"`
		} `json:"charts"`
		Metrics string `json:"metrics"`
		Error   string `json:"error"`
	}
	if jerr := json.Unmarshal(outb, &out); jerr != nil || err != nil || out.Error != "" {
		t.Fatalf("the browser run failed: %v %v %s\nstdout: %.2000s\nstderr: %.2000s", err, jerr, out.Error, outb, stderr.String())
	}
	step := map[string]int{}
	for i, st := range out.Steps {
		step[st.Name] = i
	}
	get := func(name string) (int, bool) { i, ok := step[name]; return i, ok }
	if i, ok := get("signed in"); !ok || out.Steps[i].User != "root" {
		t.Fatalf("sign-in: %+v", out.Steps)
	}
	if i, ok := get("create topic"); !ok || !strings.Contains(out.Steps[i].Result, "created") || !routeExists(s.nsAddr, args["newTopic"]) {
		t.Fatalf("create topic: %+v", out.Steps)
	}
	if i, ok := get("found by key"); !ok || !strings.Contains(out.Steps[i].Text, "hello from the console test") {
		t.Fatalf("the test message by key: %+v", out.Steps)
	}
	// Before: the dead letter's message, sent after the commit; after: the
	// ten messages stored since resetTo too.
	if i, ok := get("lag"); !ok || out.Steps[i].Before != 1 || out.Steps[i].After != 11 {
		t.Fatalf("lag before and after the reset: %+v", out.Steps)
	}
	qh := remoting.QueryConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: 0}
	if off := call(remoting.NewRequest(remoting.QueryConsumerOffset, qh.Encode(), nil)).ExtFields["offset"]; off != "1" {
		t.Fatalf("the group's offset after the reset to %s: %s, want 1", resetTo, off)
	}
	if i, ok := get("resend"); !ok || !strings.Contains(out.Steps[i].Result, "1 message(s) resent") {
		t.Fatalf("DLQ resend: %+v", out.Steps)
	}
	mh := remoting.QueueRequestHeader{Topic: retryTopic, QueueID: 0}
	if mx := call(remoting.NewRequest(remoting.GetMaxOffset, mh.Encode(), nil)).ExtFields["offset"]; mx == "0" {
		t.Fatalf("%s holds nothing after the resend", retryTopic)
	}

	// Every chart drawn; the messages-in chart integrates to what /metrics
	// counted: the counter did not move between the last sample and the
	// browser's run but for the console's own test message.
	if len(out.Charts) < 8 {
		t.Fatalf("%d charts on the page, want the broker's eight or more", len(out.Charts))
	}
	var integral float64
	found := false
	for _, c := range out.Charts {
		if c.Chart != "messages-in" || len(c.Series) != 1 {
			continue
		}
		found = true
		var prevT int64
		for _, p := range strings.Fields(c.Series[0].Points) {
			ts, v, _ := strings.Cut(p, ":")
			ms, _ := strconv.ParseInt(ts, 10, 64)
			f, _ := strconv.ParseFloat(v, 64)
			if prevT != 0 && !math.IsNaN(f) {
				integral += f * float64(ms-prevT) / 1000
			}
			prevT = ms
		}
	}
	if !found {
		t.Fatalf("no messages-in chart: %+v", out.Charts)
	}
	total := metricsIn()
	inMetrics := 0.0
	for _, line := range strings.Split(out.Metrics, "\n") {
		if strings.HasPrefix(line, "rocketmq_messages_in_total{") {
			f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			inMetrics += f
		}
	}
	// The chart's rates are over its steps, so they add up to the counter's
	// increase: every message, less the one stored before the family's
	// first sample (if one came before it) and the console's test message
	// and the DLQ resend if they came after the last sample the page drew.
	if inMetrics < 13 || total < inMetrics || integral > inMetrics+0.01 || integral < inMetrics-3.01 {
		t.Fatalf("the messages-in chart integrates to %.2f messages; /metrics said %.0f on the page and %.0f after", integral, inMetrics, total)
	}
	t.Logf("messages-in chart: %.2f messages over its window; /metrics: %.0f", integral, inMetrics)
}
