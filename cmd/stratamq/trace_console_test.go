package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// checkTraceConsole: the console's message page shows a message's trace.
// In headless Chromium the message traced (msgID, keys order-1) found by
// its key links to its trace, whose page lists the send (producer group,
// client host, store host, status) and each group's consumption (group,
// the same client host, status), as `admin queryMsgTraceById` prints
// them.
func checkTraceConsole(t *testing.T, chromium, httpAddr, brokAddr, topic, msgID, pg string, groups []string) {
	t.Helper()
	b := newBrowser(t, chromium, "http://"+httpAddr)
	b.open("/messages?topic="+topic+"&key=order-1", "")
	href := b.attr("a.m-trace", "href")
	if href != "/messages?trace="+msgID {
		t.Fatalf("the message's trace link is %q, want its client msgId %s", href, msgID)
	}
	b.open(href, "messages-trace")
	b.expect("#legs", strconv.Itoa(1+len(groups)))
	pub := `#trace tr[data-type="Pub"] `
	b.expect(pub+".t-type", "Pub")
	b.expect(pub+".t-group", pg)
	b.expect(pub+".t-status", "success")
	host := b.text(pub + ".t-host")
	if host == "" {
		t.Fatal("the send shows no client host")
	}
	for _, g := range groups {
		row := fmt.Sprintf(`#trace tr[data-type="SubAfter"][data-group="%s"] `, g)
		b.expect(row+".t-type", "Sub")
		b.expect(row+".t-status", "success")
		b.expect(row+".t-host", host) // one client process
	}
	if !strings.Contains(b.text("#trace tbody"), brokAddr) {
		t.Fatalf("the send's store host %s is not shown: %q", brokAddr, b.text("#trace tbody"))
	}
	today := time.Now().UTC().Format("2006-01-02")
	if ts := b.text(pub + ".t-time"); !strings.HasPrefix(ts, today) && !strings.HasPrefix(ts, time.Now().Add(-time.Hour).UTC().Format("2006-01-02")) {
		t.Fatalf("the send's time %q is not today's", ts)
	}
	b.open("/messages?trace=NOSUCHMESSAGE", "")
	b.expect("#legs", "0")
}
