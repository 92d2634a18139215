package main

import (
	"net/http"

	"github.com/stratamq/stratamq/broker"
)

// httpRoute is one more path on the metrics/health listener (serveHTTP).
type httpRoute struct {
	path string
	h    http.Handler
}

// haRoute is GET /ha: the broker's HA status, the JSON body of
// GET_BROKER_HA_STATUS (broker.HAStatusJSON).
func haRoute(cur func() *broker.Broker) httpRoute {
	return httpRoute{"/ha", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "GET /ha: method "+r.Method+" not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(cur().HAStatusJSON(), '\n'))
	})}
}
