package pop

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of the engine (match with errors.Is). Their texts keep the
// "broker:" prefix they had before the engine left package broker: the
// gRPC clients see them.
var (
	// ErrHandle: the receipt handle is malformed, or names no message of
	// this broker.
	ErrHandle = errors.New("broker: invalid receipt handle")
	// ErrHandleExpired: the receipt handle was valid once, but its
	// message has been acked, delivered again, extended (a newer handle
	// replaced it) or dead-lettered since.
	ErrHandleExpired = errors.New("broker: receipt handle expired")
	// ErrInflightLimit: the group, or the broker, has the most messages in
	// flight it keeps track of; nothing more is delivered until some are
	// acked or dead-lettered.
	ErrInflightLimit = errors.New("broker: too many messages in flight")
	// ErrNotMaster: a slave serves no POP consumption.
	ErrNotMaster = errors.New("broker: POP consumption is served by the master only")
	// ErrTopic: the topic does not exist or is not readable.
	ErrTopic = errors.New("broker: topic not readable")
	// ErrGroup: the group may not consume.
	ErrGroup = errors.New("broker: consumer group may not consume")
	// ErrFilter: the filter expression is refused.
	ErrFilter = errors.New("broker: bad filter expression")
	// ErrInvisible: the invisible duration is not in (0, 12 h].
	ErrInvisible = errors.New("broker: bad invisible duration")
)

// Defaults and bounds.
const (
	DefaultMaxInflight          = 100_000
	DefaultMaxInflightPerGroup  = 20_000
	DefaultMaxInflightPerClient = 10_000
	// DefaultMaxBytes bounds one receive's bodies, like one pull's.
	DefaultMaxBytes = 4 << 20
	// DefaultReviveInterval is how often expiry runs.
	DefaultReviveInterval = 100 * time.Millisecond
	// MaxInvisible caps an invisible duration (RocketMQ's 12 h).
	MaxInvisible = 12 * time.Hour

	defaultBatch = 32
	maxBatch     = 1024
	// dlqRetry is how long an entry whose dead-lettering failed waits
	// before it is tried again.
	dlqRetry = time.Second
)

// Engine is the broker's POP consumption state: per group, topic and
// queue, the next offset not read and the messages in flight. It is safe
// for concurrent use. New starts nothing; Run runs the revive loop.
type Engine struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	now  func() time.Time // injectable clock (SetClock)

	maxTotal     int
	maxPerGroup  int
	maxPerClient int
	maxBytes     int

	// mu guards the state below; it is never held across store or bucket
	// I/O (Offsets.Commit is called under it: doc.go, "Lock order").
	mu     sync.Mutex
	groups map[string]*group
	total  int
	// activeGroups counts the groups with entries in flight.
	activeGroups int
	// clients counts the entries each client was delivered last.
	clients map[string]int
	heap    entryHeap // invisible entries by deadline
	dead    []*entry
	// stored: dead-lettered entries whose DLQ copy is not yet durable for
	// every fault; they stay in flight until it is (persist.go).
	stored []*entry
	rr     uint32 // round-robin start over queues
	// version counts changes; saved is the version last persisted locally.
	version uint64

	saveMu sync.Mutex // serializes Save
	saved  uint64     // guarded by saveMu

	// Long polls wait on wake, closed and replaced when something may
	// have become receivable (a dispatch while waiters > 0, a revive, an
	// ack).
	wmu     sync.Mutex
	wake    chan struct{}
	waiters atomic.Int32

	// Lifecycle: Run registers its cancel in runCancel; Close cancels it
	// and waits for running.
	lc        sync.Mutex
	closed    bool
	runCancel context.CancelFunc
	running   sync.WaitGroup
}

// New makes an engine with no state; Load reads the saved one. It starts
// no goroutine.
func New(cfg Config, deps Deps) *Engine {
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	e := &Engine{cfg: cfg, deps: deps, log: deps.Logger, now: time.Now, groups: map[string]*group{},
		clients: map[string]int{}, wake: make(chan struct{})}
	e.maxTotal, e.maxPerGroup, e.maxPerClient = DefaultMaxInflight, DefaultMaxInflightPerGroup, DefaultMaxInflightPerClient
	if n := cfg.MaxInflight; n > 0 {
		e.maxTotal = n
	}
	if n := cfg.MaxInflightPerGroup; n > 0 {
		e.maxPerGroup = n
	}
	if n := cfg.MaxInflightPerClient; n > 0 {
		e.maxPerClient = n
	}
	e.maxBytes = DefaultMaxBytes
	if n := cfg.MaxBytes; n > 0 {
		e.maxBytes = n
	}
	if e.cfg.ReviveInterval <= 0 {
		e.cfg.ReviveInterval = DefaultReviveInterval
	}
	return e
}

// SetClock replaces the engine's clock (tests: a clock that moves only
// when told). Call it before Run and before any request.
func (e *Engine) SetClock(now func() time.Time) { e.now = now }

// Run is the revive loop: expiry every Config.ReviveInterval (the
// engine's deadlines are kept to about that), dead-lettering what is due.
// It returns when ctx is done or Close is called. A slave's broker does
// not run it.
func (e *Engine) Run(ctx context.Context) {
	e.lc.Lock()
	if e.closed {
		e.lc.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.runCancel = cancel
	e.running.Add(1)
	e.lc.Unlock()
	defer e.running.Done()

	t := time.NewTicker(e.cfg.ReviveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.Revive(ctx)
		}
	}
}

// Close stops Run and waits for it to return; a Run after Close returns
// at once. It is idempotent and keeps the state (Save still works).
func (e *Engine) Close() {
	e.lc.Lock()
	e.closed = true
	cancel := e.runCancel
	e.lc.Unlock()
	if cancel != nil {
		cancel()
	}
	e.running.Wait()
}

// Inflight reports how many messages group has in flight (all groups
// when group is empty).
func (e *Engine) Inflight(group string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if group == "" {
		return e.total
	}
	if g := e.groups[group]; g != nil {
		return g.count
	}
	return 0
}

// Waiters reports how many receives wait for a message now.
func (e *Engine) Waiters() int { return int(e.waiters.Load()) }

// ---- long polling ----

// notify wakes every waiting receive.
func (e *Engine) notify() {
	e.wmu.Lock()
	close(e.wake)
	e.wake = make(chan struct{})
	e.wmu.Unlock()
}

// Dispatched is the store's dispatch hook: it wakes waiting receives
// (cheap when none waits).
func (e *Engine) Dispatched() {
	if e.waiters.Load() > 0 {
		e.notify()
	}
}

func (e *Engine) waitChan() <-chan struct{} {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return e.wake
}
