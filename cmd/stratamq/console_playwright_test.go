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
// and every chart against /metrics read in the same session: each gauge's
// last point is its value there, each rate adds up to its counter. With STRATAMQ_CONSOLE_SCREENSHOTS=<dir>
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

	// Every chart against /metrics, read right after the page, once the
	// history held a sample taken after the last action (nothing moved
	// since): a gauge's last point is the value /metrics shows; a rate's
	// points, drawn one step wide, add up to the counter's value, less what
	// it counted before the history's first sample (one message at most,
	// the broker's claim of the manifest at start).
	metrics := parsePromText(out.Metrics)
	charts := map[string]map[string]string{}
	for _, c := range out.Charts {
		charts[c.Chart] = map[string]string{}
		for _, sr := range c.Series {
			charts[c.Chart][sr.Label] = sr.Points
		}
	}
	for _, name := range []string{"messages-in", "messages-out", "bytes", "lag", "storage", "bucket", "bucket-objects",
		"upload-backlog", "requests", "cost", "replication", "failovers"} {
		if _, ok := charts[name]; !ok {
			t.Fatalf("no %s chart: %v", name, charts)
		}
	}
	rate := func(chartName, label, what string, total, slack float64) {
		t.Helper()
		sum, _, _ := chartPoints(charts[chartName][label])
		if sum > total+0.01 || sum < total-slack-0.01 {
			t.Fatalf("chart %s (%s) adds up to %.2f; /metrics: %s = %.0f", chartName, label, sum, what, total)
		}
	}
	gauge := func(chartName, label, what string, want float64) {
		t.Helper()
		_, last, n := chartPoints(charts[chartName][label])
		if n == 0 || last != want {
			t.Fatalf("chart %s (%s): last point %v (%d points); /metrics: %s = %v", chartName, label, last, n, what, want)
		}
	}
	rate("messages-in", "in", "rocketmq_messages_in_total", metrics.sum("rocketmq_messages_in_total", nil), 1)
	rate("messages-out", "out", "rocketmq_messages_out_total", metrics.sum("rocketmq_messages_out_total", nil), 1)
	rate("bytes", "in", "rocketmq_throughput_in_total", metrics.sum("rocketmq_throughput_in_total", nil), 64)
	rate("bytes", "out", "rocketmq_throughput_out_total", metrics.sum("rocketmq_throughput_out_total", nil), 64)
	puts := metrics.sum("rocketmq_tiered_store_upload_objects_total", nil) + metrics.sum("rocketmq_tiered_store_manifest_writes_total", nil) +
		metrics.sum("stratamq_wal_puts_total", nil)
	rate("requests", "PUT", "PUT requests", puts, 2)
	rate("requests", "GET", "rocketmq_tiered_store_cold_get_total", metrics.sum("rocketmq_tiered_store_cold_get_total", nil), 2)
	rate("failovers", "failovers", "stratamq_ha_failovers_total", metrics.sum("stratamq_ha_failovers_total", nil), 0)
	gauge("lag", group, "rocketmq_consumer_lag_messages of "+group, metrics.sum("rocketmq_consumer_lag_messages", map[string]string{"consumer_group": group}))
	gauge("storage", "local", "rocketmq_storage_size", metrics.sum("rocketmq_storage_size", nil))
	gauge("bucket", "bucket", "stratamq_bucket_bytes", metrics.sum("stratamq_bucket_bytes", nil))
	gauge("bucket-objects", "objects", "stratamq_bucket_objects", metrics.sum("stratamq_bucket_objects", nil))
	gauge("upload-backlog", "not yet in the bucket", "rocketmq_tiered_store_upload_lag_bytes", metrics.sum("rocketmq_tiered_store_upload_lag_bytes", nil))
	if _, _, n := chartPoints(charts["cost"]["$ a month"]); n == 0 {
		t.Fatal("the cost chart has no point")
	}
	integral, _, _ := chartPoints(charts["messages-in"]["in"])
	inMetrics := metrics.sum("rocketmq_messages_in_total", nil)
	t.Logf("messages-in chart: %.2f messages over its window; /metrics: %.0f", integral, inMetrics)
}

// promMetrics is a /metrics page's samples: name, labels, value.
type promMetrics []struct {
	name   string
	labels map[string]string
	v      float64
}

func parsePromText(text string) promMetrics {
	var out promMetrics
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		head, labels := line[:sp], map[string]string{}
		name := head
		if i := strings.IndexByte(head, '{'); i >= 0 {
			name = head[:i]
			for _, kv := range strings.Split(strings.TrimSuffix(head[i+1:], "}"), ",") {
				if k, val, ok := strings.Cut(kv, "="); ok {
					labels[k] = strings.Trim(val, `"`)
				}
			}
		}
		out = append(out, struct {
			name   string
			labels map[string]string
			v      float64
		}{name, labels, v})
	}
	return out
}

// sum is the sum of name's samples whose labels include match.
func (m promMetrics) sum(name string, match map[string]string) float64 {
	var s float64
	for _, x := range m {
		if x.name != name {
			continue
		}
		ok := true
		for k, v := range match {
			ok = ok && x.labels[k] == v
		}
		if ok {
			s += x.v
		}
	}
	return s
}

// chartPoints reads a chart series' data-points ("ms:value ..."): the sum
// of its rates over its steps (each point times the time since the one
// before), its last value that is a number, and how many such points.
func chartPoints(points string) (sum, last float64, n int) {
	var prev int64
	for _, p := range strings.Fields(points) {
		ts, v, _ := strings.Cut(p, ":")
		ms, _ := strconv.ParseInt(ts, 10, 64)
		f, err := strconv.ParseFloat(v, 64)
		if err == nil && !math.IsNaN(f) {
			if prev != 0 {
				sum += f * float64(ms-prev) / 1000
			}
			last = f
			n++
		}
		prev = ms
	}
	return sum, last, n
}
