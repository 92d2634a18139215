package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/chromedp/chromedp"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// consoleSent is what the producer learned of one message it sent.
type consoleSent struct {
	queue  int
	offset int64
	phys   int64 // from the offset msgId
	msgID  string
	body   string
	key    string
}

// TestConsoleChromium (issue 13 item 3, "the console test loads every page
// in headless Chromium and checks the figures it shows against the
// broker's own state"): a real `stratamq serve` with 1 MiB segments
// dropped locally once uploaded; the official client sends big messages
// (which end up only in the bucket) and small ones with keys, an official
// push consumer reads them all and leaves, and more messages make its
// group lag. Then Chromium loads every page, and each figure is compared
// with what the broker answers over the protocol (GET_MIN_OFFSET,
// GET_MAX_OFFSET, QUERY_CONSUMER_OFFSET, GET_BROKER_RUNTIME_INFO,
// STRATAMQ_TIER_STATUS), with /metrics, and with what the producer sent
// (bodies, keys, msgIds and the commitlog offsets they encode).
//
// With STRATAMQ_CONSOLE_SCREENSHOTS=dir it writes a PNG of each page there
// (docs/console/ holds the ones checked in).
func TestConsoleChromium(t *testing.T) {
	chromium := findChromium(t)
	dir := t.TempDir()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := startServe(t, filepath.Join(dir, "data"), map[string]string{
		"STRATAMQ_HTTP_LISTEN":     httpAddr,
		"STRATAMQ_BUCKET":          "file://" + filepath.Join(dir, "bucket"),
		"STRATAMQ_SEGMENT_SIZE":    "1MiB",
		"STRATAMQ_LOCAL_RETENTION": "0",
	})
	topic := "ConsoleOrders"
	s.createTopic(topic, 4)
	// p compresses bodies past 4 KiB, as clients do by default; raw never
	// does (the big messages must fill segments).
	p := newClientProducer(t, s.nsAddr)
	raw := newClientProducer(t, s.nsAddr, rmqproducer.WithCompressMsgBodyOverHowmuch(1<<30))
	var sent []consoleSent
	sendWith := func(p rocketmq.Producer, body, key string) consoleSent {
		t.Helper()
		m := primitive.NewMessage(topic, []byte(body))
		if key != "" {
			m.WithKeys([]string{key})
		}
		m.WithTag("console")
		r, err := p.SendSync(context.Background(), m)
		if err != nil || r.Status != primitive.SendOK {
			t.Fatalf("send: %v %v", r, err)
		}
		_, phys, err := store.DecodeMessageID(r.OffsetMsgID)
		if err != nil {
			t.Fatalf("offset msgId %q: %v", r.OffsetMsgID, err)
		}
		c := consoleSent{queue: r.MessageQueue.QueueId, offset: r.QueueOffset, phys: phys, msgID: r.OffsetMsgID, body: body, key: key}
		sent = append(sent, c)
		return c
	}
	send := func(body, key string) consoleSent { t.Helper(); return sendWith(p, body, key) }
	// Big messages first (≈ 2.6 MiB: the first two segments, uploaded and
	// dropped), then small ones with keys, one of them markup.
	for i := range 13 {
		sendWith(raw, strings.Repeat(fmt.Sprintf("big-%02d|", i), 200<<10/7), "")
	}
	for i := range 24 {
		body := fmt.Sprintf("order %d: {\"sku\": \"A-%d\", \"qty\": %d}", i, i*7, i%4+1)
		switch i {
		case 5:
			body = `<script>document.title="pwned"</script><b>bold?</b>`
		case 10: // compressed by the client: 12 KiB of text in a few hundred bytes
			body = strings.Repeat(fmt.Sprintf("order %d line; ", i), 12<<10/16)
		}
		send(body, fmt.Sprintf("order-%d", i%5))
	}
	var last broker.TierStatus
	defer func() {
		if t.Failed() {
			t.Logf("last tier status: %+v", last)
		}
	}()
	waitFor(t, 60*time.Second, "every sealed segment uploaded and dropped", func() bool {
		last = tierStatus(t, s.brokAddr)
		return last.LocalSegments == 1 && last.PendingSegments == 0 && last.BucketSegments >= 2
	})

	// A group reads everything and leaves; 8 more messages make it lag.
	group := "ConsoleBilling"
	var consumed atomic.Int64
	c, err := rocketmq.NewPushConsumer(rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver([]string{s.nsAddr})),
		rmqconsumer.WithGroupName(group), rmqconsumer.WithInstance("console-billing"),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset), noSpanFlowControl)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(topic, rmqconsumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
		consumed.Add(int64(len(msgs)))
		return rmqconsumer.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, c, s.brokAddr, group, topic, 4, int64(len(sent)))
	quietGroup(s.nsAddr, topic, group)
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the consumer gone", func() bool { return len(consumerIDs(t, s.brokAddr, group)) == 0 })
	// Messages stored from here on are newer than since (the wait makes
	// the millisecond change).
	since := time.Now().UnixMilli() + 1
	waitFor(t, time.Second, "the clock to pass a millisecond", func() bool { return time.Now().UnixMilli() > since })
	late := map[int]int64{} // queue → first offset sent after since
	for i := range 8 {
		m := send(fmt.Sprintf("late %d", i), "")
		if _, ok := late[m.queue]; !ok {
			late[m.queue] = m.offset
		}
	}

	// The broker's own state, over the protocol.
	type queueState struct{ min, max, committed int64 }
	qs := make([]queueState, 4)
	for q := range 4 {
		qs[q] = queueState{min: queueOffsetOf(t, s.brokAddr, topic, q, remoting.GetMinOffset),
			max: queueOffsetOf(t, s.brokAddr, topic, q, remoting.GetMaxOffset), committed: committedOffset(t, s.brokAddr, group, topic, q)}
	}
	st := tierStatus(t, s.brokAddr)
	runtime := runtimeInfo(t, s.brokAddr)
	// Where each queue's local range starts and its uploaded range ends:
	// the first message sent at or above the local log's start and the
	// bucket's end, by the commitlog offsets the msgIds encode.
	uploadedEnd := st.MinPhysOffset + st.BucketLogBytes // the commit log objects cover [min, end) whole
	localFrom, bucketTo := make([]int64, 4), make([]int64, 4)
	for q := range 4 {
		localFrom[q], bucketTo[q] = qs[q].max, qs[q].max
		for _, m := range sent {
			if m.queue == q && m.phys >= st.LocalFrom {
				localFrom[q] = min(localFrom[q], m.offset)
			}
			if m.queue == q && m.phys >= uploadedEnd {
				bucketTo[q] = min(bucketTo[q], m.offset)
			}
		}
	}

	b := newBrowser(t, chromium, "http://"+httpAddr)

	// The broker page.
	b.open("/", "overview")
	b.expect("#st-role", runtime["brokerRole"])
	b.expect("#st-epoch", runtime["epoch"])
	b.expect("#st-cluster", "DefaultCluster")
	b.expect("#st-name", "broker-a")
	b.expect("#st-addr", s.brokAddr)
	boot, _ := strconv.ParseInt(runtime["bootTimestamp"], 10, 64)
	b.expect("#st-since", time.UnixMilli(boot).UTC().Format("2006-01-02 15:04:05 UTC"))
	b.expect("#st-protocol", strconv.Itoa(broker.Version))
	b.expect("#st-max", strconv.FormatInt(st.MaxPhysOffset, 10))
	b.expect("#st-min", strconv.FormatInt(st.MinPhysOffset, 10))
	b.expect("#st-groups", "0") // the consumer left
	if up := b.text("#st-uptime"); up == "" || strings.HasPrefix(up, "-") {
		t.Fatalf("uptime %q", up)
	}

	// Topics: the topic's message count is its queues' max − min.
	b.open("/topics", "topics")
	var total int64
	for _, q := range qs {
		total += q.max - q.min
	}
	b.expect(`tr[data-topic="`+topic+`"] .t-messages`, strconv.FormatInt(total, 10))

	// The topic: each queue's range, split where the store splits it.
	b.open("/topic?topic="+topic, "topic")
	split := false
	for q := range 4 {
		row := fmt.Sprintf("#q-%d ", q)
		b.expect(row+".q-min", strconv.FormatInt(qs[q].min, 10))
		b.expect(row+".q-max", strconv.FormatInt(qs[q].max, 10))
		b.expect(row+".q-local", strconv.FormatInt(localFrom[q], 10))
		b.expect(row+".q-bucket", strconv.FormatInt(bucketTo[q], 10))
		b.expect(row+".q-cold", strconv.FormatInt(localFrom[q]-qs[q].min, 10))
		split = split || localFrom[q] > qs[q].min
	}
	if !split {
		t.Fatal("no queue has a part only in the bucket: the test proves nothing about the split")
	}

	// The lagging group: committed offsets and lag per queue, as the
	// broker and /metrics have them.
	b.open("/groups", "groups")
	var lag int64
	for q := range 4 {
		want := qs[q].max - max(qs[q].committed, qs[q].min)
		lag += want
		row := fmt.Sprintf(`table.lag[data-group="%s"] tr[data-topic="%s"][data-queue="%d"] `, group, topic, q)
		b.expect(row+".l-committed", strconv.FormatInt(qs[q].committed, 10))
		b.expect(row+".l-max", strconv.FormatInt(qs[q].max, 10))
		b.expect(row+".l-lag", strconv.FormatInt(want, 10))
		series := fmt.Sprintf(`rocketmq_consumer_lag_messages{consumer_group="%s",queue_id="%d",topic="%s"}`, group, q, topic)
		if v, err := scrapeMetric(httpAddr, series); err != nil || int64(v) != want {
			t.Fatalf("%s = %v (%v), console and broker say %d", series, v, err, want)
		}
	}
	if lag != 8 {
		t.Fatalf("the group lags %d, want the 8 late messages", lag)
	}
	b.expect(`#groups tr[data-group="`+group+`"] .g-lag`, "8")
	b.expect(`#groups tr[data-group="`+group+`"] .g-clients`, "0")

	// Tier: the admin command's figures; request counts between the
	// /metrics values read before and after the page.
	getsBefore, _ := scrapeMetric(httpAddr, "rocketmq_tiered_store_cold_get_total")
	b.open("/tier", "tier")
	getsAfter, _ := scrapeMetric(httpAddr, "rocketmq_tiered_store_cold_get_total")
	st2 := tierStatus(t, s.brokAddr)
	if st2.LocalBytes != st.LocalBytes || st2.BucketBytes != st.BucketBytes || st2.OldestRetained != st.OldestRetained {
		t.Fatalf("the tier moved during the test: %+v then %+v", st, st2)
	}
	for sel, v := range map[string]int64{
		"#tier-localSegments": int64(st.LocalSegments), "#tier-localBytes": st.LocalBytes, "#tier-bucketSegments": int64(st.BucketSegments),
		"#tier-bucketLogBytes": st.BucketLogBytes, "#tier-bucketBytes": st.BucketBytes, "#tier-pending": st.PendingSegments,
		"#tier-lagBytes": st.UploadLagBytes, "#tier-oldestMs": st.OldestRetained, "#tier-localFrom": st.LocalFrom,
		"#tier-min": st.MinPhysOffset, "#tier-max": st.MaxPhysOffset, "#tier-expired": int64(st.ExpiredRanges),
	} {
		b.expect(sel, strconv.FormatInt(v, 10))
	}
	b.expect("#tier-oldest", time.UnixMilli(st.OldestRetained).UTC().Format("2006-01-02 15:04:05.000 UTC"))
	uploads, err := scrapeMetric(httpAddr, "rocketmq_tiered_store_upload_objects_total")
	if err != nil {
		t.Fatal(err)
	}
	b.expect("#tier-req-uploads", strconv.FormatInt(int64(uploads), 10))
	if gets := b.number("#tier-req-gets"); gets < int64(getsBefore) || gets > int64(getsAfter) || gets == 0 {
		t.Fatalf("cold GETs shown %d, /metrics said %v before and %v after", gets, getsBefore, getsAfter)
	}

	// Messages: the first page of a queue whose head is only in the
	// bucket, then the page where its local range starts.
	var q0 int
	for q := range 4 {
		if localFrom[q] > qs[q].min {
			q0 = q
			break
		}
	}
	bodyOf := map[[2]int64]consoleSent{}
	for _, m := range sent {
		bodyOf[[2]int64{int64(m.queue), m.offset}] = m
	}
	checkMessage := func(q int, off int64, cold bool) {
		t.Helper()
		m := bodyOf[[2]int64{int64(q), off}]
		art := fmt.Sprintf("#m-%d-%d ", q, off)
		b.expect(art+".m-msgid", m.msgID)
		if len(m.body) > 4096 && !strings.HasPrefix(m.body, "big-") {
			b.expect(art+".m-compressed", "zlib-compressed") // its size is the stored one
		} else {
			b.expect(art+".m-size", strconv.Itoa(len(m.body)))
		}
		want := m.body[:min(len(m.body), broker.ConsoleMaxPreview)]
		if got := b.text(art + ".m-body"); got != want {
			t.Fatalf("message %d/%d: body preview %q…, want %q…", q, off, got[:min(len(got), 40)], want[:min(len(want), 40)])
		}
		b.expect(art+`.m-prop[data-key="TAGS"]`, "console")
		badge := "local"
		if cold {
			badge = "bucket"
		}
		b.expect(art+".badge", strings.ToUpper(badge))
	}
	b.open(fmt.Sprintf("/messages?topic=%s&queue=%d&n=3", topic, q0), "messages-queue")
	checkMessage(q0, qs[q0].min, true)
	b.open(fmt.Sprintf("/messages?topic=%s&queue=%d&offset=%d&n=4", topic, q0, localFrom[q0]-1), "")
	checkMessage(q0, localFrom[q0]-1, true)
	checkMessage(q0, localFrom[q0], false)

	// By key: every message sent with it, the markup shown as text and
	// not run (the pages carry no script at all).
	var withKey []consoleSent
	for _, m := range sent {
		if m.key == "order-0" {
			withKey = append(withKey, m)
		}
	}
	b.open("/messages?topic="+topic+"&key=order-0", "messages-key")
	b.expect("#found", strconv.Itoa(len(withKey)))
	for _, m := range withKey {
		checkMessage(m.queue, m.offset, false)
		b.expect(fmt.Sprintf(`#m-%d-%d .m-prop[data-key="KEYS"]`, m.queue, m.offset), "order-0")
	}
	scripts, title := b.eval(`document.querySelectorAll("script").length`), b.title()
	if scripts != 0 || title == "pwned" {
		t.Fatalf("%d script elements, title %q: the markup body ran", scripts, title)
	}

	// By time: the first message stored at or after since is the first
	// late one of the queue.
	for q, off := range late {
		b.open(fmt.Sprintf("/messages?topic=%s&queue=%d&time=%d", topic, q, since), "")
		b.expect(fmt.Sprintf("#m-%d-%d .m-offset", q, off), strconv.FormatInt(off, 10))
		if first := b.attr("article.msg", "data-offset"); first != strconv.FormatInt(off, 10) {
			t.Fatalf("by time on queue %d: the first message is at %s, want %d", q, first, off)
		}
		break
	}

	// By msgId: a big message from the bucket, cut to its preview.
	big := sent[0]
	b.open("/messages?msgId="+big.msgID, "messages-id")
	checkMessage(big.queue, big.offset, true)
	b.expect(fmt.Sprintf("#m-%d-%d .m-size", big.queue, big.offset), strconv.Itoa(len(big.body)))

	// The browser's form alone.
	b.open("/messages", "messages-form")
	b.expect("#form-key h3", "Find by key")
	if n := b.attr("#form-queue input[name=n]", "value"); n != "16" {
		t.Fatalf("the form's page size is %q", n)
	}

	// A bad parameter is a readable 400 page.
	b.open("/messages?topic="+topic+"&queue=99", "error")
	b.expect("#error-status", "400 Bad Request")
	b.expect("#error-message", "parameter queue=99 is out of range: want 0..3")
}

