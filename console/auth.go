package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Sign-in and the write policy.
//
// With an ACL (the broker checks requests), writes and the message browser
// need a signed-in user: one of the broker's accounts (ACL 2.0's users, or
// STRATAMQ_ACL_FILE's accounts), checked with its secret. A session is a
// random 256-bit token in an HttpOnly, SameSite=Strict cookie (Secure over
// TLS), kept in memory (at most maxSessions, the oldest dropped first) with
// the user and secret the console signs the user's requests with; it ends
// at its expiry (Config.SessionTTL) or at sign-out, and with the process.
// Without an ACL there are no users: writes are taken only from loopback
// addresses, unless Config.Write (STRATAMQ_CONSOLE_WRITE=true) allows them
// from anywhere.
//
// Every form carries a one-time token (CSRF): a POST must carry a token
// this session was given and not yet used, else it is refused (forged,
// replayed, or from another session). POSTs from another site are refused
// before that: a browser's Sec-Fetch-Site other than same-origin, or an
// Origin header that is not this console's. (SameSite=Strict already keeps
// the cookie off cross-site requests.)

const (
	sessionCookie = "smq_console"
	loginCookie   = "smq_login" // the sign-in form's nonce (no session is kept for it)
	maxSessions   = 1024
	// maxUserSessions is how many sessions one user keeps (the oldest go
	// first): one account signing in again and again never pushes out
	// another's sessions.
	maxUserSessions = 16
	// maxTokens is how many unused form tokens a session keeps (the
	// oldest go first): a page with many forms, several tabs.
	maxTokens = 256
)

type session struct {
	id      string
	user    string
	secret  string // kept in memory to sign the user's requests; never shown or logged
	expires time.Time
	tokens  map[string]formToken // unused form tokens
}

// formToken is an unused form token: what it may be used for (an
// action's name, or "logout") and when it was given.
type formToken struct {
	purpose string
	at      time.Time
}

type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	ttl time.Duration
	now func() time.Time
	// anon holds the form tokens of visitors without a session (no ACL:
	// loopback or STRATAMQ_CONSOLE_WRITE), bound to a cookie of their own.
	anon map[string]*session
	// key signs the sign-in form's tokens (loginToken): random per process.
	key [32]byte
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	s := &sessions{m: map[string]*session{}, anon: map[string]*session{}, ttl: ttl, now: now}
	if _, err := rand.Read(s.key[:]); err != nil {
		panic(err)
	}
	return s
}

// loginToken is the sign-in form's token for the nonce in its cookie:
// an HMAC, so no state is kept per visitor before they sign in (a flood
// of sign-in pages pushes nobody out).
func (s *sessions) loginToken(nonce string) string {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte("login\x00" + nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// loginNonce returns the request's sign-in nonce, setting a new one when
// it has none.
func (s *sessions) loginNonce(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(loginCookie); err == nil && len(c.Value) == 43 {
		return c.Value
	}
	n := randomToken()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: n, Path: "/login", MaxAge: 3600, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return n
}

// checkLogin reports whether a sign-in post carries the token of its
// nonce cookie.
func (s *sessions) checkLogin(r *http.Request, token string) bool {
	c, err := r.Cookie(loginCookie)
	if err != nil || len(c.Value) != 43 {
		return false
	}
	return hmac.Equal([]byte(s.loginToken(c.Value)), []byte(token))
}

func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// create starts a session for user and returns it.
func (s *sessions) create(user, secret string, anon bool) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m
	if anon {
		m = s.anon
	}
	now := s.now()
	for id, x := range m {
		if now.After(x.expires) {
			delete(m, id)
		}
	}
	// The user's own oldest first, past maxUserSessions; then anyone's.
	for {
		var oldest *session
		n := 0
		for _, x := range m {
			if !anon && x.user == user {
				n++
				if oldest == nil || x.expires.Before(oldest.expires) {
					oldest = x
				}
			}
		}
		if n < maxUserSessions || oldest == nil {
			break
		}
		delete(m, oldest.id)
	}
	for len(m) >= maxSessions { // drop the one expiring first
		var oldest *session
		for _, x := range m {
			if oldest == nil || x.expires.Before(oldest.expires) {
				oldest = x
			}
		}
		delete(m, oldest.id)
	}
	x := &session{id: randomToken(), user: user, secret: secret, expires: now.Add(s.ttl), tokens: map[string]formToken{}}
	m[x.id] = x
	return x
}

// get returns the live session of the request's cookie (nil: none).
func (s *sessions) get(r *http.Request, anon bool) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil || len(c.Value) != 43 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m
	if anon {
		m = s.anon
	}
	x := m[c.Value]
	if x == nil {
		return nil
	}
	if s.now().After(x.expires) {
		delete(m, x.id)
		return nil
	}
	return x
}

func (s *sessions) drop(x *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, x.id)
	delete(s.anon, x.id)
}

// token gives session x a new one-time form token for purpose (an
// action's name, or "logout").
func (s *sessions) token(x *session, purpose string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(x.tokens) >= maxTokens {
		var oldK string
		var oldT time.Time
		for k, t := range x.tokens {
			if oldK == "" || t.at.Before(oldT) {
				oldK, oldT = k, t.at
			}
		}
		delete(x.tokens, oldK)
	}
	t := randomToken()
	x.tokens[t] = formToken{purpose: purpose, at: s.now()}
	return t
}

// use consumes token t of session x for purpose: false if x was not
// given it for that purpose, or it was used.
func (s *sessions) use(x *session, t, purpose string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, ft := range x.tokens {
		if subtle.ConstantTimeCompare([]byte(k), []byte(t)) == 1 {
			delete(x.tokens, k)
			return ft.purpose == purpose
		}
	}
	return false
}

func setSessionCookie(w http.ResponseWriter, r *http.Request, x *session) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: x.id, Path: "/", Expires: x.expires,
		MaxAge: int(time.Until(x.expires).Seconds()), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

func clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// remoteAddr is the request's peer address.
func remoteAddr(r *http.Request) netip.AddrPort {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			if a, err := netip.ParseAddr(host); err == nil {
				return netip.AddrPortFrom(a.Unmap(), 0)
			}
		}
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// sameOrigin reports whether a POST comes from this console's own pages:
// a browser sends Sec-Fetch-Site (same-origin) and Origin (this host);
// a request without either (a script, curl) passes this check and still
// needs its form token.
func sameOrigin(r *http.Request) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	if site != "" && site != "same-origin" && site != "none" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if origin == "null" {
		return false
	}
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}
