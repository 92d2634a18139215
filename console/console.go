package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/console/history"
	"github.com/stratamq/stratamq/msgtrace"
	"github.com/stratamq/stratamq/remoting"
)

// Broker is what the console reads from the broker. Every method is
// read-only; *broker.Broker implements them in broker/console_view.go
// (TierStatus in rc880_tier_status.go).
type Broker interface {
	ConsoleStatus() broker.ConsoleStatus
	TierStatus(ctx context.Context) broker.TierStatus
	TierRequests() broker.TierRequests
	ConsoleTopics(ctx context.Context, name string, detail bool) ([]broker.ConsoleTopic, error)
	ConsoleGroups() []broker.ConsoleGroup
	ConsoleMessages(ctx context.Context, topic string, queueID int32, from int64, n, preview int) ([]broker.ConsoleMessage, int64, error)
	ConsoleOffsetAtTime(ctx context.Context, topic string, queueID int32, tsMillis int64) (int64, error)
	ConsoleMessagesByKey(ctx context.Context, topic, key string, n, preview int) ([]broker.ConsoleMessage, error)
	ConsoleMessageByID(ctx context.Context, id string, preview int) (broker.ConsoleMessage, error)
	ConsoleTrace(ctx context.Context, msgID, traceTopic string) ([]msgtrace.Leg, string, error)
	ConsoleLocalFrom(ctx context.Context, topic string, queueID int32) (int64, error)
	// Sign-in and actions (broker/console_actions.go).
	ConsoleACL() bool
	ConsoleAuthenticate(user, secret string) error
	ConsoleInvoke(ctx context.Context, remote netip.AddrPort, user, secret string, req *remoting.Command) (*remoting.Command, error)
}

var _ Broker = (*broker.Broker)(nil)

// Config is the console's setup.
type Config struct {
	// Broker returns the running broker (a Node's current generation); nil
	// while there is none, which the pages answer 503.
	Broker func() Broker
	// Version is the binary's version, shown on the overview.
	Version string
	// Timeout bounds each request's work (default 15s).
	Timeout time.Duration
	// Logger receives failed page loads (default slog.Default()).
	Logger *slog.Logger
	// NoBrowse, when not empty, turns the message browser off and says
	// why: the broker checks signatures (STRATAMQ_ACL_FILE, or ACL 2.0's
	// users), and the console's pages are not signed requests, so showing
	// message bodies on the HTTP port would bypass the topics'
	// permissions. The other pages (status,
	// offsets, lag, tier) show what /metrics shows.
	NoBrowse string
	// Hosts are the host names (no port) the console answers to, besides
	// IP addresses and localhost: a request whose Host header names any
	// other is refused (403), so a web page of another site whose name an
	// attacker rebinds to the broker's address (DNS rebinding) cannot read
	// the console through the browser of someone who can reach it.
	// Compared without case and a trailing dot.
	Hosts []string
	// Write takes writes from any address when the broker has no ACL
	// (STRATAMQ_CONSOLE_WRITE); by default only from loopback. With an ACL
	// a signed-in user is needed, wherever they are.
	Write bool
	// SessionTTL is how long a sign-in lasts (default 8h).
	SessionTTL time.Duration
	// Now is the clock of sessions and tokens (tests; default time.Now).
	Now func() time.Time
	// History is the metric history the charts page draws (nil: no
	// charts); Prices the bucket's prices its cost chart uses (zero:
	// DefaultPrices).
	History *history.Store
	Prices  Prices
}

// maxMessagePages is how many message pages are read at once; more wait
// (until their request ends). With broker.ConsoleMaxMessages previews of
// broker.ConsoleMaxPreview bytes each and one record in memory at a time,
// the console's message memory is bounded by this times the largest
// message.
const maxMessagePages = 2

//go:embed templates/*.html static/*
var assets embed.FS

// Handler serves the console's pages. Create it with New.
type Handler struct {
	cfg   Config
	pages map[string]*template.Template // by page name (templates/<name>.html)
	mux   *http.ServeMux
	sem   chan struct{} // message pages being read
	sess  *sessions
	limit loginLimiter
}

