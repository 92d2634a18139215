package broker

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stratamq/stratamq/filter"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Subscription is one group's subscription to one topic, as heartbeats
// declare it, with the tag codes the broker filters consumequeue entries by.
type Subscription struct {
	Topic          string
	SubString      string
	ExpressionType string
	SubVersion     int64
	Tags           []string
	// codes holds TagsHash of every tag; nil means "*" (match all).
	codes map[int64]struct{}
	// SQL is the compiled expression of an SQL92 subscription
	// (sql_filter.go); nil for TAG. Err, when set, is why the
	// subscription cannot be served: its pulls are answered with it.
	SQL *filter.Expr
	Err *subError
}

// ParseSubscription parses a TAG expression such as "TagA || TagC" or "*".
// Tag codes are recomputed from the tag strings with the broker's own hash,
// so client-go (UTF-8) and Java (UTF-16) agree for non-ASCII tags.
func ParseSubscription(topic, expr, exprType string) Subscription {
	s := Subscription{Topic: topic, SubString: expr, ExpressionType: exprType}
	e := strings.TrimSpace(expr)
	if e == "" || e == "*" {
		return s
	}
	s.codes = map[int64]struct{}{}
	for _, t := range strings.Split(e, "||") {
		if t = strings.TrimSpace(t); t != "" {
			s.Tags = append(s.Tags, t)
			s.codes[store.TagsHash(t)] = struct{}{}
		}
	}
	if len(s.codes) == 0 {
		s.codes = nil
	}
	return s
}

// MatchAll reports whether the subscription takes every tag (an SQL92
// subscription does: it filters records, not tags).
func (s Subscription) MatchAll() bool { return s.codes == nil }

// Match reports whether a consumequeue entry's tag code passes the filter.
func (s Subscription) Match(tagsCode int64) bool {
	if s.codes == nil {
		return true
	}
	_, ok := s.codes[tagsCode]
	return ok
}

type consumerClient struct {
	clientID   string
	conn       *remoting.Conn
	lastUpdate time.Time
}

type consumerGroup struct {
	consumeType      string
	messageModel     string
	consumeFromWhere string
	clients          map[string]*consumerClient // by clientID
	subs             map[string]Subscription    // by topic
}

// ConsumerManager is RocketMQ's ConsumerManager: the live consumers of each
// group (from heartbeats) and the group's subscriptions. A client goes away
// when its connection closes, on UNREGISTER_CLIENT, or after ClientExpiry
// without a heartbeat. Safe for concurrent use.
type ConsumerManager struct {
	mu struct {
		sync.Mutex
		groups map[string]*consumerGroup
	}
}

// NewConsumerManager returns an empty manager.
func NewConsumerManager() *ConsumerManager {
	m := &ConsumerManager{}
	m.mu.groups = map[string]*consumerGroup{}
	return m
}

// ConsumerRegistration is what one heartbeat says about one group.
type ConsumerRegistration struct {
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
func (m *ConsumerManager) Register(r ConsumerRegistration) (changed bool, notify []*remoting.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.mu.groups[r.Group]
	if g == nil {
		g = &consumerGroup{clients: map[string]*consumerClient{}, subs: map[string]Subscription{}}
		m.mu.groups[r.Group] = g
	}
	g.consumeType, g.messageModel, g.consumeFromWhere = r.ConsumeType, r.MessageModel, r.ConsumeFromWhere
	c := g.clients[r.ClientID]
	if c == nil {
		changed = true
		c = &consumerClient{clientID: r.ClientID}
		g.clients[r.ClientID] = c
	} else if c.conn != r.Conn {
		changed = true
	}
	c.conn, c.lastUpdate = r.Conn, r.Now
	for _, s := range r.Subscriptions {
		if old, ok := g.subs[s.Topic]; !ok || old.SubString != s.SubString || old.SubVersion < s.SubVersion {
			g.subs[s.Topic] = s
		}
	}
	// Forget topics no client subscribes to any more only when this is the
	// only client: otherwise another client's heartbeat holds them.
	if len(g.clients) == 1 {
		keep := map[string]bool{}
		for _, s := range r.Subscriptions {
			keep[s.Topic] = true
		}
		for t := range g.subs {
			if !keep[t] {
				delete(g.subs, t)
			}
		}
	}
	if changed {
		notify = g.connsLocked(r.Conn)
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
func (m *ConsumerManager) Unregister(group, clientID string, conn *remoting.Conn) []*remoting.Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.mu.groups[group]
	if g == nil {
		return nil
	}
	if c, ok := g.clients[clientID]; !ok || conn != nil && c.conn != conn {
		return nil
	}
	delete(g.clients, clientID)
	if len(g.clients) == 0 {
		delete(m.mu.groups, group)
		return nil
	}
	return g.connsLocked(nil)
}

// removeWhere drops clients for which drop returns true and returns, per
// affected group that still has clients, the conns to notify.
func (m *ConsumerManager) removeWhere(drop func(*consumerClient) bool) map[string][]*remoting.Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]*remoting.Conn{}
	for name, g := range m.mu.groups {
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
			delete(m.mu.groups, name)
			continue
		}
		out[name] = g.connsLocked(nil)
	}
	return out
}

