package namesrv

import (
	"context"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// TestNamesrvHoldRoutesUntilBrokerRegisters: with HoldRoutes, route
// queries wait for the named broker's first registration (another
// broker's does not end the wait) and are answered with its route; many
// held queries occupy no worker (the registration gets through); once the
// broker registered, queries are answered at once. A query that waits
// longer than max is answered from the tables as they are.
func TestNamesrvHoldRoutesUntilBrokerRegisters(t *testing.T) {
	e := start(t, Config{})
	release := e.ns.HoldRoutes("broker-a", time.Minute, time.Hour)
	defer release()
	type answer struct {
		code int32
		err  error
	}
	ask := func(topic string) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			cl := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			h := remoting.GetRouteInfoRequestHeader{Topic: topic}
			resp, err := cl.Invoke(ctx, e.addr, remoting.NewRequest(remoting.GetRouteinfoByTopic, h.Encode(), nil))
			if err != nil {
				out <- answer{err: err}
				return
			}
			out <- answer{code: resp.Code}
		}()
		return out
	}
	var held []<-chan answer
	for range 40 { // more than the default pool's 16 workers
		held = append(held, ask("TopicA"))
	}
	other := brokerA
	other.name, other.addr = "broker-b", "10.0.0.2:10911"
	e.register(t, nil, other) // not the broker waited for
	select {
	case a := <-held[0]:
		t.Fatalf("a route query was answered (%d, %v) before broker-a registered", a.code, a.err)
	case <-time.After(200 * time.Millisecond):
	}
	e.register(t, nil, brokerA)
	for i, ch := range held {
		if a := <-ch; a.err != nil || a.code != int32(remoting.Success) {
			t.Fatalf("held query %d: code %d, %v; want the route", i, a.code, a.err)
		}
	}
	if r := e.routeOf(t, "NoSuchTopic"); r != nil {
		t.Fatalf("route of an unknown topic: %+v", r)
	}

	// A hold whose broker never comes: each answer waits at most max.
	e2 := start(t, Config{})
	defer e2.ns.HoldRoutes("broker-z", 50*time.Millisecond, time.Hour)()
	if r := e2.routeOf(t, "TopicA"); r != nil {
		t.Fatalf("route with no broker: %+v", r)
	}
}
