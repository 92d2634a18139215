package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"
)

// TestConsoleTraceChromium: the console's message page shows a message's
// trace. The official Go client with tracing on sends a message and a
// push consumer group consumes it; in headless Chromium the message found
// by its key links to its trace, whose page lists the send (producer
// group, client host, store host, status) and the consumption (consumer
// group, status), as `admin queryMsgTraceById` prints them.
func TestConsoleTraceChromium(t *testing.T) {
	chromium := findChromium(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := startServe(t, t.TempDir(), map[string]string{"STRATAMQ_HTTP_LISTEN": httpAddr, "STRATAMQ_TRACE_TOPIC_ENABLE": "true"})
	topic := uniqueName(t, "TracedC")
	s.createTopic(topic, 1)
	traceCfg := func() *primitive.TraceConfig {
		return &primitive.TraceConfig{GroupName: uniqueName(t, "tg"), NamesrvAddrs: []string{s.nsAddr}}
	}
	pg, cg := uniqueName(t, "pg"), uniqueName(t, "cg")
	p := newClientProducer(t, s.nsAddr, rmqproducer.WithGroupName(pg), rmqproducer.WithTrace(traceCfg()))
	a := newArrivals()
	startArrivalConsumer(t, s.nsAddr, cg, topic, a, nil, rmqconsumer.WithTrace(traceCfg()))
	m := primitive.NewMessage(topic, []byte("traced in the console"))
	m.WithKeys([]string{"trace-key"})
	m.WithProperty("id", "0")
	res, err := p.SendSync(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the message consumed", func() bool { return len(a.of("0")) > 0 })
	ns := map[string]string{"NAMESRV_ADDR": s.nsAddr}
	waitFor(t, time.Minute, "the send and the consumption traced", func() bool {
		code, out, _ := runAdminCmd(ns, "queryMsgTraceById", "-i", res.MsgID)
		return code == 0 && strings.Contains(out, "\nSub ")
	})

	b := newBrowser(t, chromium, "http://"+httpAddr)
	b.open("/messages?topic="+topic+"&key=trace-key", "")
	href := b.attr("a.m-trace", "href")
	if href != "/messages?trace="+res.MsgID {
		t.Fatalf("the message's trace link is %q, want its client msgId %s", href, res.MsgID)
	}
	b.open(href, "messages-trace")
	b.expect("#legs", "2")
	pub, sub := `#trace tr[data-type="Pub"] `, `#trace tr[data-type="SubAfter"] `
	b.expect(pub+".t-type", "Pub")
	b.expect(pub+".t-group", pg)
	b.expect(pub+".t-status", "success")
	b.expect(sub+".t-type", "Sub")
	b.expect(sub+".t-group", cg)
	b.expect(sub+".t-status", "success")
	if host := b.text(pub + ".t-host"); host == "" || host != b.text(sub+".t-host") {
		t.Fatalf("client hosts: send %q, consumption %q (one client process)", host, b.text(sub+".t-host"))
	}
	if !strings.Contains(b.text("#trace tbody"), s.brokAddr) {
		t.Fatalf("the send's store host %s is not shown: %q", s.brokAddr, b.text("#trace tbody"))
	}
	for _, sel := range []string{pub + ".t-time", sub + ".t-time"} {
		if ts := b.text(sel); !strings.HasPrefix(ts, time.Now().UTC().Format("2006-01-02")) && !strings.HasPrefix(ts, time.Now().Add(-time.Hour).UTC().Format("2006-01-02")) {
			t.Fatalf("%s shows %q, not today's date", sel, ts)
		}
	}
	b.open("/messages?trace=NOSUCHMESSAGE", "")
	b.expect("#legs", "0")
}
