package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/stratamq/stratamq/msgtrace"
)

// TestE2EMessageTrace: with STRATAMQ_TRACE_TOPIC_ENABLE, the official Go
// client with tracing on (producer.WithTrace, consumer.WithTrace) finds the
// trace topic's route and writes its trace records; `stratamq admin
// queryMsgTraceById` then prints a message's send (producer group, client
// host, time, cost, status, store host) and each consumer group's
// consumption, in mqadmin's layout, and --json the same legs; the
// console's message page shows the same trace in headless Chromium
// (checkTraceConsole). One test: the Go client keeps one trace client per
// process, bound to the first name servers it was given.
func TestE2EMessageTrace(t *testing.T) {
	chromium := findChromium(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := startServe(t, t.TempDir(), map[string]string{"STRATAMQ_TRACE_TOPIC_ENABLE": "true", "STRATAMQ_HTTP_LISTEN": httpAddr})
	topic := uniqueName(t, "Traced")
	s.createTopic(topic, 2)
	traceCfg := func() *primitive.TraceConfig {
		return &primitive.TraceConfig{GroupName: uniqueName(t, "tg"), NamesrvAddrs: []string{s.nsAddr}}
	}
	pg := uniqueName(t, "pg")
	p := newClientProducer(t, s.nsAddr, rmqproducer.WithGroupName(pg), rmqproducer.WithTrace(traceCfg()))
	groups := []string{uniqueName(t, "cgA"), uniqueName(t, "cgB")}
	a := newArrivals()
	for _, g := range groups {
		startArrivalConsumer(t, s.nsAddr, g, topic, a, nil, rmqconsumer.WithTrace(traceCfg()))
	}
	start := time.Now().Add(-time.Second)
	var ids []string
	for i := range 3 {
		m := primitive.NewMessage(topic, []byte(fmt.Sprintf("traced %d", i)))
		m.WithKeys([]string{fmt.Sprintf("order-%d", i)})
		m.WithProperty("id", fmt.Sprint(i))
		res, err := p.SendSync(context.Background(), m)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		ids = append(ids, res.MsgID)
	}
	waitFor(t, time.Minute, "every message consumed by both groups", func() bool {
		for i := range ids {
			if len(a.of(fmt.Sprint(i))) < len(groups) {
				return false
			}
		}
		return true
	})

	ns := map[string]string{"NAMESRV_ADDR": s.nsAddr}
	id := ids[1]
	// The trace dispatchers send asynchronously, each client's on its own
	// schedule (the consumers' legs may be stored before the producer's):
	// wait for the three legs.
	var out, errOut string
	var code int
	waitFor(t, time.Minute, "the send and both consumptions traced", func() bool {
		code, out, errOut = runAdminCmd(ns, "queryMsgTraceById", "-i", id)
		return code == 0 && strings.Count(out, "\nSub ") == 2 && strings.HasPrefix(out, "#Type ") &&
			regexp.MustCompile(`(?m)^Pub `).MatchString(out)
	})
	t.Logf("admin queryMsgTraceById -i %s:\n%s", id, out)
	when := `(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)`
	pub := regexp.MustCompile(`(?m)^Pub +` + regexp.QuoteMeta(pg) + ` +(\S*) +` + when + ` +(\d+)ms +success +` + regexp.QuoteMeta(s.brokAddr) + `$`)
	var times []string
	if m := pub.FindStringSubmatch(out); m == nil {
		t.Fatalf("no Pub line of group %s stored on %s:\n%s%s", pg, s.brokAddr, out, errOut)
	} else {
		times = append(times, m[2])
	}
	for _, g := range groups {
		sub := regexp.MustCompile(`(?m)^#Type +#ConsumerGroup +#ClientHost +#ConsumerTime +#CostTimes +#Status\s*\nSub +` +
			regexp.QuoteMeta(g) + ` +(\S*) +` + when + ` +(\d+)ms +success\s*$`)
		m := sub.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no Sub block of group %s:\n%s", g, out)
		}
		times = append(times, m[2])
	}
	for _, ts := range times {
		at, err := time.ParseInLocation(msgtrace.TimeLayout, ts, time.Local)
		if err != nil || at.Before(start.Truncate(time.Second)) || at.After(time.Now()) {
			t.Fatalf("a leg's time %s (%v) is not within the test's run [%s, now]", ts, err, start)
		}
	}

	// --json: every field, the client host as the Go client writes it.
	code, jsonOut, errOut := runAdminCmd(ns, "queryMsgTraceById", "-i", id, "--json")
	var legs []msgtrace.Leg
	if code != 0 || json.Unmarshal([]byte(jsonOut), &legs) != nil {
		t.Fatalf("--json: exit %d\n%s%s", code, jsonOut, errOut)
	}
	kinds := map[msgtrace.Type]int{}
	for _, l := range legs {
		kinds[l.Type]++
		if l.MsgID != id || l.Status != "success" || l.Timestamp == 0 {
			t.Fatalf("a leg of another message or not a success: %+v", l)
		}
		if l.Type == msgtrace.Pub && (l.Topic != topic || l.Keys != "order-1" || l.OffsetMsgID == "" || l.BodyLength != len("traced 1")) {
			t.Fatalf("the Pub leg: %+v", l)
		}
	}
	if kinds[msgtrace.Pub] != 1 || kinds[msgtrace.SubAfter] != 2 || len(legs) != 3 {
		t.Fatalf("legs by type %v, want one Pub and two SubAfter", kinds)
	}

	// Another trace topic holds none of it; a missing -i is a usage error.
	if code, _, errOut := runAdminCmd(ns, "queryMsgTraceById", "-i", id, "-t", "NoSuchTraceTopic"); code != 1 || errOut == "" {
		t.Fatalf("queryMsgTraceById on another topic: exit %d %s", code, errOut)
	}
	if code, _, _ := runAdminCmd(ns, "queryMsgTraceById"); code != 2 {
		t.Fatalf("queryMsgTraceById without -i: exit %d, want 2", code)
	}
	checkTraceConsole(t, chromium, httpAddr, s.brokAddr, topic, id, pg, groups)
}
