package consumers

import (
	"maps"
	"slices"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// The producer half of the Registry: live producer clients per group.

// RegisterProducer records a producer heartbeat.
func (r *Registry) RegisterProducer(group, clientID string, conn *remoting.Conn, now time.Time) {
	r.prods.Lock()
	defer r.prods.Unlock()
	g := r.prods.groups[group]
	if g == nil {
		g = map[string]*client{}
		r.prods.groups[group] = g
	}
	g[clientID] = &client{clientID: clientID, conn: conn, lastUpdate: now}
}

// UnregisterProducer removes one producer client, when it registered on conn (nil:
// on any): a client id is the client's word, its connection is not.
func (r *Registry) UnregisterProducer(group, clientID string, conn *remoting.Conn) {
	r.prods.Lock()
	defer r.prods.Unlock()
	if g := r.prods.groups[group]; g != nil {
		if c := g[clientID]; c == nil || conn != nil && c.conn != conn {
			return
		}
		delete(g, clientID)
		if len(g) == 0 {
			delete(r.prods.groups, group)
		}
	}
}

func (r *Registry) dropProducers(drop func(*client) bool) {
	r.prods.Lock()
	defer r.prods.Unlock()
	for name, g := range r.prods.groups {
		for id, c := range g {
			if drop(c) {
				delete(g, id)
			}
		}
		if len(g) == 0 {
			delete(r.prods.groups, name)
		}
	}
}

// ProducerConn returns a live conn of the group (for transaction checks).
func (r *Registry) ProducerConn(group string) *remoting.Conn {
	r.prods.Lock()
	defer r.prods.Unlock()
	for _, c := range r.prods.groups[group] {
		return c.conn
	}
	return nil
}

// ProducerGroups returns producer groups, sorted.
func (r *Registry) ProducerGroups() []string {
	r.prods.Lock()
	defer r.prods.Unlock()
	return slices.Sorted(maps.Keys(r.prods.groups))
}