// New builds the console's handler; it panics only if the embedded
// templates do not parse (a build error, caught by every test).
func New(cfg Config) *Handler {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 8 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Prices == (Prices{}) {
		cfg.Prices = DefaultPrices
	}
	h := &Handler{cfg: cfg, pages: map[string]*template.Template{}, mux: http.NewServeMux(), sem: make(chan struct{}, maxMessagePages),
		sess: newSessions(cfg.SessionTTL, cfg.Now)}
	for _, name := range []string{"overview", "topics", "topic", "groups", "tier", "messages", "error", "login", "actions", "charts"} {
		h.pages[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html"))
	}
	css, err := fs.ReadFile(assets, "static/console.css")
	if err != nil {
		panic(err)
	}
	h.mux.HandleFunc("/static/console.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = w.Write(css)
	})
	h.mux.HandleFunc("/{$}", h.page(read(h.overview)))
	h.mux.HandleFunc("/topics", h.page(read(h.topics)))
	h.mux.HandleFunc("/topic", h.page(read(h.topic)))
	h.mux.HandleFunc("/groups", h.page(read(h.groups)))
	h.mux.HandleFunc("/tier", h.page(read(h.tier)))
	h.mux.HandleFunc("/messages", h.page(read(h.messages)))
	h.mux.HandleFunc("/charts", h.page(read(h.charts)))
	h.mux.HandleFunc("/login", h.page(h.login))
	h.mux.HandleFunc("/logout", h.page(h.logout))
	h.mux.HandleFunc("/actions", h.page(h.actions))
	h.mux.HandleFunc("/action", h.page(h.actions))
	h.mux.HandleFunc("/", h.page(read(func(ctx context.Context, b Broker, r *http.Request) (string, any, error) {
		return "", nil, notFound("no console page at %s", r.URL.Path)
	})))
	return h
}

