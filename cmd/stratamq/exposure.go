package main

import (
	"flag"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// httpTimeouts bound what one HTTP client can hold (issue 14 item 6): a
// slowloris sending its headers a byte at a time is dropped after
// ReadHeader, an idle keep-alive conn after Idle.
type httpTimeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// defaultHTTPTimeouts: requests are small (a POST of the console at most),
// responses are metrics pages and JSON. Write covers all but the pprof
// profile and trace, which stream for ?seconds= (30 by default) and extend
// their own deadline (pprofStreaming). A route that streams longer must
// do the same with http.ResponseController.
var defaultHTTPTimeouts = httpTimeouts{ReadHeader: 5 * time.Second, Read: 30 * time.Second, Write: time.Minute, Idle: 2 * time.Minute}

// newHTTPServer is the HTTP port's server, with timeouts t.
func newHTTPServer(h http.Handler, t httpTimeouts) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, WriteTimeout: t.Write,
		IdleTimeout: t.Idle, MaxHeaderBytes: 64 << 10}
}

// maxProfileSeconds caps a pprof profile's or trace's write deadline.
const maxProfileSeconds = 600

// pprofStreaming lets h (pprof.Profile, pprof.Trace) write for its
// ?seconds= (default 30, at most maxProfileSeconds) plus a margin, past
// the server's WriteTimeout.
func pprofStreaming(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		secs, err := strconv.Atoi(r.FormValue("seconds"))
		if err != nil || secs <= 0 {
			secs = 30
		}
		secs = min(secs, maxProfileSeconds)
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Duration(secs)*time.Second + 30*time.Second))
		h(w, r)
	}
}

// aclFileSetting is STRATAMQ_ACL_FILE's value, found by its env tag so this
// file does not depend on where the ACL's setting is declared ("" when
// there is none: the ACL is off).
func aclFileSetting(cfg Config) string {
	for _, s := range bindFlags(flag.NewFlagSet("", flag.ContinueOnError), valueOf(&cfg), setOf("ACL_FILE")) {
		return strings.TrimSpace(s.v.String())
	}
	return ""
}

// warnOpenWithoutACL logs one warning when the ACL is off (aclFile empty)
// and a remoting port listens beyond loopback (issue 14 item 6). listens
// maps a variable (STRATAMQ_LISTEN) to its address; "" addresses are
// skipped.
func warnOpenWithoutACL(log *slog.Logger, aclFile string, listens map[string]string) {
	if aclFile != "" {
		return
	}
	var exposed []string
	for _, name := range []string{"STRATAMQ_NAMESRV_LISTEN", "STRATAMQ_LISTEN", "STRATAMQ_GRPC_LISTEN", "STRATAMQ_HA_LISTEN", "STRATAMQ_HTTP_LISTEN"} {
		addr, ok := listens[name]
		if !ok || addr == "" || isLoopbackListen(addr) {
			continue
		}
		exposed = append(exposed, name+"="+addr)
	}
	if len(exposed) == 0 {
		return
	}
	log.Warn("STRATAMQ_ACL_FILE is not set (ACL off) and ports listen beyond loopback: anyone who reaches them can send, consume, "+
		"delete topics and reset offsets; set STRATAMQ_ACL_FILE, or listen on 127.0.0.1, or keep the ports behind a firewall (docs/operations.md: Ports and exposure)",
		"exposed", strings.Join(exposed, " "))
}

// isLoopbackListen reports whether a listen address binds loopback only
// (":9876" and "0.0.0.0:9876" bind every interface).
func isLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
