package namesrv

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/remoting"
)

// Config configures a NameServer. Zero values mean defaults.
type Config struct {
	// BrokerExpiry removes a broker that has not re-registered for this
	// long, unless its registration asked for another timeout. Default 120 s.
	BrokerExpiry time.Duration `env:"NAMESRV_BROKER_EXPIRY"`
	// ScanInterval is how often Run looks for expired brokers. Default 5 s.
	ScanInterval time.Duration `env:"NAMESRV_SCAN_INTERVAL"`
	// Clock returns the current time; tests set it. Default time.Now.
	Clock  func() time.Time `env:"-"`
	Logger *slog.Logger     `env:"-"`
	// ACL, when set (STRATAMQ_ACL_FILE), protects the codes that change
	// routes or KV config: REGISTER_BROKER, UNREGISTER_BROKER, the KV
	// writes and DELETE_TOPIC_IN_NAMESRV need an admin account's
	// signature. Route and KV reads stay open. The caller runs its
	// reloader.
	ACL *acl.ACL `env:"-"`
	// Users, when set (ACL 2.0's authentication, STRATAMQ_AUTHENTICATION_ENABLED),
	// signs off the same codes first: a request whose AccessKey names a
	// user is taken only when its signature checks against that user's
	// password and the user is a Super user; one that names no user goes
	// to ACL when set, and is refused when not.
	Users func(accessKey string) (secret acl.Secret, super bool, ok bool) `env:"-"`
}

const (
	defaultBrokerExpiry = 120 * time.Second
	defaultScanInterval = 5 * time.Second
)

