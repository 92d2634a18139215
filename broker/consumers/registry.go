package consumers

import (
	"context"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

type client struct {
	clientID   string
	conn       *remoting.Conn
	lastUpdate time.Time
}

type consumerGroup struct {
	consumeType      string
	messageModel     string
	consumeFromWhere string
	clients          map[string]*client      // by clientID
	subs             map[string]Subscription // by topic
}

// Registry is RocketMQ's ConsumerManager and ProducerManager: the live
// consumers of each group (from heartbeats) with the group's
// subscriptions, and the live producers of each group (transaction checks
// go to one of them). A client goes away when its connection closes
// (ConnClosed), on UNREGISTER_CLIENT, or after Config.ClientExpiry without
// a heartbeat (Run's loop); the consumers that remain in a group it left
// are told through the Notifier. Safe for concurrent use.
type Registry struct {
	cfg    Config
	notify Notifier

	// cons guards the consumer groups; never held across a notice.
	cons struct {
		sync.Mutex
		groups map[string]*consumerGroup
	}
	// prods guards the producer groups.
	prods struct {
		sync.Mutex
		groups map[string]map[string]*client // group → clientID → client
	}

	closeOnce sync.Once
	closed    chan struct{}
}

// Config is what the Registry needs of the broker's configuration.
type Config struct {
	// ClientExpiry: a client silent for longer is dropped (Run).
	ClientExpiry time.Duration
	// ExpireEvery is how often Run looks for silent clients (the broker's
	// config flush interval); 0: Run only waits for its end.
	ExpireEvery time.Duration
}

// Notifier tells a group's consumers that its client set changed.
type Notifier interface {
	// ConsumerIdsChanged asks conns, the group's remaining consumers, to
	// rebalance now (NOTIFY_CONSUMER_IDS_CHANGED).
	ConsumerIdsChanged(group string, conns []*remoting.Conn)
}

// NewRegistry returns an empty registry; n may be nil (no notices).
func NewRegistry(cfg Config, n Notifier) *Registry {
	r := &Registry{cfg: cfg, notify: n, closed: make(chan struct{})}
	r.cons.groups = map[string]*consumerGroup{}
	r.prods.groups = map[string]map[string]*client{}
	return r
}

// Run expires silent clients every Config.ExpireEvery until ctx ends or
// Close is called.
func (r *Registry) Run(ctx context.Context) {
	if r.cfg.ExpireEvery <= 0 {
		select {
		case <-ctx.Done():
		case <-r.closed:
		}
		return
	}
	t := time.NewTicker(r.cfg.ExpireEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.closed:
			return
		case now := <-t.C:
			r.Expire(now)
		}
	}
}

// Close ends Run's loop; the registry stays usable.
func (r *Registry) Close() { r.closeOnce.Do(func() { close(r.closed) }) }

// ConnClosed drops every producer and consumer that used conn and notifies
// the consumers that remain in their groups.
func (r *Registry) ConnClosed(conn *remoting.Conn) {
	r.dropProducers(func(c *client) bool { return c.conn == conn })
	r.notifyAll(r.dropConsumers(func(c *client) bool { return c.conn == conn }))
}

// Expire drops producers and consumers whose last heartbeat is older than
// now-Config.ClientExpiry and notifies the consumers that remain in their
// groups.
func (r *Registry) Expire(now time.Time) {
	maxAge := r.cfg.ClientExpiry
	r.notifyAll(r.dropConsumers(func(c *client) bool { return now.Sub(c.lastUpdate) > maxAge }))
	r.dropProducers(func(c *client) bool { return now.Sub(c.lastUpdate) > maxAge })
}

func (r *Registry) notifyAll(byGroup map[string][]*remoting.Conn) {
	if r.notify == nil {
		return
	}
	for group, conns := range byGroup {
		r.notify.ConsumerIdsChanged(group, conns)
	}
}

// Registration is what one heartbeat says about one group.
type Registration struct {
	Group, ClientID                             string
	ConsumeType, MessageModel, ConsumeFromWhere string
	Subscriptions                               []Subscription
	Conn                                        *remoting.Conn
	Now                                         time.Time
}

// Register records a heartbeat. It returns the conns to notify with
// NOTIFY_CONSUMER_IDS_CHANGED when the group's client set changed: the
// other clients of the group. (Java brokers notify the registering client
// too; it rebalances by itself once started, and the redundant notice
// reaches rocketmq-client-go while a short-lived consumer may already be
// shutting down, where the client races on its own state.)
func (r *Registry) Register(reg Registration) (changed bool, notify []*remoting.Conn) {
	r.cons.Lock()
	defer r.cons.Unlock()
	g := r.cons.groups[reg.Group]
	if g == nil {
		g = &consumerGroup{clients: map[string]*client{}, subs: map[string]Subscription{}}
		r.cons.groups[reg.Group] = g
	}
	g.consumeType, g.messageModel, g.consumeFromWhere = reg.ConsumeType, reg.MessageModel, reg.ConsumeFromWhere
	c := g.clients[reg.ClientID]
	if c == nil {
		changed = true
		c = &client{clientID: reg.ClientID}
		g.clients[reg.ClientID] = c
	} else if c.conn != reg.Conn {
		changed = true
	}
	c.conn, c.lastUpdate = reg.Conn, reg.Now
	for _, s := range reg.Subscriptions {
		if old, ok := g.subs[s.Topic]; !ok || old.SubString != s.SubString || old.SubVersion < s.SubVersion {
			g.subs[s.Topic] = s
		}
	}
	// Forget topics no client subscribes to any more only when this is the
	// only client: otherwise another client's heartbeat holds them.
	if len(g.clients) == 1 {
		keep := map[string]bool{}
		for _, s := range reg.Subscriptions {
			keep[s.Topic] = true
		}
		for t := range g.subs {
			if !keep[t] {
				delete(g.subs, t)
			}
		}
	}
	if changed {
		notify = g.connsLocked(reg.Conn)
	}
	return changed, notify
}

