package console

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/acl2"
	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// browserSim is a browser of the console: its cookies, its address and
// the headers a browser adds to a same-origin form post.
type browserSim struct {
	t       *testing.T
	h       http.Handler
	remote  string
	cookies map[string]*http.Cookie
}

func newBrowserSim(t *testing.T, h http.Handler, remote string) *browserSim {
	return &browserSim{t: t, h: h, remote: remote, cookies: map[string]*http.Cookie{}}
}

// do sends one request; hdr adds or overrides headers.
func (c *browserSim) do(method, target string, form url.Values, hdr map[string]string) (int, string) {
	c.t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequest(method, "http://127.0.0.1:5557"+target, body)
	r.RemoteAddr = c.remote
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Origin", "http://127.0.0.1:5557")
		r.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	for k, v := range hdr {
		if v == "" {
			r.Header.Del(k)
		} else {
			r.Header.Set(k, v)
		}
	}
	for _, ck := range c.cookies {
		r.AddCookie(ck)
	}
	w := httptest.NewRecorder()
	c.h.ServeHTTP(w, r)
	for _, ck := range w.Result().Cookies() {
		if ck.MaxAge < 0 {
			delete(c.cookies, ck.Name)
		} else {
			c.cookies[ck.Name] = ck
		}
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
			c.t.Fatalf("cookie %s is not HttpOnly and SameSite=Strict: %+v", ck.Name, ck)
		}
	}
	return w.Code, w.Body.String()
}

var tokenRE = regexp.MustCompile(`name="token" value="([^"]+)"`)

// token is the first form token of a page.
func token(t *testing.T, page string) string {
	t.Helper()
	m := tokenRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no form token in the page:\n%s", page)
	}
	return m[1]
}