// findChromium is Debian's chromium; the test fails without it (CI
// installs it: .ci/run).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the console test needs Chromium, and there is none on PATH: install it with `apt-get install -y chromium` (Debian; .ci/run does this)")
	return ""
}

// browser is a headless Chromium on a fresh profile, talking only to the
// console on loopback; every action runs under a deadline.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	shot string // STRATAMQ_CONSOLE_SCREENSHOTS
}

func newBrowser(t *testing.T, chromium, base string) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first Do starts the browser, which lives as long as its
	// context: it gets no timeout of its own, the wait for it does.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start %s: %v", chromium, err)
		}
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("%s did not start within 60s", chromium)
	}
	return &browser{t: t, ctx: ctx, base: base, shot: os.Getenv("STRATAMQ_CONSOLE_SCREENSHOTS")}
}

// deadline is the context of one browser action.
func (b *browser) deadline() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, 30*time.Second)
}

// open loads a console page, checks its HTTP status (200, or 400 for
// the error page) and waits for its heading; with shot set and a name
// given, it saves a screenshot as <name>.png.
func (b *browser) open(path, name string) {
	b.t.Helper()
	ctx, cancel := b.deadline()
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(b.base+path))
	if err != nil {
		b.t.Fatalf("load %s: %v", path, err)
	}
	want := int64(200)
	if name == "error" {
		want = 400
	}
	if resp == nil || resp.Status != want {
		var got any = "no response"
		if resp != nil {
			got = resp.Status
		}
		b.t.Fatalf("load %s: HTTP %v, want %d", path, got, want)
	}
	if err := chromedp.Do(ctx, chromedp.WaitReady(chromedp.CSS("main h1"))); err != nil {
		b.t.Fatalf("load %s: %v", path, err)
	}
	if b.shot != "" && name != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			b.t.Fatalf("screenshot of %s: %v", path, err)
		}
		if err := os.WriteFile(filepath.Join(b.shot, name+".png"), png, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
}

