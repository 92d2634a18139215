package broker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/offsets"
)

// Node runs the broker of one data dir through its HA role changes
// (package failover, wire_failover.go): each role is a generation, a
// Broker made by New and run by Run; when Run returns a *RoleChange the
// next generation starts on the same data dir in the new role. Without STRATAMQ_HA_FAILOVER there is one
// generation, as with New and Run.
type Node struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	cur     atomic.Pointer[Broker]
	changes atomic.Int64
	started func(*Broker) // called with each generation once it is made
}

// NewNode returns a node for cfg; Run starts it. started, if set, is
// called with every generation's broker before it runs.
func NewNode(cfg Config, deps Deps, started func(*Broker)) *Node {
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	return &Node{cfg: cfg, deps: deps, log: deps.Logger.With("component", "node"), started: started}
}

// Broker is the running generation (nil before the first one is made).
func (n *Node) Broker() *Broker { return n.cur.Load() }

// RoleChanges is how many times the node changed role (a slave that
// starts a new generation to follow a new master is not a change).
func (n *Node) RoleChanges() int64 { return n.changes.Load() }

// Run runs generations until ctx ends or one fails.
func (n *Node) Run(ctx context.Context) error {
	cfg := n.cfg
	var lease *offsets.Lease
	var holdOff time.Duration
	var masterCut *int64
	var restartAt int64
	var afresh bool
	var pace genPace
	for {
		deps := n.deps
		deps.lease, lease = lease, nil
		deps.holdOff, holdOff = holdOff, 0
		deps.masterCut, masterCut = masterCut, nil
		deps.restartAt, restartAt = restartAt, 0
		deps.afresh, afresh = afresh, false
		gen := &genRegisterer{inner: n.deps.Registerer}
		if deps.Registerer != nil {
			deps.Registerer = gen
		}
		b, err := New(roleConfig(cfg), deps)
		if err != nil {
			if cfg.HAFailover && cfg.Role != RoleSlave && errors.Is(err, offsets.ErrLeaseHeld) {
				n.log.Info("failover: the bucket lease is another broker's, or goes to a better copy of the log; starting as a slave", "reason", err)
				cfg.Role = RoleSlave
				continue
			}
			return err
		}
		b.fo.SetNodeRole(n.cfg.Role)
		b.setFailovers(n.changes.Load())
		n.cur.Store(b)
		if n.started != nil {
			n.started(b)
		}
		began := time.Now()
		err = b.Run(ctx)
		gen.unregisterAll()
		var rc *RoleChange
		if !errors.As(err, &rc) {
			return err
		}
		if ctx.Err() != nil {
			// Stopped while changing role: the generation stopped cleanly;
			// a lease taken for the next one goes back at once.
			if rc.Lease != nil {
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := rc.Lease.Release(rctx)
				cancel()
				return err
			}
			return nil
		}
		if rc.Role != cfg.Role { // not a slave re-following a new holder
			n.changes.Add(1)
		}
		cfg.Role, lease, holdOff = rc.Role, rc.Lease, rc.HoldOff
		if rc.Diverged {
			masterCut = &rc.MasterCut
		}
		restartAt, afresh = rc.RestartAt, rc.Afresh
		if wait := pace.next(time.Since(began), rc.Lease != nil); wait > 0 {
			// Generations that end as soon as they start (a slave that
			// cannot follow its master and restores afresh, again and
			// again) would otherwise spin, hammering the bucket and the
			// master. A lease in hand is never kept waiting.
			n.log.Warn("the broker's generations keep ending at once; waiting before the next", "wait", wait, "role", cfg.Role, "reason", err)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

// genPace spaces out a node's generations that end as soon as they start:
// the first quick restart goes at once, each further one in a row waits
// twice as long as the one before (genPaceMin to genPaceMax); a
// generation that lived genPaceQuick or longer starts the count again.
type genPace struct {
	quick int // quick restarts in a row
}

const (
	genPaceQuick = 5 * time.Second
	genPaceMin   = 100 * time.Millisecond
	genPaceMax   = 30 * time.Second
)

// next returns how long to wait before the generation after one that
// lived for lived (0: none); withLease: the next one holds a lease.
func (p *genPace) next(lived time.Duration, withLease bool) time.Duration {
	if lived >= genPaceQuick {
		p.quick = 0
		return 0
	}
	p.quick++
	if withLease || p.quick < 2 {
		return 0
	}
	return min(genPaceMin<<min(p.quick-2, 16), genPaceMax)
}

// roleConfig is cfg for its role: a master registers as brokerId 0, a
// slave under its configured id (1 when the configured role was master).
func roleConfig(cfg Config) Config {
	if cfg.Role == RoleSlave {
		if cfg.BrokerID == 0 {
			cfg.BrokerID = 1
		}
		return cfg
	}
	cfg.BrokerID = 0
	return cfg
}

// genRegisterer registers a generation's collectors and unregisters them
// when it ends, so the next generation can register its own.
type genRegisterer struct {
	inner prometheus.Registerer
	mu    sync.Mutex
	cs    []prometheus.Collector
}

func (g *genRegisterer) Register(c prometheus.Collector) error {
	if err := g.inner.Register(c); err != nil {
		return err
	}
	g.mu.Lock()
	g.cs = append(g.cs, c)
	g.mu.Unlock()
	return nil
}

func (g *genRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := g.Register(c); err != nil {
			panic(err)
		}
	}
}

func (g *genRegisterer) Unregister(c prometheus.Collector) bool { return g.inner.Unregister(c) }

func (g *genRegisterer) unregisterAll() {
	if g.inner == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.cs {
		g.inner.Unregister(c)
	}
	g.cs = nil
}
