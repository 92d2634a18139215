package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// viewer is who asks: their session (nil: none) and whether they may
// write, and if not, why.
type viewer struct {
	sess     *session
	user     string // "" without an ACL
	canWrite bool
	why      string
	acl      bool
}

func (h *Handler) viewerOf(b Broker, r *http.Request) viewer {
	if b.ConsoleACL() {
		x := h.sess.get(r, false)
		if x == nil {
			return viewer{acl: true, why: "the broker checks requests (ACL): sign in with one of its accounts to act or browse messages"}
		}
		return viewer{sess: x, user: x.user, canWrite: true, acl: true}
	}
	v := viewer{sess: h.sess.get(r, true)}
	switch {
	case h.cfg.Write:
		v.canWrite = true
	case remoteAddr(r).Addr().IsLoopback():
		v.canWrite = true
	default:
		v.why = "without an ACL the console takes writes only from this machine (loopback); STRATAMQ_CONSOLE_WRITE=true takes them from anywhere"
	}
	return v
}

// anonSession is the session a visitor without an ACL gets on a form
// page, for its form tokens.
func (h *Handler) anonSession(w http.ResponseWriter, r *http.Request, v *viewer) {
	if v.sess == nil && !v.acl {
		v.sess = h.sess.create("", "", true)
		setSessionCookie(w, r, v.sess)
	}
}

// loginLimiter counts sign-in attempts that failed per client: an IPv4
// address, or an IPv6 /64 (one host holds a whole /64). More than
// maxFailures in failureWindow are refused (429) until the window passes.
// An attempt counts as failed from its start (attempt) and is forgiven on
// success, so concurrent guesses cannot all pass the check. At most
// maxLimited clients are remembered; past that the one with the fewest
// failures is forgotten first (a blocked client stays blocked).
type loginLimiter struct {
	mu sync.Mutex
	m  map[netip.Prefix][]time.Time
}

const (
	maxFailures   = 10
	failureWindow = time.Minute
	maxLimited    = 10000
)

// clientOf is the limiter's key of an address.
func clientOf(a netip.Addr) netip.Prefix {
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// attempt starts a sign-in attempt from client k: false (and nothing
// counted) when k is over its limit; else the attempt counts as failed
// until forgive.
func (l *loginLimiter) attempt(k netip.Prefix, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[netip.Prefix][]time.Time{}
	}
	kept := l.m[k][:0]
	for _, t := range l.m[k] {
		if now.Sub(t) < failureWindow {
			kept = append(kept, t)
		}
	}
	if len(kept) >= maxFailures {
		l.m[k] = kept
		return false
	}
	if _, ok := l.m[k]; !ok && len(l.m) >= maxLimited {
		// Forget the client with the fewest failures (the oldest of
		// those): a blocked client stays blocked however many others fail.
		var oldK netip.Prefix
		var oldT time.Time
		fewest := -1
		for c, ts := range l.m {
			last := time.Time{}
			if len(ts) > 0 {
				last = ts[len(ts)-1]
			}
			if fewest < 0 || len(ts) < fewest || len(ts) == fewest && last.Before(oldT) {
				oldK, oldT, fewest = c, last, len(ts)
			}
		}
		delete(l.m, oldK)
	}
	l.m[k] = append(kept, now)
	return true
}

// forgive takes back the failure attempt counted at t (a success).
func (l *loginLimiter) forgive(k netip.Prefix, t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ts := l.m[k]
	for i := len(ts) - 1; i >= 0; i-- {
		if ts[i].Equal(t) {
			l.m[k] = append(ts[:i], ts[i+1:]...)
			break
		}
	}
	if len(l.m[k]) == 0 {
		delete(l.m, k)
	}
}

type loginData struct {
	Token  string
	User   string
	Failed string
	ACL    bool
}

