package console

// Attacks on the console's write path (sign-in, sessions, form tokens,
// actions, the message browser under an ACL). Each test states what an
// attacker does and fails while the console lets it happen.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/acl2"
	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/msgtrace"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// acl2Setup is a broker with ACL 2.0: root (super) and reader (Sub, Get
// on Topic:Open only), topics Open and Closed with one message each; h is
// a console on it; closedID is the offset msgId of Closed's message.
type acl2Setup struct {
	tb       *testBroker
	h        *Handler
	closedID string
}

func newACL2Setup(t *testing.T) *acl2Setup {
	t.Helper()
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
		adm(remoting.NewRequest(remoting.SendMessage, sh.Encode(), []byte("secret body of "+topic)))
	}
	ms, _, err := tb.b.ConsoleMessages(context.Background(), "Closed", 0, 0, 1, 64)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Closed's message: %v %v", ms, err)
	}
	h := New(Config{Broker: func() Broker { return tb.b }, Hosts: testHosts, SessionTTL: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return &acl2Setup{tb: tb, h: h, closedID: ms[0].MsgID}
}

// signIn signs browser c in as user.
func signIn(t *testing.T, c *browserSim, user, pw string) (int, string) {
	t.Helper()
	_, page := c.do(http.MethodGet, "/login", nil, nil)
	return c.do(http.MethodPost, "/login", url.Values{"user": {user}, "secret": {pw}, "token": {token(t, page)}}, nil)
}

func hasTopic(tb *testBroker, name string) bool {
	ts, _ := tb.b.ConsoleTopics(context.Background(), name, false)
	return len(ts) == 1
}

// TestAttackHeadActionWithoutACL: a broker without an ACL, a console
// without STRATAMQ_CONSOLE_WRITE: a remote machine may not write. HEAD is
// let through ServeHTTP like GET, but actions() only returns the form for
// GET: a HEAD with step=confirm in the query skips the write policy, the
// form token and the origin check, and runs the action (unsigned, as
// every no-ACL action). A cross-site page can send the same HEAD with
// fetch(..., {method: "HEAD", mode: "no-cors"}) through a browser on the
// broker's machine (HEAD is a CORS-safelisted method, no preflight).
func TestAttackHeadActionWithoutACL(t *testing.T) {
	tb := startBroker(t)
	tb.send(t, "Victim", 0, []byte("x"), "")
	h := newHandler(tb)
	far := newBrowserSim(t, h, "10.9.8.7:40000")
	if code, _ := far.do(http.MethodPost, "/action", url.Values{"do": {"deleteTopic"}, "topic": {"Victim"}, "step": {"confirm"}, "token": {"x"}}, nil); code != http.StatusUnauthorized {
		t.Fatalf("the POST from a remote machine: %d, want 401", code)
	}
	far.do(http.MethodHead, "/action?do=createTopic&topic=Pwned&read=1&write=1&perm=6&step=confirm", nil,
		map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
	far.do(http.MethodHead, "/action?do=deleteTopic&topic=Victim&step=confirm", nil,
		map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
	if hasTopic(tb, "Pwned") || !hasTopic(tb, "Victim") {
		t.Fatalf("a HEAD from a remote machine, without a token and from another site, ran actions: topic Pwned created %v, topic Victim deleted %v",
			hasTopic(tb, "Pwned"), !hasTopic(tb, "Victim"))
	}
}

// TestAttackHeadActionUnderACL: under ACL 2.0 a signed-in root's cookie
// on a HEAD with step=confirm runs the action with no form token and
// whatever Origin / Sec-Fetch-Site: the CSRF checks are skipped. A page
// on the same site (another port of the same IP host, a sibling
// subdomain: SameSite=Strict still sends the cookie) makes root's
// browser delete a topic with fetch(url, {method: "HEAD", credentials:
// "include", mode: "no-cors"}).
func TestAttackHeadActionUnderACL(t *testing.T) {
	s := newACL2Setup(t)
	root := newBrowserSim(t, s.h, "10.1.1.2:5000")
	if code, _ := signIn(t, root, "root", rootPw); code != http.StatusSeeOther {
		t.Fatalf("root's sign-in: %d", code)
	}
	root.do(http.MethodHead, "/action?do=deleteTopic&topic=Closed&step=confirm", nil,
		map[string]string{"Origin": "http://127.0.0.1:3000", "Sec-Fetch-Site": "same-site"})
	if !hasTopic(s.tb, "Closed") {
		t.Fatal("a HEAD without a form token, from another origin, deleted topic Closed as root")
	}
}

// TestAttackMsgIdOracle: reader has no permission on Closed. Asking the
// message browser for Closed's message by msgId is refused, but the
// refusal names the topic (and differs from the answer for an id that
// names no message): the message is read before the permission is
// checked, so a signed-in user without SUB learns which topic any
// commitlog offset belongs to (the msgId is the store host and the
// commitlog offset, so offsets can be walked).
func TestAttackMsgIdOracle(t *testing.T) {
	s := newACL2Setup(t)
	reader := newBrowserSim(t, s.h, "10.1.1.3:5000")
	if code, _ := signIn(t, reader, "reader", readerPw); code != http.StatusSeeOther {
		t.Fatalf("reader's sign-in: %d", code)
	}
	code, page := reader.do(http.MethodGet, "/messages?msgId="+s.closedID, nil, nil)
	if strings.Contains(page, "secret body of Closed") {
		t.Fatalf("reader read Closed's body by msgId: %d", code)
	}
	if strings.Contains(page, "Closed") {
		t.Errorf("the refusal for a message reader may not read names its topic (%d):\n%s", code, errorText(page))
	}
	bogus := s.closedID[:16] + "00000000000F0000"
	code2, page2 := reader.do(http.MethodGet, "/messages?msgId="+bogus, nil, nil)
	if code2 != code {
		t.Errorf("an unreadable message answers %d, an id with no message %d: an existence oracle\n%s\n%s", code, code2, errorText(page), errorText(page2))
	}
}

// TestAttackTraceBeforePermission: the trace mode reads the trace topic
// (ConsoleTrace) before it asks whether the user may: a user without SUB
// on any trace topic makes the broker search the key index of any topic
// (traceTopic=Closed) and learns from the answer whether it failed.
// Shown as: the refusal comes after a read of Closed's key index, the
// same read that answers for an allowed user.
func TestAttackTraceBeforePermission(t *testing.T) {
	s := newACL2Setup(t)
	cb := &countingBroker{Broker: s.tb.b}
	h := New(Config{Broker: func() Broker { return cb }, Hosts: testHosts, SessionTTL: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	reader := newBrowserSim(t, h, "10.1.1.3:5000")
	if code, _ := signIn(t, reader, "reader", readerPw); code != http.StatusSeeOther {
		t.Fatalf("reader's sign-in: %d", code)
	}
	reader.do(http.MethodGet, "/messages?trace=AC1100010000&traceTopic=Closed", nil, nil)
	reader.do(http.MethodGet, "/messages?msgId="+s.closedID, nil, nil)
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if cb.reads > 0 {
		t.Errorf("%d message reads on topics reader may not read, done before the permission check (trace of Closed, msgId of Closed)", cb.reads)
	}
}

// countingBroker counts the trace and msgId reads the console asks for.
type countingBroker struct {
	*broker.Broker
	mu    sync.Mutex
	reads int
}

func (c *countingBroker) ConsoleTrace(ctx context.Context, msgID, topic string) ([]msgtrace.Leg, string, error) {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.Broker.ConsoleTrace(ctx, msgID, topic)
}

func (c *countingBroker) ConsoleMessageByID(ctx context.Context, id string, preview int) (broker.ConsoleMessage, error) {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.Broker.ConsoleMessageByID(ctx, id, preview)
}

// TestAttackAnonFloodEvictsSignIn: under an ACL every GET /login by a
// visitor without a cookie creates an anonymous session (for the sign-in
// form's token); there are at most maxSessions of them and the oldest go
// first. An unauthenticated attacker sends maxSessions GET /login without
// a cookie: every real user's sign-in form now holds a token of a
// session that is gone, and their correct sign-in is refused (403).
func TestAttackAnonFloodEvictsSignIn(t *testing.T) {
	s := newACL2Setup(t)
	victim := newBrowserSim(t, s.h, "10.1.1.2:5000")
	_, page := victim.do(http.MethodGet, "/login", nil, nil)
	tok := token(t, page)
	for i := 0; i < maxSessions; i++ {
		newBrowserSim(t, s.h, "203.0.113.9:4000").do(http.MethodGet, "/login", nil, nil)
	}
	code, page := victim.do(http.MethodPost, "/login", url.Values{"user": {"root"}, "secret": {rootPw}, "token": {tok}}, nil)
	if code != http.StatusSeeOther {
		t.Fatalf("after %d cookieless GET /login from one address, root's correct sign-in is refused: %d\n%s", maxSessions, code, errorText(page))
	}
}

// TestAttackUserFloodEvictsOtherSessions: signed-in sessions share one
// bound (maxSessions, oldest first) across all users. The least
// privileged account (reader) signs in maxSessions times and root, who
// signed in first, is signed out.
func TestAttackUserFloodEvictsOtherSessions(t *testing.T) {
	s := newACL2Setup(t)
	root := newBrowserSim(t, s.h, "10.1.1.2:5000")
	if code, _ := signIn(t, root, "root", rootPw); code != http.StatusSeeOther {
		t.Fatalf("root's sign-in: %d", code)
	}
	reader := newBrowserSim(t, s.h, "10.1.1.3:5000")
	for i := 0; i < maxSessions; i++ {
		delete(reader.cookies, sessionCookie) // a fresh session each time
		if code, _ := signIn(t, reader, "reader", readerPw); code != http.StatusSeeOther {
			t.Fatalf("reader's sign-in %d: %d", i, code)
		}
	}
	if code, page := root.do(http.MethodGet, "/messages?topic=Closed&queue=0", nil, nil); code != http.StatusOK {
		t.Fatalf("root was signed out by reader's %d sign-ins: %d %s", maxSessions, code, errorText(page))
	}
}

// TestAttackLimiterIPv6: the failed sign-in limit is per address. An
// attacker with one IPv6 /64 (every customer's allocation) uses a new
// address per guess: 50 wrong secrets for root in a minute, none refused.
func TestAttackLimiterIPv6(t *testing.T) {
	s := newACL2Setup(t)
	limited := 0
	for i := 1; i <= 50; i++ {
		c := newBrowserSim(t, s.h, fmt.Sprintf("[2001:db8:1:2::%x]:40000", i))
		if code, _ := signIn(t, c, "root", fmt.Sprintf("guess-%d", i)); code == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited == 0 {
		t.Fatalf("50 failed sign-ins for root from one IPv6 /64 in a minute: none refused (the limit is %d per address)", maxFailures)
	}
}

// TestAttackLimiterReset: the limiter forgets every address once it
// holds more than 10,000 (fail's bound): an attacker blocked at one
// address records failures from 10,001 others (spoofing none: an IPv6
// /64 has them) and is unblocked at once, as is every other blocked
// guesser.
func TestAttackLimiterReset(t *testing.T) {
	var l loginLimiter
	now := time.Now()
	k := clientOf(netip.MustParseAddr("198.51.100.7"))
	for i := 0; i < maxFailures; i++ {
		l.attempt(k, now)
	}
	if l.attempt(k, now) {
		t.Fatal("not blocked after maxFailures")
	}
	for i := 0; i <= 10000; i++ { // 10,001 other clients (distinct /64s), each failing once, later
		l.attempt(clientOf(netip.MustParseAddr(fmt.Sprintf("2001:db8:%x:1::1", i))), now.Add(time.Millisecond))
	}
	if l.attempt(k, now.Add(2*time.Millisecond)) {
		t.Fatal("a blocked address is unblocked once 10,001 other addresses failed a sign-in within the window")
	}
}

// TestAttackLimiterRace: blocked() is asked before the sign-in is
// checked and fail() records it after, with no reservation between: a
// burst of concurrent wrong sign-ins from one address (tokens are free:
// each GET /login adds one to the visitor's session, up to maxTokens)
// gets more than maxFailures guesses checked in the window.
func TestAttackLimiterRace(t *testing.T) {
	s := newACL2Setup(t)
	slow := &slowAuthBroker{Broker: s.tb.b, delay: 5 * time.Millisecond}
	h := New(Config{Broker: func() Broker { return slow }, Hosts: testHosts, SessionTTL: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	c := newBrowserSim(t, h, "198.51.100.8:4000")
	const n = 60
	var toks []string
	for i := 0; i < n; i++ {
		_, page := c.do(http.MethodGet, "/login", nil, nil)
		toks = append(toks, token(t, page))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	checked := 0
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(tok string, i int) {
			defer wg.Done()
			<-start
			r := newBrowserSim(t, h, "198.51.100.8:4000")
			r.cookies[loginCookie] = c.cookies[loginCookie]
			code, _ := r.do(http.MethodPost, "/login", url.Values{"user": {"root"}, "secret": {fmt.Sprint("guess-", i)}, "token": {tok}}, nil)
			if code == http.StatusUnauthorized {
				mu.Lock()
				checked++
				mu.Unlock()
			}
		}(toks[i], i)
	}
	close(start)
	wg.Wait()
	if checked > maxFailures {
		t.Fatalf("%d wrong secrets were checked from one address in one burst; the limit is %d a minute", checked, maxFailures)
	}
}

// slowAuthBroker's sign-in check takes delay (a slow hash, a loaded
// machine): the window between the limiter's blocked() and fail().
type slowAuthBroker struct {
	*broker.Broker
	delay time.Duration
}

func (b *slowAuthBroker) ConsoleAuthenticate(user, secret string) error {
	time.Sleep(b.delay)
	return b.Broker.ConsoleAuthenticate(user, secret)
}

// TestAttackSendMessageKeyInjectsProperties: the test message's key and
// tag are joined into the properties string unescaped, so a key holding
// \x02 and \x01 adds any property: here DELAY (the message is held back
// in the schedule topic) and UNIQ_KEY (the client msgId, which traces and
// duplicates are found by). The plan shows the key %q-quoted, but a form
// pre-filled from a link (GET /action?do=sendMessage&key=...) shows the
// control characters as nothing in the input.
func TestAttackSendMessageKeyInjectsProperties(t *testing.T) {
	tb := startBroker(t)
	h := newHandler(tb)
	c := newBrowserSim(t, h, "127.0.0.1:40000")
	code, page := c.act("createTopic", url.Values{"topic": {"Inj"}, "read": {"1"}, "write": {"1"}, "perm": {"6"}})
	if code != http.StatusOK {
		t.Fatalf("create: %d %s", code, errorText(page))
	}
	code, page = c.act("sendMessage", url.Values{"topic": {"Inj"}, "key": {"k\x02UNIQ_KEY\x01FORGED-ID\x02INJECTED\x01yes"}, "body": {"b"}})
	if code != http.StatusBadRequest || !strings.Contains(page, "control character") {
		t.Fatalf("a key with control characters: %d %s", code, errorText(page))
	}
	if ms, _, err := tb.b.ConsoleMessages(context.Background(), "Inj", 0, 0, 1, 16); err != nil || len(ms) != 0 {
		t.Fatalf("a refused send stored %v (%v)", ms, err)
	}
}

// TestAttackLoginPageSignsOut: GET /login by a signed-in user (a link
// or a redirect from any site: a top-level navigation's Set-Cookie is
// taken) replaces their session cookie with a new anonymous one: they
// are signed out, and the signed-in session stays alive on the server
// until its expiry (not dropped), usable by whoever holds its value.
func TestAttackLoginPageSignsOut(t *testing.T) {
	s := newACL2Setup(t)
	root := newBrowserSim(t, s.h, "10.1.1.2:5000")
	if code, _ := signIn(t, root, "root", rootPw); code != http.StatusSeeOther {
		t.Fatalf("root's sign-in: %d", code)
	}
	before := root.cookies[sessionCookie].Value
	root.do(http.MethodGet, "/login", nil, map[string]string{"Sec-Fetch-Site": "cross-site"})
	after := root.cookies[sessionCookie].Value
	if before != after {
		code, _ := root.do(http.MethodGet, "/messages?topic=Closed&queue=0", nil, nil)
		t.Fatalf("GET /login replaced a signed-in user's session cookie (now %d on the message browser); the old session is still live server-side: %v",
			code, s.h.sess.m[before] != nil)
	}
}

// errorText is a page cut for a failure message.
func errorText(page string) string {
	if i := strings.Index(page, "<main>"); i >= 0 {
		page = page[i:]
	}
	return cut(page, 600)
}
