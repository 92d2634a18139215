package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stratamq/stratamq/broker/compaction"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Store is the part of the local store retention reads and moves
// (*store.Store).
type Store interface {
	MinPhysOffset() int64
	MinQueueOffset(topic string, queueID int32) int64
	MaxQueueOffset(topic string, queueID int32) int64
	EarliestStoreTimeContext(ctx context.Context, topic string, queueID int32) (int64, error)
	QueueOffsetAtTime(ctx context.Context, topic string, queueID int32, tsMillis int64) (int64, error)
	QueueOffsetAtPhys(ctx context.Context, topic string, queueID int32, phys int64) (int64, error)
	// RaiseQueueMins raises queue minima, durably (never lowers one).
	RaiseQueueMins(mins []store.QueueMin) error
}

// Topics is the broker's topic table as retention reads it.
type Topics interface {
	// Configs is every topic, sorted by name.
	Configs() []remoting.TopicConfig
}

// Pins are what the broker's own services keep from expiring.
type Pins interface {
	// Saved is the progress of the internal queues the broker consumes
	// itself (schedule and timer queues, transaction half and op queues)
	// in the last checkpoint written; nil when none was (a slave, no
	// bucket).
	Saved() []store.QueueMin
}

// Holds says what the bucket's commitlog objects hold (tiering reads
// their queue index directories and decides which may go): for the
// report.
type Holds interface {
	BucketHolds(ctx context.Context) (BucketHolds, error)
}

// BucketHolds is every commitlog object the manifest lists, and per topic
// the objects kept only because of it (its records are the only unexpired
// ones there).
type BucketHolds struct {
	Segments int
	Bytes    int64
	Held     map[string]Held
}

// Held is the objects one topic alone keeps in the bucket.
type Held struct {
	Segments int
	Bytes    int64
}

// Config is what retention needs of the broker's configuration.
type Config struct {
	// Default is STRATAMQ_RETENTION, the retention of every topic without
	// an override (0: unlimited).
	Default time.Duration
}

// Deps is what the service reads the broker through. Holds is nil
// without a bucket.
type Deps struct {
	Store  Store
	Topics Topics
	Pins   Pins
	Holds  Holds
	Logger *slog.Logger
}

// Service is per-topic retention's policy: each topic's retention, the
// queue minima it raises by them, and the report. Tiering asks it
// (HasOverride, ExpireTopics) and decides which bucket segments go.
type Service struct {
	cfg    Config
	st     Store
	topics Topics
	pins   Pins
	holds  Holds
	log    *slog.Logger
}

// New returns the service.
func New(cfg Config, d Deps) *Service {
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, st: d.Store, topics: d.Topics, pins: d.Pins, holds: d.Holds, log: log}
}

// ExpireTopics raises queue minima by each topic's retention (doc.go);
// defFloor is where the default rule puts the store's floor (-1: none).
func (s *Service) ExpireTopics(ctx context.Context, now time.Time, defFloor int64) error {
	st := s.st
	var raise []store.QueueMin
	var errs []error
	for _, tc := range s.topics.Configs() {
		d, override := s.Of(tc)
		if override && d < 0 || !override && defFloor <= st.MinPhysOffset() {
			continue
		}
		if compaction.IsCompacted(tc.Attributes) {
			continue // compaction decides what it keeps: a min moved past its records would lose keys
		}
		cutoff := now.Add(-d).UnixMilli()
		for q := range queueCount(tc) {
			mn, mx := st.MinQueueOffset(tc.TopicName, q), st.MaxQueueOffset(tc.TopicName, q)
			if mn >= mx {
				continue
			}
			var to int64
			var err error
			if override {
				if ts, err := st.EarliestStoreTimeContext(ctx, tc.TopicName, q); err == nil && ts >= cutoff {
					continue // the oldest is kept: nothing to do (one record read)
				}
				to, err = st.QueueOffsetAtTime(ctx, tc.TopicName, q, cutoff)
			} else {
				to, err = st.QueueOffsetAtPhys(ctx, tc.TopicName, q, defFloor)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("expire %s/%d: %w", tc.TopicName, q, err))
				continue
			}
			if to > mn {
				raise = append(raise, store.QueueMin{Topic: tc.TopicName, QueueID: q, Min: to})
			}
		}
	}
	raise = append(raise, s.expireInternal()...)
	if len(raise) > 0 {
		if err := st.RaiseQueueMins(raise); err != nil {
			errs = append(errs, err)
		} else {
			s.log.Debug("per-topic retention raised queue minima", "queues", len(raise))
		}
	}
	return errors.Join(errs...)
}

// expireInternal returns the minima of the internal queues the broker
// consumes itself (the schedule and timer queues, the transaction half and
// op queues) raised to their progress in the last checkpoint written: a
// record below it is delivered or resolved, never read again, and a
// restore resumes from there at the earliest. Without it a segment holding
// one delivered delayed message or resolved half stayed in the bucket for
// ever (system topics keep the default retention, unlimited unless
// STRATAMQ_RETENTION is set). A slave (no checkpoint written) raises none.
func (s *Service) expireInternal() []store.QueueMin {
	var out []store.QueueMin
	for _, p := range s.pins.Saved() {
		if p.Min > s.st.MinQueueOffset(p.Topic, p.QueueID) {
			out = append(out, p)
		}
	}
	return out
}