// login is GET (the form) and POST (a sign-in) /login. The form's token
// is an HMAC of a nonce cookie: nothing is kept for a visitor before
// they sign in.
func (h *Handler) login(ctx context.Context, b Broker, w http.ResponseWriter, r *http.Request) (string, any, error) {
	d := loginData{ACL: b.ConsoleACL()}
	if !d.ACL {
		return "login", d, nil // the page says there is nobody to sign in as
	}
	if h.sess.get(r, false) != nil && r.Method != http.MethodPost {
		http.Redirect(w, r, "/", http.StatusSeeOther) // signed in already: keep the session
		return "", nil, errRedirected
	}
	if r.Method == http.MethodPost {
		if !sameOrigin(r) {
			return "", nil, forbidden("a form posted from another site is refused (Origin %q, Sec-Fetch-Site %q)", cut(r.Header.Get("Origin"), 64), r.Header.Get("Sec-Fetch-Site"))
		}
		r.Body = http.MaxBytesReader(nil, r.Body, 2*maxFieldLen)
		if err := r.ParseForm(); err != nil {
			return "", nil, badRequest("the form does not parse: %v", err)
		}
		if !h.sess.checkLogin(r, r.PostForm.Get("token")) {
			return "", nil, forbidden("the sign-in form's token is missing or not this browser's: reload the page and try again")
		}
		addr := remoteAddr(r).Addr()
		client, now := clientOf(addr), h.sess.now()
		if !h.limit.attempt(client, now) {
			return "", nil, &httpError{http.StatusTooManyRequests, fmt.Sprintf("more than %d failed sign-ins from %s in the last %s: wait", maxFailures, client, failureWindow)}
		}
		user, secret := r.PostForm.Get("user"), r.PostForm.Get("secret")
		if err := b.ConsoleAuthenticate(user, secret); err != nil {
			h.cfg.Logger.Warn("console sign-in refused", "user", cut(user, 64), "remote", addr.String())
			d.User, d.Failed = cut(user, 64), "sign-in refused: "+err.Error()
			d.Token = h.sess.loginToken(h.sess.loginNonce(w, r))
			w.WriteHeader(http.StatusUnauthorized)
			return "login", d, nil
		}
		h.limit.forgive(client, now)
		if old := h.sess.get(r, false); old != nil {
			h.sess.drop(old)
		}
		x := h.sess.create(user, secret, false)
		setSessionCookie(w, r, x)
		h.cfg.Logger.Info("console sign-in", "user", user, "remote", addr.String())
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return "", nil, errRedirected
	}
	d.Token = h.sess.loginToken(h.sess.loginNonce(w, r))
	return "login", d, nil
}

// errRedirected: the handler answered (a redirect); render nothing.
var errRedirected = errors.New("redirected")

// logout is POST /logout.
func (h *Handler) logout(ctx context.Context, b Broker, w http.ResponseWriter, r *http.Request) (string, any, error) {
	x := h.sess.get(r, false)
	if x == nil {
		x = h.sess.get(r, true)
	}
	if x == nil {
		clearSessionCookie(w, r)
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return "", nil, errRedirected
	}
	if r.Method != http.MethodPost {
		return "", nil, &httpError{http.StatusMethodNotAllowed, "sign out with the page's Sign out button (POST)"}
	}
	if err := h.checkPost(r, x, "logout"); err != nil {
		return "", nil, err
	}
	h.sess.drop(x)
	clearSessionCookie(w, r)
	h.cfg.Logger.Info("console sign-out", "user", x.user)
	http.Redirect(w, r, "/", http.StatusSeeOther)
	return "", nil, errRedirected
}

// checkPost is every POST's check: from this console's pages (not another
// site), and carrying a form token session x was given for purpose and
// has not used.
func (h *Handler) checkPost(r *http.Request, x *session, purpose string) error {
	if !sameOrigin(r) {
		return forbidden("a form posted from another site is refused (Origin %q, Sec-Fetch-Site %q)", cut(r.Header.Get("Origin"), 64), r.Header.Get("Sec-Fetch-Site"))
	}
	r.Body = http.MaxBytesReader(nil, r.Body, 2*maxFieldLen)
	if err := r.ParseForm(); err != nil {
		return badRequest("the form does not parse: %v", err)
	}
	if x == nil || !h.sess.use(x, r.PostForm.Get("token"), purpose) {
		return forbidden("the form's token is missing, used already, for another form or not this session's: reload the page and try again")
	}
	return nil
}

type actionsData struct {
	Actions  []*actionDef
	Action   *actionDef
	Fields   []field
	Step     string // form, confirm, done
	Plan     string
	Result   string
	Error    string
	Token    string
	CanWrite bool
	Why      string
	User     string
	Hidden   url.Values
}

