package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestServeHTTPPprofOnlyWhenAsked: /debug/pprof/ is served only with
// STRATAMQ_PPROF (withPprof); /metrics and /readyz always are, and /readyz
// says 503 until the broker is ready.
func TestServeHTTPPprofOnlyWhenAsked(t *testing.T) {
	for _, withPprof := range []bool{false, true} {
		t.Run(fmt.Sprintf("pprof=%v", withPprof), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			var ready readiness
			stop := serveHTTP(ln, prometheus.NewRegistry(), &ready, withPprof, slog.New(slog.DiscardHandler))
			defer stop()
			cl := &http.Client{Timeout: 5 * time.Second}
			get := func(path string) int {
				resp, err := cl.Get("http://" + addr + path)
				if err != nil {
					t.Fatalf("GET %s: %v", path, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			if got := get("/readyz"); got != http.StatusServiceUnavailable {
				t.Fatalf("/readyz before ready: %d, want 503", got)
			}
			ready.set()
			if got := get("/readyz"); got != http.StatusOK {
				t.Fatalf("/readyz when ready: %d, want 200", got)
			}
			if got := get("/metrics"); got != http.StatusOK {
				t.Fatalf("/metrics: %d, want 200", got)
			}
			want := http.StatusNotFound
			if withPprof {
				want = http.StatusOK
			}
			if got := get("/debug/pprof/"); got != want {
				t.Fatalf("/debug/pprof/ with pprof=%v: %d, want %d", withPprof, got, want)
			}
		})
	}
}