// connsLocked returns the conns of the group's clients but except.
func (g *consumerGroup) connsLocked(except *remoting.Conn) []*remoting.Conn {
	out := make([]*remoting.Conn, 0, len(g.clients))
	for _, c := range g.clients {
		if c.conn != nil && c.conn != except {
			out = append(out, c.conn)
		}
	}
	return out
}

// Unregister removes one client from a group, when it registered on conn
// (nil: on any); it returns the conns of the remaining clients to notify.
func (r *Registry) Unregister(group, clientID string, conn *remoting.Conn) []*remoting.Conn {
	r.cons.Lock()
	defer r.cons.Unlock()
	g := r.cons.groups[group]
	if g == nil {
		return nil
	}
	if c, ok := g.clients[clientID]; !ok || conn != nil && c.conn != conn {
		return nil
	}
	delete(g.clients, clientID)
	if len(g.clients) == 0 {
		delete(r.cons.groups, group)
		return nil
	}
	return g.connsLocked(nil)
}

// dropConsumers drops consumers for which drop returns true and returns, per
// affected group that still has clients, the conns to notify.
func (r *Registry) dropConsumers(drop func(*client) bool) map[string][]*remoting.Conn {
	r.cons.Lock()
	defer r.cons.Unlock()
	out := map[string][]*remoting.Conn{}
	for name, g := range r.cons.groups {
		removed := false
		for id, c := range g.clients {
			if drop(c) {
				delete(g.clients, id)
				removed = true
			}
		}
		if !removed {
			continue
		}
		if len(g.clients) == 0 {
			delete(r.cons.groups, name)
			continue
		}
		out[name] = g.connsLocked(nil)
	}
	return out
}

// ClientIDs returns the group's live client ids, sorted.
func (r *Registry) ClientIDs(group string) []string {
	r.cons.Lock()
	defer r.cons.Unlock()
	g := r.cons.groups[group]
	if g == nil {
		return nil
	}
	out := make([]string, 0, len(g.clients))
	for id := range g.clients {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Conns returns the connections of the group's live consumers, by client id.
func (r *Registry) Conns(group string) map[string]*remoting.Conn {
	r.cons.Lock()
	defer r.cons.Unlock()
	g := r.cons.groups[group]
	if g == nil {
		return nil
	}
	out := make(map[string]*remoting.Conn, len(g.clients))
	for id, c := range g.clients {
		out[id] = c.conn
	}
	return out
}

// Subscription returns the group's subscription to topic, from heartbeats.
func (r *Registry) Subscription(group, topic string) (Subscription, bool) {
	r.cons.Lock()
	defer r.cons.Unlock()
	g := r.cons.groups[group]
	if g == nil {
		return Subscription{}, false
	}
	s, ok := g.subs[topic]
	return s, ok
}

// GroupConnection is a group's live consumers and subscriptions, as
// GET_CONSUMER_CONNECTION_LIST answers them.
type GroupConnection struct {
	ConsumeType, MessageModel, ConsumeFromWhere string
	Clients                                     []ClientConn // by client id
	Subscriptions                               []Subscription
}

// ClientConn is one live consumer client.
type ClientConn struct {
	ClientID, Addr string
	LastHeartbeat  time.Time
}

// Connection returns the group's live consumers and subscriptions; ok is
// false when it has none.
func (r *Registry) Connection(group string) (gc GroupConnection, ok bool) {
	r.cons.Lock()
	defer r.cons.Unlock()
	g := r.cons.groups[group]
	if g == nil || len(g.clients) == 0 {
		return gc, false
	}
	gc = GroupConnection{ConsumeType: g.consumeType, MessageModel: g.messageModel, ConsumeFromWhere: g.consumeFromWhere}
	for _, id := range slices.Sorted(maps.Keys(g.clients)) {
		c := g.clients[id]
		addr := ""
		if c.conn != nil {
			addr = c.conn.RemoteAddr().String()
		}
		gc.Clients = append(gc.Clients, ClientConn{ClientID: id, Addr: addr, LastHeartbeat: c.lastUpdate})
	}
	for _, t := range slices.Sorted(maps.Keys(g.subs)) {
		gc.Subscriptions = append(gc.Subscriptions, g.subs[t])
	}
	return gc, true
}

// Groups returns the consumer groups with live clients, sorted.
func (r *Registry) Groups() []string {
	r.cons.Lock()
	defer r.cons.Unlock()
	return slices.Sorted(maps.Keys(r.cons.groups))
}