// ServeHTTP answers GET and HEAD, and POST on the write routes (sign-in,
// sign-out, actions), which check the session, the form token and the
// origin (auth.go, write.go); every other method is 405.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.hostAllowed(r.Host) {
		http.Error(w, fmt.Sprintf("the web console answers only to its host names (STRATAMQ_HTTP_HOSTS), IP addresses and localhost; Host %s is not one of them (add it to STRATAMQ_HTTP_HOSTS if it is this broker's name)",
			strconv.QuoteToASCII(cut(r.Host, 64))), http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// same-origin: no referrer leaves for another site, and the browser
	// names this console in Origin on its own form posts (with no-referrer
	// it sends "null", which the write check cannot tell from a sandboxed
	// page's).
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("X-Frame-Options", "DENY")
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
	case r.Method == http.MethodPost && (r.URL.Path == "/login" || r.URL.Path == "/logout" || r.URL.Path == "/action"):
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method "+r.Method+" is not allowed on "+cut(r.URL.Path, 64)+" (GET and HEAD are; POST on /login, /logout and /action)", http.StatusMethodNotAllowed)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// pageFunc reads what a page shows: the template's name and its data.
type pageFunc func(ctx context.Context, b Broker, r *http.Request) (name string, data any, err error)

// pageWFunc is a page that may set headers (cookies), redirect
// (errRedirected) or write its status first.
type pageWFunc func(ctx context.Context, b Broker, w http.ResponseWriter, r *http.Request) (name string, data any, err error)

// read adapts a read-only page.
func read(f pageFunc) pageWFunc {
	return func(ctx context.Context, b Broker, _ http.ResponseWriter, r *http.Request) (string, any, error) {
		return f(ctx, b, r)
	}
}

// httpError is an error with the status it is answered with.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func forbidden(format string, args ...any) error {
	return &httpError{http.StatusForbidden, fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &httpError{http.StatusNotFound, fmt.Sprintf(format, args...)}
}

// layoutData wraps a page's data with what the layout shows.
type layoutData struct {
	Title   string
	Nav     string // the page name, for the menu
	Broker  string // cluster / broker name
	Role    string
	Version string
	Now     time.Time
	Page    any
	// User is the signed-in user ("" none); SignIn whether the broker has
	// accounts to sign in with; LogoutToken the sign-out form's token.
	User        string
	SignIn      bool
	LogoutToken string
}

// page turns a pageFunc into a handler: it bounds the request's context,
// checks the query string, renders into a buffer (so a failure is a clean
// error page, never half a page) and sets the status.
func (h *Handler) page(f pageWFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		w = sw
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
		defer cancel()
		w.Header().Set("Cache-Control", "no-store")
		b := h.cfg.Broker()
		ld := layoutData{Version: h.cfg.Version, Now: time.Now().UTC()}
		var name string
		var data any
		var err error
		switch {
		case len(r.URL.RawQuery) > maxQueryLen:
			err = &httpError{http.StatusBadRequest, fmt.Sprintf("the query string is %d bytes long; at most %d are accepted", len(r.URL.RawQuery), maxQueryLen)}
		case b == nil:
			err = &httpError{http.StatusServiceUnavailable, "the broker is not running (starting, or changing role); try again in a moment"}
		default:
			st := b.ConsoleStatus()
			ld.Broker, ld.Role = st.HA.Cluster+" / "+st.HA.BrokerName, st.HA.Role
			name, data, err = f(ctx, b, w, r)
			if errors.Is(err, errRedirected) {
				return
			}
			if ld.SignIn = b.ConsoleACL(); ld.SignIn {
				if x := h.sess.get(r, false); x != nil {
					ld.User, ld.LogoutToken = x.user, h.sess.token(x, "logout")
				}
			}
		}
		status := http.StatusOK
		if sw.status != 0 {
			status = sw.status // the page's own (a refused sign-in: 401)
		}
		if err != nil {
			var he *httpError
			switch {
			case errors.As(err, &he):
				status = he.status
			case ctx.Err() != nil && r.Context().Err() == nil:
				status = http.StatusGatewayTimeout
				err = fmt.Errorf("the page took longer than %s: %w", h.cfg.Timeout, err)
			case r.Context().Err() != nil:
				return // the client went away
			default:
				status = http.StatusInternalServerError
				h.cfg.Logger.Warn("console page failed", "path", r.URL.Path, "query", r.URL.RawQuery, "err", err)
			}
			name, data = "error", errorData{Status: status, StatusText: http.StatusText(status), Message: err.Error()}
		}
		ld.Nav, ld.Page = name, data
		ld.Title = titles[name]
		var buf bytes.Buffer
		if err := h.pages[name].Execute(&buf, ld); err != nil {
			h.cfg.Logger.Error("console template failed", "page", name, "err", err)
			http.Error(w, "the console failed to render this page", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		sw.ResponseWriter.WriteHeader(status)
		_, _ = w.Write(buf.Bytes())
	}
}

// statusWriter holds back a page's WriteHeader: page writes the status
// once, with the rendered page (or the redirect, which writes at once).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if code >= 300 && code < 400 {
		s.ResponseWriter.WriteHeader(code) // a redirect is the whole answer
		return
	}
	s.status = code
}

var titles = map[string]string{
	"overview": "Broker", "topics": "Topics", "topic": "Topic", "groups": "Consumer groups",
	"tier": "Tier", "messages": "Messages", "error": "Error", "login": "Sign in", "actions": "Actions", "charts": "Charts",
}

type errorData struct {
	Status     int
	StatusText string
	Message    string
}

// hostAllowed reports whether a request's Host header (host or host:port)
// names this console: an IP address (no name to rebind), localhost, or
// one of Config.Hosts. An empty Host (HTTP/1.0, no browser) is allowed.
func (h *Handler) hostAllowed(host string) bool {
	if host == "" {
		return true
	}
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if strings.EqualFold(host, "localhost") || len(host) > len(".localhost") && strings.EqualFold(host[len(host)-len(".localhost"):], ".localhost") {
		return true
	}
	for _, n := range h.cfg.Hosts {
		if strings.EqualFold(host, strings.TrimSuffix(n, ".")) {
			return true
		}
	}
	return false
}

// cut is s cut to n bytes.
func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