func (c Config) withDefaults() Config {
	if c.BrokerExpiry <= 0 {
		c.BrokerExpiry = defaultBrokerExpiry
	}
	if c.ScanInterval <= 0 {
		c.ScanInterval = defaultScanInterval
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// brokerKey identifies a live broker address within its cluster.
type brokerKey struct {
	cluster string
	addr    string
}

// liveBroker is one registered broker address.
type liveBroker struct {
	brokerName   string
	brokerID     int64
	lastUpdate   time.Time
	timeout      time.Duration
	dataVersion  remoting.DataVersion
	haServerAddr string
	connID       uint64 // conn it last registered on; 0 = unknown
}

// NameServer holds the routing tables and serves the name-server request
// codes. It implements remoting.Handler.
type NameServer struct {
	cfg Config
	log *slog.Logger

	// mu guards the tables; it is never held across I/O.
	mu struct {
		sync.RWMutex
		topics   map[string]map[string]remoting.QueueData // topic → broker name → queues
		brokers  map[string]*remoting.BrokerData          // broker name → addresses
		clusters map[string]map[string]struct{}           // cluster → broker names
		live     map[brokerKey]*liveBroker
		kv       map[string]map[string]string // namespace → key → value
	}

	hold routeHold // route answers waiting for a broker's first registration (hold.go)

	// refusals rate-limits the warnings about refused requests (ACL,
	// takeovers): a flood of them must not flood the log.
	refusals struct {
		sync.Mutex
		last       time.Time
		suppressed int
	}
}

// warnLimited logs a refusal, at most one a second; the next line logged
// says how many were left out.
func (ns *NameServer) warnLimited(msg string, args ...any) {
	ns.refusals.Lock()
	now := time.Now()
	if now.Sub(ns.refusals.last) < time.Second {
		ns.refusals.suppressed++
		ns.refusals.Unlock()
		return
	}
	n := ns.refusals.suppressed
	ns.refusals.last, ns.refusals.suppressed = now, 0
	ns.refusals.Unlock()
	if n > 0 {
		args = append(args, "refusals not logged since the last one", n)
	}
	ns.log.Warn(msg, args...)
}

// New returns a name server with empty tables. It starts nothing.
func New(cfg Config) *NameServer {
	cfg = cfg.withDefaults()
	ns := &NameServer{cfg: cfg, log: cfg.Logger}
	ns.mu.topics = make(map[string]map[string]remoting.QueueData)
	ns.mu.brokers = make(map[string]*remoting.BrokerData)
	ns.mu.clusters = make(map[string]map[string]struct{})
	ns.mu.live = make(map[brokerKey]*liveBroker)
	ns.mu.kv = make(map[string]map[string]string)
	return ns
}

// Handler returns ns as a remoting.Handler.
func (ns *NameServer) Handler() remoting.Handler { return ns }

// Run scans for expired brokers every ScanInterval until ctx is done. It
// returns nil when ctx ends.
func (ns *NameServer) Run(ctx context.Context) error {
	t := time.NewTicker(ns.cfg.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			ns.ScanNotActiveBrokers()
		}
	}
}

// ServeRemoting dispatches one request by code.
func (ns *NameServer) ServeRemoting(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	if resp, decided := ns.checkUser(req); decided {
		if resp != nil {
			ns.warnLimited("namesrv: request refused (ACL 2.0)", "code", remoting.RequestCode(req.Code), "peer", peerOf(c), "remark", resp.Remark)
			return resp
		}
	} else if ns.cfg.ACL != nil {
		if resp := ns.cfg.ACL.CheckNamesrv(c, req); resp != nil {
			ns.warnLimited("namesrv: request refused by the ACL", "code", remoting.RequestCode(req.Code), "peer", peerOf(c), "remark", resp.Remark)
			return resp
		}
	}
	switch remoting.RequestCode(req.Code) {
	case remoting.PutKVConfig:
		return ns.putKVConfig(req)
	case remoting.GetKVConfig:
		return ns.getKVConfig(req)
	case remoting.DeleteKVConfig:
		return ns.deleteKVConfig(req)
	case remoting.RegisterBroker:
		return ns.registerBroker(c, req)
	case remoting.UnregisterBroker:
		return ns.unregisterBroker(c, req)
	case remoting.GetRouteinfoByTopic:
		if ns.heldRoute(c, req) {
			return nil // answered when the hold ends (hold.go)
		}
		return ns.getRouteInfoByTopic(req)
	case remoting.GetBrokerClusterInfo:
		return ns.getBrokerClusterInfo(req)
	case remoting.GetAllTopicListFromNameserver:
		return ns.getAllTopicList(req)
	case remoting.DeleteTopicInNamesrv:
		return ns.deleteTopicInNamesrv(req)
	case remoting.GetKVListByNamespace:
		return ns.getKVListByNamespace(req)
	case remoting.GetTopicsByCluster:
		return ns.getTopicsByCluster(req)
	case remoting.QueryDataVersion:
		return ns.queryDataVersion(c, req)
	}
	return remoting.NotSupported(req)
}

// badRequest answers a request whose header did not decode, as Java does
// (SYSTEM_ERROR with the reason).
func badRequest(req *remoting.Command, err error) *remoting.Command {
	return remoting.NewResponse(req, remoting.SystemError, err.Error())
}

// peerOf is c's remote address for logs ("" without a conn).
func peerOf(c *remoting.Conn) string {
	if c == nil {
		return ""
	}
	return c.RemoteAddr().String()
}

// OnConnClose removes every broker that registered on c, and only those: a
// registration made on another conn is never rebound to c (see
// refuseTakeoverLocked). Wire it into remoting.ServerConfig.OnClose.
func (ns *NameServer) OnConnClose(c *remoting.Conn) {
	id := c.ID()
	ns.mu.Lock()
	var gone []brokerKey
	for k, lb := range ns.mu.live {
		if lb.connID == id {
			gone = append(gone, k)
		}
	}
	for _, k := range gone {
		ns.removeBrokerLocked(k)
	}
	ns.mu.Unlock()
	for _, k := range gone {
		ns.log.Info("namesrv: broker connection closed, broker removed", "cluster", k.cluster, "addr", k.addr)
	}
}

// ScanNotActiveBrokers removes brokers whose registration has expired and
// returns how many it removed. Run calls it every ScanInterval.
func (ns *NameServer) ScanNotActiveBrokers() int {
	now := ns.cfg.Clock()
	ns.mu.Lock()
	var gone []brokerKey
	for k, lb := range ns.mu.live {
		if now.Sub(lb.lastUpdate) > lb.timeout {
			gone = append(gone, k)
		}
	}
	for _, k := range gone {
		ns.removeBrokerLocked(k)
	}
	ns.mu.Unlock()
	for _, k := range gone {
		ns.log.Warn("namesrv: broker expired, removed", "cluster", k.cluster, "addr", k.addr)
	}
	return len(gone)
}

// removeBrokerLocked forgets one broker address: its liveness entry, its
// place in brokerAddrs, and — when its broker name has no address left —
// the broker name and its queue data.
func (ns *NameServer) removeBrokerLocked(k brokerKey) {
	lb, ok := ns.mu.live[k]
	delete(ns.mu.live, k)
	name := ""
	if ok {
		name = lb.brokerName
	}
	for bn, bd := range ns.mu.brokers {
		if name != "" && bn != name {
			continue
		}
		for id, addr := range bd.BrokerAddrs {
			if addr == k.addr {
				delete(bd.BrokerAddrs, id)
			}
		}
		if len(bd.BrokerAddrs) == 0 {
			ns.removeBrokerNameLocked(bd.Cluster, bn)
		}
	}
}

// removeBrokerNameLocked drops a broker name from its cluster and from
// every topic.
func (ns *NameServer) removeBrokerNameLocked(cluster, name string) {
	delete(ns.mu.brokers, name)
	if names, ok := ns.mu.clusters[cluster]; ok {
		delete(names, name)
		if len(names) == 0 {
			delete(ns.mu.clusters, cluster)
		}
	}
	for topic, qds := range ns.mu.topics {
		delete(qds, name)
		if len(qds) == 0 {
			delete(ns.mu.topics, topic)
		}
	}
}

// checkUser is ACL 2.0's check of a name-server admin code (Config.Users):
// decided is false when it does not apply (no Users, a read, or an
// AccessKey that names no user while ACL 1.0 is on to decide).
func (ns *NameServer) checkUser(req *remoting.Command) (resp *remoting.Command, decided bool) {
	code := remoting.RequestCode(req.Code)
	if ns.cfg.Users == nil || !acl.IsNamesrvAdminCode(code) {
		return nil, false
	}
	pairs := req.AppendExtPairs(nil)
	var ak, sig string
	for _, p := range pairs {
		switch p.Key {
		case acl.KeyAccessKey:
			ak = p.Value
		case acl.KeySignature:
			sig = p.Value
		}
	}
	secret, super, ok := ns.cfg.Users(ak)
	switch {
	case !ok && ns.cfg.ACL != nil:
		return nil, false
	case !ok && ak == "":
		return remoting.NewResponse(req, remoting.NoPermission, fmt.Sprintf("ACL: %s (%d) changes the name server's routes or KV config: sign it as a Super user", code, req.Code)), true
	case !ok:
		return remoting.NewResponse(req, remoting.NoPermission, fmt.Sprintf("ACL: User:%s not found", clipName(ak))), true
	case sig == "" || !acl.SignatureOK(pairs, req.Body, secret, sig):
		return remoting.NewResponse(req, remoting.NoPermission, fmt.Sprintf("ACL: signature check failed for User:%s (wrong password, or the request was changed)", clipName(ak))), true
	case !super:
		return remoting.NewResponse(req, remoting.NoPermission, fmt.Sprintf("ACL: User:%s may not %s (%d) on the name server: only a Super user may change routes or KV config", clipName(ak), code, req.Code)), true
	}
	return nil, true
}

// clipName bounds a client-chosen name in a remark.
func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