// ConnClosed drops every client that used conn.
func (m *ConsumerManager) ConnClosed(conn *remoting.Conn) map[string][]*remoting.Conn {
	return m.removeWhere(func(c *consumerClient) bool { return c.conn == conn })
}

// Expire drops clients whose last heartbeat is older than now-maxAge.
func (m *ConsumerManager) Expire(now time.Time, maxAge time.Duration) map[string][]*remoting.Conn {
	return m.removeWhere(func(c *consumerClient) bool { return now.Sub(c.lastUpdate) > maxAge })
}

// ClientIDs returns the group's live client ids, sorted.
func (m *ConsumerManager) ClientIDs(group string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.mu.groups[group]
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
func (m *ConsumerManager) Conns(group string) map[string]*remoting.Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.mu.groups[group]
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
func (m *ConsumerManager) Subscription(group, topic string) (Subscription, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.mu.groups[group]
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
func (m *ConsumerManager) Connection(group string) (gc GroupConnection, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.mu.groups[group]
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

// Groups returns the groups with live clients, sorted.
func (m *ConsumerManager) Groups() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.mu.groups))
}

// ProducerManager is RocketMQ's ProducerManager: live producer clients per
// group (transaction checks go to one of them).
type ProducerManager struct {
	mu struct {
		sync.Mutex
		groups map[string]map[string]*consumerClient // group → clientID → client
	}
}

// NewProducerManager returns an empty manager.
func NewProducerManager() *ProducerManager {
	m := &ProducerManager{}
	m.mu.groups = map[string]map[string]*consumerClient{}
	return m
}

// Register records a producer heartbeat.
func (m *ProducerManager) Register(group, clientID string, conn *remoting.Conn, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.mu.groups[group]
	if g == nil {
		g = map[string]*consumerClient{}
		m.mu.groups[group] = g
	}
	g[clientID] = &consumerClient{clientID: clientID, conn: conn, lastUpdate: now}
}

// Unregister removes one producer client, when it registered on conn (nil:
// on any): a client id is the client's word, its connection is not.
func (m *ProducerManager) Unregister(group, clientID string, conn *remoting.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.mu.groups[group]; g != nil {
		if c := g[clientID]; c == nil || conn != nil && c.conn != conn {
			return
		}
		delete(g, clientID)
		if len(g) == 0 {
			delete(m.mu.groups, group)
		}
	}
}

func (m *ProducerManager) removeWhere(drop func(*consumerClient) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, g := range m.mu.groups {
		for id, c := range g {
			if drop(c) {
				delete(g, id)
			}
		}
		if len(g) == 0 {
			delete(m.mu.groups, name)
		}
	}
}

// ConnClosed drops every producer that used conn.
func (m *ProducerManager) ConnClosed(conn *remoting.Conn) {
	m.removeWhere(func(c *consumerClient) bool { return c.conn == conn })
}

// Expire drops producers silent for longer than maxAge.
func (m *ProducerManager) Expire(now time.Time, maxAge time.Duration) {
	m.removeWhere(func(c *consumerClient) bool { return now.Sub(c.lastUpdate) > maxAge })
}

// Conn returns a live conn of the group (for transaction checks).
func (m *ProducerManager) Conn(group string) *remoting.Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.mu.groups[group] {
		return c.conn
	}
	return nil
}

// Groups returns producer groups, sorted.
func (m *ProducerManager) Groups() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.mu.groups))
}