// formTok is the token of the form with id (each form's token is for
// that form only).
func formTok(t *testing.T, page, id string) string {
	t.Helper()
	i := strings.Index(page, `id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no form %s in the page:\n%s", id, page)
	}
	return token(t, page[i:])
}

// act runs an action through its form, review and confirmation, and
// returns the final page's status and body.
func (c *browserSim) act(name string, fields url.Values) (int, string) {
	c.t.Helper()
	code, page := c.do(http.MethodGet, "/action?do="+name, nil, nil)
	if code != http.StatusOK {
		c.t.Fatalf("action form %s: %d\n%s", name, code, page)
	}
	f := url.Values{"do": {name}, "step": {"review"}, "token": {formTok(c.t, page, "action-form")}}
	for k, v := range fields {
		f[k] = v
	}
	code, page = c.do(http.MethodPost, "/action", f, nil)
	if code != http.StatusOK || !strings.Contains(page, `id="confirm-form"`) {
		return code, page
	}
	f.Set("step", "confirm")
	f.Set("token", formTok(c.t, page, "confirm-form"))
	return c.do(http.MethodPost, "/action", f, nil)
}

// logBuf is a logger's output, safe for the broker's goroutines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestConsoleActionsWithoutACL: without an ACL a loopback browser creates
// a topic and sends a test message through the form, review and
// confirmation; the same confirmation posted again (a replayed token), a
// made-up token, a post from another site and a non-loopback browser are
// refused, and nothing changes.
func TestConsoleActionsWithoutACL(t *testing.T) {
	tb := startBroker(t)
	var logs logBuf
	h := New(Config{Broker: func() Broker { return tb.b }, Hosts: testHosts, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	c := newBrowserSim(t, h, "127.0.0.1:40000")

	code, page := c.act("createTopic", url.Values{"topic": {"Made"}, "read": {"2"}, "write": {"2"}, "perm": {"6"}})
	if code != http.StatusOK || !strings.Contains(page, "topic Made created") {
		t.Fatalf("create topic: %d\n%s", code, page)
	}
	ts, _ := tb.b.ConsoleTopics(context.Background(), "Made", false)
	if len(ts) != 1 || ts[0].ReadQueues != 2 {
		t.Fatalf("topic Made after the action: %+v", ts)
	}
	code, page = c.act("sendMessage", url.Values{"topic": {"Made"}, "key": {"k1"}, "body": {"hello from the console"}})
	if code != http.StatusOK || !strings.Contains(page, "sent: msgId") {
		t.Fatalf("send: %d\n%s", code, page)
	}
	if !strings.Contains(logs.String(), "console action") || !strings.Contains(logs.String(), "127.0.0.1") {
		t.Fatalf("the action was not logged with who sent it:\n%s", logs.String())
	}

	// A subscription group made and deleted; promote on a broker that is no
	// slave: the broker's refusal, shown as it is.
	if code, page := c.act("createGroup", url.Values{"group": {"billing"}, "retryQueues": {"1"}, "retryMax": {"3"}, "orderly": {"on"}}); code != http.StatusOK || !strings.Contains(page, "created") {
		t.Fatalf("create group: %d\n%s", code, page)
	}
	hasGroup := func() bool {
		for _, g := range tb.b.ConsoleGroups() {
			if g.Name == "billing" && g.Config {
				return true
			}
		}
		return false
	}
	if !hasGroup() {
		t.Fatal("group billing not created")
	}
	if code, page := c.act("deleteGroup", url.Values{"group": {"billing"}}); code != http.StatusOK || !strings.Contains(page, "deleted") || hasGroup() {
		t.Fatalf("delete group: %d\n%s", code, page)
	}
	if code, page := c.act("promote", url.Values{}); code != http.StatusOK || !strings.Contains(page, `id="action-error"`) || !strings.Contains(page, "the broker answered") {
		t.Fatalf("promote a master: %d\n%s", code, page)
	}
	// Skip a group's backlog: its offset moves to the end.
	uh := remoting.UpdateConsumerOffsetRequestHeader{ConsumerGroup: "skipper", Topic: "Made", QueueID: 0, CommitOffset: 0}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := tb.cl.Invoke(ctx, tb.b.Addr().String(), remoting.NewRequest(remoting.UpdateConsumerOffset, uh.Encode(), nil)); err != nil {
		t.Fatal(err)
	}
	if code, page := c.act("skipBacklog", url.Values{"group": {"skipper"}, "topic": {"Made"}}); code != http.StatusOK || !strings.Contains(page, "offsets committed") {
		t.Fatalf("skip the backlog: %d\n%s", code, page)
	}
	for _, g := range tb.b.ConsoleGroups() {
		if g.Name == "skipper" && g.Lag != 0 {
			t.Fatalf("lag %d after skipping the backlog", g.Lag)
		}
	}
	// A bad field: refused before anything is sent, saying which.
	if code, page := c.act("createTopic", url.Values{"topic": {"bad topic!"}, "read": {"1"}, "write": {"1"}, "perm": {"6"}}); code != http.StatusBadRequest || !strings.Contains(page, "only letters") {
		t.Fatalf("a bad topic name: %d\n%s", code, page)
	}

	// Replay: the confirmation again, with the token it used.
	_, page = c.do(http.MethodGet, "/action?do=deleteTopic", nil, nil)
	f := url.Values{"do": {"deleteTopic"}, "step": {"review"}, "topic": {"Made"}, "token": {formTok(t, page, "action-form")}}
	_, page = c.do(http.MethodPost, "/action", f, nil)
	f.Set("step", "confirm")
	f.Set("token", formTok(t, page, "confirm-form"))
	replay := url.Values{}
	for k, v := range f {
		replay[k] = v
	}
	forged := url.Values{}
	for k, v := range f {
		forged[k] = v
	}
	forged.Set("token", strings.Repeat("A", 43))
	if code, page := c.do(http.MethodPost, "/action", forged, nil); code != http.StatusForbidden || !strings.Contains(page, "token") {
		t.Fatalf("a forged token: %d\n%s", code, page)
	}
	for _, hdr := range []map[string]string{{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"}} {
		if code, page := c.do(http.MethodPost, "/action", f, hdr); code != http.StatusForbidden || !strings.Contains(page, "another site") {
			t.Fatalf("a cross-site post %v: %d\n%s", hdr, code, page)
		}
	}
	if ts, _ := tb.b.ConsoleTopics(context.Background(), "Made", false); len(ts) != 1 {
		t.Fatal("a refused post deleted the topic")
	}
	if code, page := c.do(http.MethodPost, "/action", f, nil); code != http.StatusOK || !strings.Contains(page, "deleted") {
		t.Fatalf("the confirmation: %d\n%s", code, page)
	}
	if code, page := c.do(http.MethodPost, "/action", replay, nil); code != http.StatusForbidden {
		t.Fatalf("a replayed token: %d\n%s", code, page)
	}

	// Another machine, without STRATAMQ_CONSOLE_WRITE: refused.
	far := newBrowserSim(t, h, "10.9.8.7:40000")
	code, page = far.do(http.MethodGet, "/action?do=createTopic", nil, nil)
	if code != http.StatusOK || !strings.Contains(page, "loopback") || tokenRE.MatchString(page) {
		t.Fatalf("the form for a remote browser: %d\n%s", code, page)
	}
	if code, _ := far.do(http.MethodPost, "/action", url.Values{"do": {"createTopic"}, "topic": {"Far"}, "token": {"x"}}, nil); code != http.StatusUnauthorized {
		t.Fatalf("a remote write without STRATAMQ_CONSOLE_WRITE: %d", code)
	}
	// With it, the remote browser may.
	hw := New(Config{Broker: func() Broker { return tb.b }, Hosts: testHosts, Write: true, Logger: slog.New(slog.DiscardHandler)})
	if code, page := newBrowserSim(t, hw, "10.9.8.7:40000").act("createTopic", url.Values{"topic": {"Far"}, "read": {"1"}, "write": {"1"}, "perm": {"6"}}); code != http.StatusOK || !strings.Contains(page, "created") {
		t.Fatalf("a remote write with STRATAMQ_CONSOLE_WRITE: %d\n%s", code, page)
	}
}

const (
	rootPw   = "root-secret-9f3a"
	readerPw = "reader-secret-7b21"
)

// TestConsoleSignInUnderACL2: with ACL 2.0 the console's writes and message
// browser need a signed-in user; a wrong secret is refused without saying
// which part was wrong; the super user acts; a user without the permission
// is refused by the broker's ACL (the same request a client would send,
// from the browser's address); a reader reads only the topic it has SUB
// on; a session past its expiry no longer works; no page and no log line
// holds a secret.
func TestConsoleSignInUnderACL2(t *testing.T) {
	tb := startBrokerWith(t, tier.NewMem(), func(c *broker.Config) {
		c.AuthenticationEnabled, c.AuthorizationEnabled = true, true
		c.InitAuthenticationUser = &acl2.UserInfo{Username: "root", Password: rootPw}
	})
	addr := tb.b.Addr().String()
	root := acl.Credentials{AccessKey: "root", SecretKey: rootPw}
	adm := func(req *remoting.Command) {
		t.Helper()
		root.Sign(req)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := tb.cl.Invoke(ctx, addr, req)
		if err != nil || resp.Code != 0 {
			t.Fatalf("admin request %d: %v %v", req.Code, resp, err)
		}
	}
	ub, _ := json.Marshal(acl2.UserInfo{Username: "reader", Password: readerPw})
	adm(remoting.NewRequest(remoting.AuthCreateUser, map[string]string{"username": "reader"}, ub))
	ab, _ := json.Marshal(acl2.AclInfo{Subject: "User:reader", Policies: []acl2.PolicyInfo{{PolicyType: "Custom",
		Entries: []acl2.PolicyEntryInfo{{Resource: "Topic:Open", Actions: []string{"Sub", "Get"}, Decision: "Allow"}}}}})
	adm(remoting.NewRequest(remoting.AuthCreateAcl, map[string]string{"subject": "User:reader"}, ab))
	for _, topic := range []string{"Open", "Closed"} {
		h := remoting.CreateTopicRequestHeader{Topic: topic, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}
		adm(remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil))
		sh := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: topic, QueueID: 0, BornTimestamp: time.Now().UnixMilli()}
		adm(remoting.NewRequest(remoting.SendMessage, sh.Encode(), []byte("body of "+topic)))
	}

	now := time.Now()
	var clockMu sync.Mutex
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	var logs logBuf
	h := New(Config{Broker: func() Broker { return tb.b }, Hosts: testHosts, SessionTTL: time.Hour, Now: clock,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	anon := newBrowserSim(t, h, "10.1.1.1:5000")
	if code, _ := anon.do(http.MethodGet, "/messages?topic=Open&queue=0", nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("the message browser without a sign-in: %d", code)
	}
	if code, _ := anon.do(http.MethodPost, "/action", url.Values{"do": {"createTopic"}, "topic": {"X"}, "token": {"x"}}, nil); code != http.StatusUnauthorized {
		t.Fatalf("a write without a sign-in: %d", code)
	}
	signIn := func(c *browserSim, user, pw string) (int, string) {
		t.Helper()
		_, page := c.do(http.MethodGet, "/login", nil, nil)
		return c.do(http.MethodPost, "/login", url.Values{"user": {user}, "secret": {pw}, "token": {formTok(t, page, "login-form")}}, nil)
	}
	if code, page := signIn(anon, "root", "wrong-secret"); code != http.StatusUnauthorized || !strings.Contains(page, "unknown user or wrong secret") {
		t.Fatalf("a wrong secret: %d\n%s", code, page)
	}
	if code, _ := signIn(anon, "nobody", rootPw); code != http.StatusUnauthorized {
		t.Fatalf("an unknown user: %d", code)
	}

	admin := newBrowserSim(t, h, "10.1.1.2:5000")
	if code, _ := signIn(admin, "root", rootPw); code != http.StatusSeeOther {
		t.Fatalf("root's sign-in: %d", code)
	}
	if code, page := admin.act("createTopic", url.Values{"topic": {"ByRoot"}, "read": {"1"}, "write": {"1"}, "perm": {"6"}}); code != http.StatusOK || !strings.Contains(page, "created") {
		t.Fatalf("root creates a topic: %d\n%s", code, page)
	}
	if code, page := admin.do(http.MethodGet, "/messages?topic=Closed&queue=0", nil, nil); code != http.StatusOK || !strings.Contains(page, "body of Closed") {
		t.Fatalf("root reads Closed: %d\n%s", code, page)
	}

	reader := newBrowserSim(t, h, "10.1.1.3:5000")
	if code, _ := signIn(reader, "reader", readerPw); code != http.StatusSeeOther {
		t.Fatalf("reader's sign-in: %d", code)
	}
	code, page := reader.act("createTopic", url.Values{"topic": {"ByReader"}, "read": {"1"}, "write": {"1"}, "perm": {"6"}})
	if code != http.StatusForbidden || !strings.Contains(page, "NO_PERMISSION") || !strings.Contains(page, "reader") {
		t.Fatalf("reader creates a topic: %d\n%s", code, page)
	}
	if code, page := reader.do(http.MethodGet, "/messages?topic=Open&queue=0", nil, nil); code != http.StatusOK || !strings.Contains(page, "body of Open") {
		t.Fatalf("reader reads Open: %d\n%s", code, page)
	}
	if code, page := reader.do(http.MethodGet, "/messages?topic=Closed&queue=0", nil, nil); code != http.StatusForbidden || strings.Contains(page, "body of Closed") {
		t.Fatalf("reader reads Closed: %d\n%s", code, page)
	}
	// Past its expiry the session is gone.
	clockMu.Lock()
	now = now.Add(2 * time.Hour)
	clockMu.Unlock()
	if code, _ := reader.do(http.MethodGet, "/messages?topic=Open&queue=0", nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("an expired session read messages: %d", code)
	}
	// Sign-out ends root's session (its cookie is cleared and the old value refused).
	clockMu.Lock()
	now = now.Add(-2 * time.Hour)
	clockMu.Unlock()
	old := admin.cookies[sessionCookie]
	_, page = admin.do(http.MethodGet, "/", nil, nil)
	if code, _ := admin.do(http.MethodPost, "/logout", url.Values{"token": {token(t, page)}}, nil); code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", code)
	}
	admin.cookies[sessionCookie] = old
	if code, _ := admin.do(http.MethodGet, "/messages?topic=Closed&queue=0", nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("a signed-out session read messages: %d", code)
	}
	for _, pw := range []string{rootPw, readerPw} {
		if strings.Contains(logs.String(), pw) {
			t.Fatalf("a log line holds a secret:\n%s", logs.String())
		}
	}
}