// actions is GET /actions (the list), GET /action?do= (a form), POST
// /action step=review (the confirmation) and step=confirm (the request).
func (h *Handler) actions(ctx context.Context, b Broker, w http.ResponseWriter, r *http.Request) (string, any, error) {
	v := h.viewerOf(b, r)
	d := actionsData{Actions: actionDefs, CanWrite: v.canWrite, Why: v.why, User: v.user, Step: "list"}
	name := r.URL.Query().Get("do")
	post := r.Method == http.MethodPost // anything else (GET, HEAD) only shows a form
	if post {
		if !v.canWrite {
			return "", nil, &httpError{http.StatusUnauthorized, v.why}
		}
		r.Body = http.MaxBytesReader(nil, r.Body, 2*maxFieldLen)
		if err := r.ParseForm(); err != nil { // the do field names the token's purpose
			return "", nil, badRequest("the form does not parse: %v", err)
		}
		name = r.PostForm.Get("do")
		if err := h.checkPost(r, v.sess, "action:"+name); err != nil {
			return "", nil, err
		}
	}
	if name == "" {
		return "actions", d, nil
	}
	a := actionByName(name)
	if a == nil {
		return "", nil, notFound("no action %q", cut(name, 64))
	}
	d.Action, d.Step = a, "form"
	form := r.URL.Query()
	if post {
		form = r.PostForm
	}
	for _, f := range a.Fields {
		val := form.Get(f.Name)
		if len(val) > maxFieldLen {
			return "", nil, badRequest("field %s is %d bytes long; at most %d are taken", f.Name, len(val), maxFieldLen)
		}
		if val == "" && !post {
			val = f.Default
		}
		f.Value = val
		d.Fields = append(d.Fields, f)
	}
	vals := url.Values{}
	for _, f := range d.Fields {
		vals.Set(f.Name, f.Value)
	}
	if !post {
		if v.canWrite {
			h.anonSession(w, r, &v)
			d.Token = h.sess.token(v.sess, "action:"+a.Name)
		}
		return "actions", d, nil
	}
	plan, err := a.plan(vals)
	if err != nil {
		d.Error = err.Error()
		d.Token = h.sess.token(v.sess, "action:"+a.Name)
		w.WriteHeader(http.StatusBadRequest)
		return "actions", d, nil
	}
	d.Plan = plan
	if form.Get("step") != "confirm" {
		d.Step, d.Hidden, d.Token = "confirm", vals, h.sess.token(v.sess, "action:"+a.Name)
		return "actions", d, nil
	}
	d.Step = "done"
	inv := func(ctx context.Context, req *remoting.Command) (*remoting.Command, error) {
		return b.ConsoleInvoke(ctx, remoteAddr(r), v.sessUser(), v.sessSecret(), req)
	}
	res, err := a.run(ctx, b, inv, vals)
	user := v.user
	if user == "" {
		user = "(no ACL) " + remoteAddr(r).Addr().String()
	}
	if err != nil {
		d.Error = err.Error()
		h.cfg.Logger.Warn("console action refused", "user", user, "action", a.Name, "plan", plan, "err", err)
		var rf *refused
		if errors.As(err, &rf) && rf.code == remoting.NoPermission {
			w.WriteHeader(http.StatusForbidden)
		}
		return "actions", d, nil
	}
	d.Result = res
	h.cfg.Logger.Info("console action", "user", user, "action", a.Name, "plan", plan, "result", res)
	return "actions", d, nil
}

func (v viewer) sessUser() string {
	if v.sess == nil {
		return ""
	}
	return v.sess.user
}

func (v viewer) sessSecret() string {
	if v.sess == nil {
		return ""
	}
	return v.sess.secret
}

// canRead reports whether the viewer may read topic's messages: without
// an ACL anyone may (as /metrics); with one, the signed-in user must have
// SUB on it, asked of the broker with GET_MIN_OFFSET (which needs SUB on
// the topic) sent as the user.
func (h *Handler) canRead(ctx context.Context, b Broker, r *http.Request, v viewer, topic string) error {
	if !v.acl {
		return nil
	}
	if v.sess == nil {
		return &httpError{http.StatusUnauthorized, "the broker checks requests (ACL): sign in to browse messages"}
	}
	req := remoting.NewRequest(remoting.GetMinOffset, (&remoting.QueueRequestHeader{Topic: topic, QueueID: 0}).Encode(), nil)
	if _, err := ok(b.ConsoleInvoke(ctx, remoteAddr(r), v.sess.user, v.sess.secret, req)); err != nil {
		return forbidden("user %s may not read topic %s: %v", v.sess.user, topic, err)
	}
	return nil
}
