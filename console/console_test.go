package console

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// testBroker runs a real broker (loopback, an in-memory bucket) for the
// handler tests, and a client to send to it.
type testBroker struct {
	b  *broker.Broker
	cl *remoting.Client
}

func startBroker(t *testing.T) *testBroker { return startBrokerWith(t, tier.NewMem()) }

// startBrokerWith runs a broker on bucket (nil: none); opts change its
// config.
func startBrokerWith(t *testing.T, bucket tier.Bucket, opts ...func(*broker.Config)) *testBroker {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20}
	for _, o := range opts {
		o(&cfg)
	}
	b, err := broker.New(cfg, broker.Deps{Logger: log, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	t.Cleanup(func() {
		cl.Close()
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("broker did not stop within 30s")
		}
	})
	return &testBroker{b: b, cl: cl}
}

// send stores one message in topic/queue and returns its queue offset.
func (tb *testBroker) send(t *testing.T, topic string, queue int, body []byte, props string) int64 {
	t.Helper()
	h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: topic, DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 4, QueueID: int32(queue), BornTimestamp: time.Now().UnixMilli(), Properties: props}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := tb.cl.Invoke(ctx, tb.b.Addr().String(), remoting.NewRequest(remoting.SendMessage, h.Encode(), body))
	if err != nil || resp.Code != int32(remoting.Success) {
		t.Fatalf("send to %s/%d: %v %v", topic, queue, resp, err)
	}
	off, err := strconv.ParseInt(resp.ExtFields["queueOffset"], 10, 64)
	if err != nil {
		t.Fatalf("send response %v: %v", resp.ExtFields, err)
	}
	return off
}

// testHosts are the host names the tests' handlers answer to:
// httptest.NewRequest's Host.
var testHosts = []string{"example.com"}