// text is the visible text of the first element sel selects (CSS), once
// it is visible.
func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := b.deadline()
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

func (b *browser) attr(sel, name string) string {
	b.t.Helper()
	ctx, cancel := b.deadline()
	defer cancel()
	a, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
	if err != nil || !a.Exists {
		b.t.Fatalf("attribute %s of %s: %v (exists %v)", name, sel, err, a.Exists)
	}
	return a.Value
}

// eval evaluates a JavaScript expression in the page (the test's own
// probe: the console's pages run none).
func (b *browser) eval(expr string) int {
	b.t.Helper()
	ctx, cancel := b.deadline()
	defer cancel()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return n
}

func (b *browser) title() string {
	b.t.Helper()
	ctx, cancel := b.deadline()
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		b.t.Fatalf("title: %v", err)
	}
	return s
}

func (b *browser) number(sel string) int64 {
	b.t.Helper()
	s := b.text(sel)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		b.t.Fatalf("%s shows %q, not a number", sel, s)
	}
	return n
}

// expect fails unless the element's text is want.
func (b *browser) expect(sel, want string) {
	b.t.Helper()
	if got := b.text(sel); got != want {
		b.t.Fatalf("%s shows %q, want %q", sel, got, want)
	}
}

// tierStatus is the broker's STRATAMQ_TIER_STATUS answer.
func tierStatus(t *testing.T, addr string) broker.TierStatus {
	t.Helper()
	resp, ok := ask(addr, remoting.NewRequest(remoting.TierStatus, nil, nil), 10*time.Second)
	if !ok {
		t.Fatal("STRATAMQ_TIER_STATUS failed")
	}
	var st broker.TierStatus
	if err := json.Unmarshal(resp.Body, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// runtimeInfo is the broker's GET_BROKER_RUNTIME_INFO table.
func runtimeInfo(t *testing.T, addr string) map[string]string {
	t.Helper()
	resp, ok := ask(addr, remoting.NewRequest(remoting.GetBrokerRuntimeInfo, nil, nil), 10*time.Second)
	if !ok {
		t.Fatal("GET_BROKER_RUNTIME_INFO failed")
	}
	var kv remoting.KVTable
	if err := json.Unmarshal(resp.Body, &kv); err != nil {
		t.Fatal(err)
	}
	return kv.Table
}

// queueOffsetOf asks the broker for a queue's min or max offset.
func queueOffsetOf(t *testing.T, addr, topic string, queue int, code remoting.RequestCode) int64 {
	t.Helper()
	h := map[string]string{"topic": topic, "queueId": strconv.Itoa(queue)}
	resp, ok := ask(addr, remoting.NewRequest(code, h, nil), 5*time.Second)
	if !ok {
		t.Fatalf("%v of %s/%d failed", code, topic, queue)
	}
	n, err := strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
