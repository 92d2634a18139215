package schedule

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/broker/progress"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/store"
)

// Queue names one schedule queue: a delay level's queue of DelayTopic or
// a timer queue of TimerTopic.
type Queue struct {
	Topic string
	ID    int32
}

// Store is the part of the local store the service reads and writes
// (*store.Store).
type Store interface {
	MaxPhysOffset() int64
	MinPhysOffset() int64
	MaxQueueOffset(topic string, queueID int32) int64
	MinQueueOffset(topic string, queueID int32) int64
	QueueEntryContext(ctx context.Context, topic string, queueID int32, idx int64) (phys int64, size int32, tags int64, ok bool, err error)
	ReadRecordContext(ctx context.Context, physOffset int64) ([]byte, error)
	QueryByKey(ctx context.Context, q store.KeyQuery) (store.KeyQueryResult, error)
	Validate(m *store.Message) error
	Put(ctx context.Context, msgs []store.Message) ([]store.PutResult, error)
}

// Topics is the broker's topic table as the service uses it.
type Topics interface {
	// Queues is topic's queue count; ok is false when it does not exist.
	Queues(topic string) (n int32, ok bool)
	// Target is Queues for the real topic of a due message: a consumer
	// group's retry topic that does not exist (any more) is created first.
	Target(topic string) (n int32, ok bool)
	// EnsureSystem creates the system topic with n queues, or grows a
	// schedule topic to n (never shrinks it), and registers it.
	EnsureSystem(topic string, n int32)
}

// Gate says whether the service may store messages now.
type Gate interface {
	// Closing reports that the broker's shutdown began: nothing is stored
	// after its drain began (the final checkpoint's progress is what a
	// restart resumes from).
	Closing() bool
	// WriteGate says whether a write to topic/queueID may be stored now
	// (the broker's send gates: lease, handover, checkpointed queues).
	WriteGate(ctx context.Context, topic string, queueID int32) error
}

// Durability says how far the commitlog is durable for each fault a saved
// progress must survive: local (fdatasynced) and bucket (a restore or a
// failover finds it). Both only grow within a run.
type Durability interface {
	DurableEnds() (local, bucket int64)
}

// Recalls says whether a timer record was recalled (dropped when due).
type Recalls interface {
	Recalled(rec *store.Record) bool
}

// Config is what the service needs of the broker's configuration.
type Config struct {
	// Dir is the config directory delayOffset.json is saved in.
	Dir string
	// Levels are the delay levels (STRATAMQ_DELAY_LEVELS, parsed; at
	// least one), level 1 first.
	Levels []time.Duration
	// TimerMaxDelay is how far ahead a timer may be scheduled.
	TimerMaxDelay time.Duration
	// Retention is the bucket retention (0: none): no timer hop is longer
	// than a quarter of it.
	Retention time.Duration
	// MaxMessageSize is the store's record limit: a due message whose
	// record is clearly under it is not checked against the store
	// (fitDue). 0: every due message is checked.
	MaxMessageSize int
}

// Deps are the service's collaborators.
type Deps struct {
	FS         vfs.FS
	Store      Store
	Topics     Topics
	Gate       Gate
	Durability Durability
	Recalls    Recalls
	Logger     *slog.Logger
	// Now is the clock due times are measured by; nil: time.Now.
	Now func() time.Time
}

// Service delivers DELAY-level and timer messages when due (doc.go). One
// goroutine, Run's, delivers; the other methods may be called from any
// goroutine.
type Service struct {
	cfg     Config
	fs      vfs.FS
	st      Store
	topics  Topics
	gate    Gate
	dur     Durability
	recalls Recalls
	log     *slog.Logger
	now     func() time.Time

	wakeCh chan struct{}
	// stopCh, closed by Close, ends Run; exited is closed when Run returns.
	stopCh   chan struct{}
	stopOnce sync.Once
	started  atomic.Bool
	exited   chan struct{}

	mu   sync.Mutex
	done map[Queue]int64 // guarded by mu: progress per schedule queue
	// steps (guarded by mu) is how each queue's progress got to done in
	// this run, with the commitlog end of the writes each step depends on.
	steps map[Queue]*progress.Log[int64]

	// replayUntil, set as Run begins, bounds the hops an earlier run may
	// have stored already (hopped). Run's alone.
	replayUntil int64
}

// schedWindow bounds timer queue 0's read-ahead; schedBatch the messages
// delivered per queue and store append.
const (
	schedWindow = 4096
	schedBatch  = 256
	schedPoll   = 100 * time.Millisecond
)

// New is the service over an open store, resuming from the progress l
// (Load) clamped to each queue's end (settle). Run starts its delivery.
func New(cfg Config, deps Deps, l *Loaded) *Service {
	s := newService(cfg, deps, l)
	s.settle(l)
	return s
}

// newService is New without settle (its progress as loaded).
func newService(cfg Config, deps Deps, l *Loaded) *Service {
	s := &Service{cfg: cfg, fs: deps.FS, st: deps.Store, topics: deps.Topics, gate: deps.Gate, dur: deps.Durability,
		recalls: deps.Recalls, log: deps.Logger, now: deps.Now,
		wakeCh: make(chan struct{}, 1), done: map[Queue]int64{}, steps: map[Queue]*progress.Log[int64]{},
		stopCh: make(chan struct{}), exited: make(chan struct{})}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if l != nil {
		for k, v := range l.done {
			s.done[k] = v
		}
	}
	return s
}

// Wake makes the service look at its queues now (a timer message due
// within a second was stored). Never blocks; a nil Service ignores it.
func (s *Service) Wake() {
	if s == nil {
		return
	}
	select {
	case s.wakeCh <- struct{}{}:
	default:
	}
}

// Close ends Run (if it runs) and waits for it: the broker calls it as
// its shutdown begins, so nothing is delivered during the drain and the
// final checkpoint has the last progress. Idempotent.
func (s *Service) Close() {
	s.stopOnce.Do(func() { close(s.stopCh) })
	if s.started.Load() {
		<-s.exited
	}
}

// Run delivers due messages until ctx ends or Close is called. It runs on
// a master only, once.
func (s *Service) Run(ctx context.Context) {
	s.started.Store(true)
	defer close(s.exited)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		select {
		case <-s.stopCh:
			cancel() // a round reading the bucket ends at once
		case <-ctx.Done():
		}
	})
	s.replayUntil = s.newestTimerRecord(ctx)
	qs := map[Queue]*schedQueue{}
	backoff := time.Duration(0)
	for {
		wait := schedPoll
		next, err := s.round(ctx, qs, s.now().UnixMilli())
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			wait = backoff
			s.log.Warn("schedule service: delivery failed; retrying", "err", err, "in", wait)
		} else {
			backoff = 0
			if next > 0 {
				wait = min(wait, max(time.Duration(next-s.now().UnixMilli())*time.Millisecond, 0))
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.stopCh:
			t.Stop()
			return
		case <-s.wakeCh:
		case <-t.C:
		}
		t.Stop()
	}
}

// levelDelay is level n's delay (n capped at the last level).
func (s *Service) levelDelay(n int) time.Duration {
	return s.cfg.Levels[min(max(n, 1), len(s.cfg.Levels))-1]
}

// timerQueues is the number of timer queues the maximum delay needs.
func (s *Service) timerQueues() int32 { return timerQueuesFor(s.cfg.TimerMaxDelay) }

// queues is a schedule topic's queue count (0: it does not exist yet).
func (s *Service) queues(topic string) int32 {
	n, _ := s.topics.Queues(topic)
	return n
}