func newHandler(tb *testBroker) *Handler {
	return New(Config{Version: "test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Broker: func() Broker { return tb.b }, Hosts: testHosts})
}

// get serves one request and returns the status and body.
func get(t *testing.T, h http.Handler, method, target string) (int, string, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec.Code, rec.Body.String(), rec.Header()
}

// TestConsoleEscapesBodiesAndProperties: a body, a key and a property
// holding markup are shown as text; no page carries a script element.
func TestConsoleEscapesBodiesAndProperties(t *testing.T) {
	tb := startBroker(t)
	evil := `<script>alert("body")</script><img src=x onerror=alert(1)>&amp;`
	props := "KEYS\x01<b>key</b>\x02evil\x01\"><script>alert('prop')</script>\x02"
	tb.send(t, "EscT", 0, []byte(evil), props)
	h := newHandler(tb)

	code, body, hdr := get(t, h, http.MethodGet, "/messages?topic=EscT&queue=0")
	if code != http.StatusOK {
		t.Fatalf("messages: %d\n%s", code, body)
	}
	if !strings.Contains(body, `&lt;script&gt;alert(&#34;body&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&amp;amp;`) {
		t.Fatalf("the body is not shown escaped:\n%s", body)
	}
	if !strings.Contains(body, `&lt;b&gt;key&lt;/b&gt;`) || !strings.Contains(body, `&#34;&gt;&lt;script&gt;alert(&#39;prop&#39;)&lt;/script&gt;`) {
		t.Fatalf("the properties are not shown escaped:\n%s", body)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Fatalf("CSP %q", csp)
	}
	// The key search echoes the key in the form and the heading: escaped.
	code, body, _ = get(t, h, http.MethodGet, "/messages?"+url.Values{"topic": {"EscT"}, "key": {"<b>key</b>"}}.Encode())
	if code != http.StatusOK || !strings.Contains(body, `<span id="found">1</span>`) {
		t.Fatalf("by key: %d\n%s", code, body)
	}
	for _, target := range []string{"/", "/topics", "/topic?topic=EscT", "/groups", "/tier", "/messages",
		"/messages?topic=EscT&queue=0", "/messages?" + url.Values{"topic": {"EscT"}, "key": {"<b>key</b>"}}.Encode(),
		"/messages?topic=EscT&queue=0&offset=%3Cscript%3E"} {
		_, body, _ := get(t, h, http.MethodGet, target)
		if strings.Contains(strings.ToLower(body), "<script") || strings.Contains(body, "<b>key") {
			t.Fatalf("%s carries unescaped markup:\n%s", target, body)
		}
	}
}

// TestConsoleBadParams: every malformed, unknown or out-of-range query
// parameter is a 400 that names it; unknown pages and topics are 404s.
func TestConsoleBadParams(t *testing.T) {
	tb := startBroker(t)
	tb.send(t, "ParamT", 0, []byte("x"), "")
	h := newHandler(tb)
	f := func(target string, status int, want string) {
		t.Helper()
		code, body, _ := get(t, h, http.MethodGet, target)
		if code != status || !strings.Contains(body, want) {
			t.Fatalf("%s: %d, want %d with %q:\n%s", target, code, status, want, body)
		}
	}
	f("/messages?topic=ParamT&queue=abc", 400, "parameter queue=&#34;abc&#34; is not a whole number")
	f("/messages?topic=ParamT&queue=-1", 400, "parameter queue=-1 is out of range")
	f("/messages?topic=ParamT&queue=4", 400, "parameter queue=4 is out of range: want 0..3")
	f("/messages?topic=ParamT&queue=99999999999999999999", 400, "is not a whole number")
	f("/messages?topic=ParamT", 400, "parameter queue is missing")
	f("/messages?topic=ParamT&queue=0&n=65", 400, "parameter n=65 is out of range: want 1..64")
	f("/messages?topic=ParamT&queue=0&n=0", 400, "parameter n=0 is out of range")
	f("/messages?topic=ParamT&queue=0&offset=-5", 400, "parameter offset=-5 is out of range")
	f("/messages?topic=ParamT&queue=0&time=yesterday", 400, "parameter time=&#34;yesterday&#34; is not a time")
	f("/messages?topic=ParamT&queue=0&time=99999999999999999", 400, "parameter time=99999999999999999 is out of range")
	f("/messages?topic=ParamT&queue=0&offset=1&time=1", 400, "give an offset or a time, not both")
	f("/messages?topic=a/b&queue=0", 400, "parameter topic:")
	f("/messages?topic="+strings.Repeat("t", 200)+"&queue=0", 400, "longer than topic max length")
	f("/messages?topic=ParamT&key=a%00b", 400, "parameter key=&#34;a\\x00b&#34; holds characters that are not printable")
	f("/messages?topic=ParamT&key="+strings.Repeat("k", 600), 400, "parameter key is 600 bytes long")
	f("/messages?topic=ParamT&key=k&queue=0", 400, "parameter queue does not go with key")
	f("/messages?msgId=zz", 400, "is not a message id")
	f("/messages?msgId=0A0000010000000000000000000000FF", 404, "no message with id")
	f("/messages?topic=ParamT&queue=0&bogus=1", 400, "unknown parameter &#34;bogus&#34;")
	f("/messages?topic=ParamT&topic=Other&queue=0", 400, "parameter topic is given 2 times")
	f("/messages?topic=%zz", 400, "the query string does not decode")
	f("/messages?topic=NoSuchT&queue=0", 404, "the broker has no topic &#34;NoSuchT&#34;")
	f("/topic", 400, "parameter topic is missing")
	f("/topic?topic=NoSuchT", 404, "the broker has no topic")
	f("/groups?group=a%20b", 400, "parameter group:")
	f("/groups?group=nobody", 404, "the broker knows no consumer group")
	f("/tier?x=1", 400, "unknown parameter &#34;x&#34;: this page takes none")
	f("/?"+strings.Repeat("a", 5000), 400, "at most 4096 are accepted")
	f("/nope", 404, "no console page at /nope")
	f("/static/nope.css", 404, "no console page")

	// No broker (between generations): 503.
	none := New(Config{Broker: func() Broker { return nil }, Hosts: testHosts})
	if code, body, _ := get(t, none, http.MethodGet, "/topics"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not running") {
		t.Fatalf("without a broker: %d\n%s", code, body)
	}
}

// TestConsoleReadOnly: GET and HEAD are served, POST only on the write
// routes (/login, /logout, /action); HEAD has no body.
func TestConsoleReadOnly(t *testing.T) {
	tb := startBroker(t)
	h := newHandler(tb)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions, "PROPFIND"} {
		for _, target := range []string{"/", "/messages?topic=T&queue=0", "/static/console.css", "/nope"} {
			code, body, hdr := get(t, h, m, target)
			if code != http.StatusMethodNotAllowed || hdr.Get("Allow") != "GET, HEAD, POST" || !strings.Contains(body, "not allowed") {
				t.Fatalf("%s %s: %d %q allow %q", m, target, code, body, hdr.Get("Allow"))
			}
		}
	}
	// A real server for HEAD: net/http drops the body.
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Head(srv.URL + "/topics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(b) != 0 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("HEAD: %d, %d body bytes, %q", resp.StatusCode, len(b), resp.Header.Get("Content-Type"))
	}
	if code, body, hdr := get(t, h, http.MethodGet, "/static/console.css"); code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/css") || !strings.Contains(body, "body {") {
		t.Fatalf("stylesheet: %d %q", code, hdr.Get("Content-Type"))
	}
}

// TestConsoleBigBodyBounded: a 3 MiB body is shown as its first 4 KiB, and
// a page of such messages stays small.
func TestConsoleBigBodyBounded(t *testing.T) {
	tb := startBroker(t)
	big := []byte(strings.Repeat("0123456789abcdef", 3<<20/16))
	for range 3 {
		tb.send(t, "BigT", 0, big, "")
	}
	h := newHandler(tb)
	code, body, _ := get(t, h, http.MethodGet, "/messages?topic=BigT&queue=0&n=64")
	if code != http.StatusOK || strings.Count(body, `<span class="m-size">3145728</span> bytes, the first 4096 shown`) != 3 {
		t.Fatalf("big bodies: %d\n%.3000s", code, body)
	}
	if len(body) > 64<<10 {
		t.Fatalf("a page of 3 big messages is %d bytes", len(body))
	}
}

// TestConsoleHonoursContext: a message page waiting for a read slot gives
// up when its time is over (504), and a request whose client left gets
// nothing written.
func TestConsoleHonoursContext(t *testing.T) {
	tb := startBroker(t)
	tb.send(t, "CtxT", 0, []byte("x"), "")
	h := New(Config{Broker: func() Broker { return tb.b }, Timeout: 200 * time.Millisecond, Hosts: testHosts,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for range maxMessagePages {
		h.sem <- struct{}{}
	}
	start := time.Now()
	code, body, _ := get(t, h, http.MethodGet, "/messages?topic=CtxT&queue=0")
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "longer than 200ms") || time.Since(start) > 5*time.Second {
		t.Fatalf("a page with no read slot: %d after %s\n%s", code, time.Since(start), body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/messages?topic=CtxT&queue=0", nil).WithContext(ctx))
	if rec.Body.Len() != 0 {
		t.Fatalf("a gone client got %d bytes", rec.Body.Len())
	}
	for range maxMessagePages {
		<-h.sem
	}
	if code, _, _ := get(t, h, http.MethodGet, "/messages?topic=CtxT&queue=0"); code != http.StatusOK {
		t.Fatalf("with free slots: %d", code)
	}
}

// TestConsoleBrowse: paging through a queue, by time, by key and by id
// shows the messages the broker stored there.
func TestConsoleBrowse(t *testing.T) {
	tb := startBroker(t)
	for i := range 10 {
		tb.send(t, "BrowseT", 1, []byte("body-"+strconv.Itoa(i)), "KEYS\x01key-"+strconv.Itoa(i%3)+"\x02")
	}
	h := newHandler(tb)
	code, body, _ := get(t, h, http.MethodGet, "/messages?topic=BrowseT&queue=1&offset=4&n=3")
	if code != 200 || !strings.Contains(body, `id="m-1-4"`) || !strings.Contains(body, `id="m-1-6"`) || strings.Contains(body, `id="m-1-7"`) ||
		!strings.Contains(body, ">body-5</pre>") || !strings.Contains(body, `offset=7&amp;n=3">next`) || !strings.Contains(body, `offset=1&amp;n=3">« previous`) {
		t.Fatalf("page at 4:\n%s", body)
	}
	code, body, _ = get(t, h, http.MethodGet, "/messages?topic=BrowseT&key=key-1&n=64")
	if code != 200 || strings.Count(body, `<article class="msg"`) != 3 || !strings.Contains(body, ">body-7</pre>") {
		t.Fatalf("by key:\n%s", body)
	}
	code, body, _ = get(t, h, http.MethodGet, "/messages?topic=BrowseT&queue=1&time=2000-01-01T00:00:00Z")
	if code != 200 || strings.Count(body, `<article class="msg"`) != 10 {
		t.Fatalf("by an old time:\n%s", body)
	}
	msgs, _, err := tb.b.ConsoleMessages(context.Background(), "BrowseT", 1, 9, 1, 0)
	if err != nil || len(msgs) != 1 {
		t.Fatal(msgs, err)
	}
	code, body, _ = get(t, h, http.MethodGet, "/messages?msgId="+strings.ToLower(msgs[0].MsgID))
	if code != 200 || !strings.Contains(body, ">body-9</pre>") {
		t.Fatalf("by id:\n%s", body)
	}
	code, body, _ = get(t, h, http.MethodGet, "/topic?topic=BrowseT")
	if code != 200 || !strings.Contains(body, `<td class="num q-max">10</td>`) {
		t.Fatalf("topic:\n%s", body)
	}
	// Every page renders whole.
	for _, target := range []string{"/", "/topics", "/topic?topic=BrowseT", "/groups", "/tier", "/messages", "/messages?topic=BrowseT&queue=1"} {
		if code, body, _ := get(t, h, http.MethodGet, target); code != 200 || !strings.Contains(body, "</main>") || !strings.Contains(body, "</html>") {
			t.Fatalf("%s: %d\n%s", target, code, body)
		}
	}
	if _, body, _ := get(t, h, http.MethodGet, "/"); !strings.Contains(body, `<span id="st-binary">test</span>`) {
		t.Fatalf("overview without the version:\n%s", body)
	}
}

// TestConsoleNoBucket: without a bucket the pages say so and show no
// bucket ranges.
func TestConsoleNoBucket(t *testing.T) {
	tb := startBrokerWith(t, nil)
	tb.send(t, "LocalT", 0, []byte("x"), "")
	h := newHandler(tb)
	code, body, _ := get(t, h, http.MethodGet, "/topic?topic=LocalT")
	if code != 200 || !strings.Contains(body, "This broker has no bucket") || strings.Contains(body, "Bucket to") || !strings.Contains(body, `<td class="num q-max">1</td>`) {
		t.Fatalf("topic without a bucket: %d\n%s", code, body)
	}
	code, body, _ = get(t, h, http.MethodGet, "/tier")
	if code != 200 || !strings.Contains(body, `id="tier-none"`) {
		t.Fatalf("tier without a bucket: %d\n%s", code, body)
	}
	if _, body, _ := get(t, h, http.MethodGet, "/"); !strings.Contains(body, "none: everything is local") {
		t.Fatalf("overview without a bucket:\n%s", body)
	}
}

// TestConsoleNoBrowseWithACL: with NoBrowse set (serve sets it when the
// broker has an ACL: the console's pages are not signed requests) the
// message browser answers 403 with the reason and shows no body, by
// queue, key or id; the other pages still work.
func TestConsoleNoBrowseWithACL(t *testing.T) {
	tb := startBroker(t)
	tb.send(t, "Secret", 0, []byte("top-secret-body"), "KEYS\x01k1\x02")
	h := New(Config{Version: "test", Hosts: testHosts, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Broker: func() Broker { return tb.b }, NoBrowse: "the broker has an ACL"})
	for _, target := range []string{"/messages?topic=Secret&queue=0&offset=0", "/messages?topic=Secret&key=k1", "/messages"} {
		code, body, _ := get(t, h, http.MethodGet, target)
		if code != http.StatusForbidden || !strings.Contains(body, "the broker has an ACL") || strings.Contains(body, "top-secret-body") {
			t.Fatalf("GET %s with NoBrowse: %d %q", target, code, body)
		}
	}
	if code, body, _ := get(t, h, http.MethodGet, "/topics"); code != http.StatusOK || !strings.Contains(body, "Secret") {
		t.Fatalf("topics page with NoBrowse: %d", code)
	}
	// Without it, the same message is shown.
	if code, body, _ := get(t, newHandler(tb), http.MethodGet, "/messages?topic=Secret&queue=0&offset=0"); code != 200 || !strings.Contains(body, "top-secret-body") {
		t.Fatalf("browser without NoBrowse: %d", code)
	}
}

// TestConsoleRefusesForeignHost: a request whose Host header names another
// site (a DNS rebinding page) is refused 403 saying how to allow a name;
// the configured names (any case, with a port or a trailing dot), IP
// addresses and localhost are answered.
func TestConsoleRefusesForeignHost(t *testing.T) {
	tb := startBroker(t)
	h := New(Config{Version: "test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Broker: func() Broker { return tb.b }, Hosts: []string{"mq.example.net"}})
	status := func(host string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/topics", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	for _, host := range []string{"attacker.example", "attacker.example:5557", "mq.example.net.attacker.example", "example.com"} {
		if code, body := status(host); code != http.StatusForbidden || !strings.Contains(body, "STRATAMQ_HTTP_HOSTS") || strings.Contains(body, "<") {
			t.Errorf("Host %s: %d %q, want 403 naming STRATAMQ_HTTP_HOSTS", host, code, body)
		}
	}
	for _, host := range []string{"mq.example.net", "MQ.Example.NET:5557", "mq.example.net.", "127.0.0.1:5557", "10.1.2.3", "[::1]:5557", "localhost:5557", "console.localhost"} {
		if code, body := status(host); code != http.StatusOK {
			t.Errorf("Host %s: %d %q, want 200", host, code, body)
		}
	}
}
