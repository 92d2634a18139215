package tiering

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// Config is what a Tiering is built with: the broker's settings it goes
// by, read once at New.
type Config struct {
	Bucket tier.Bucket // already scoped to <cluster>/<brokerName>/
	FS     vfs.FS      // the data dir's filesystem
	// DataDir: the spool dir is <DataDir>/spool when FS is vfs.OS().
	DataDir string
	// ReadOnly: a slave's view of its master's bucket (STRATAMQ_ROLE=slave).
	ReadOnly       bool
	CacheSize      int64         // the cold reader's cache (STRATAMQ_CACHE_SIZE)
	CommitDelay    time.Duration // STRATAMQ_TIER_COMMIT_DELAY
	Layout         string        // STRATAMQ_TIER_LAYOUT ("queue": queue-major objects)
	LocalRetention int64         // STRATAMQ_LOCAL_RETENTION
	SegmentMaxAge  time.Duration // STRATAMQ_SEGMENT_MAX_AGE
	SegmentSize    int64         // STRATAMQ_SEGMENT_SIZE
	Retention      time.Duration // STRATAMQ_RETENTION (0: unlimited)
	// OwnIndexObjects: indexes are uploaded as objects of their own, with
	// their segment, not inside it (the format before sections; tests only).
	OwnIndexObjects bool
	// ListOutOfOrder: the uploader lists a commitlog object while one
	// below it is still missing (upload.Config.ListOutOfOrder; tests only).
	ListOutOfOrder bool
}

// Deps is what a Tiering calls: the store, the prefix's ownership, the
// retention policy, a logger and where its metrics register.
type Deps struct {
	Store      Store
	Owner      Owner
	Retention  Retention
	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: no metrics
}

// Store is the local log Tiering uploads from and drops from.
type Store interface {
	SealedSegments() []store.SegmentInfo
	LocalSegments() []store.SegmentInfo
	SealActive() error
	DropSegment(base int64) error
	MinPhysOffset() int64
	SetMinPhysOffset(off int64) error
	MaxPhysOffset() int64
	MinQueueOffset(topic string, queueID int32) int64
	MaxQueueOffset(topic string, queueID int32) int64
	OpenKeyIndex(ctx context.Context, base int64) (vfs.File, int64, error)
	KeyIndexPart(base, from, to int64) ([]byte, error)
	BuildSegmentIndex(base int64) ([]byte, error)
	BuildSegmentIndexPart(base, from, to int64) ([]byte, error)
	WriteSegmentIndex(base int64, f store.SegmentIndexFile) (int64, error)
	SegmentLayout(base int64) ([]store.LayoutRun, error)
	ReleaseIndexPlan(base int64)
	SegmentBytes(base int64) (data []byte, release func(), ok bool)
	SyncThrough(off int64) error
}

// Owner is this broker's hold on the bucket prefix (its lease).
type Owner interface {
	// Fence reports whether this broker may still write to the prefix
	// (upload.Config.Fence); an error matching offsets.ErrFenced when not.
	Fence() (int64, error)
	// Fenced reports whether another broker owns the prefix now.
	Fenced() bool
	// ValidFor is how long the lease stays valid without a renewal
	// (upload.Config.ValidFor).
	ValidFor() time.Duration
	// ReadManifest reads the prefix's manifest at start (the lease holder
	// claims it first: upload.ClaimManifest).
	ReadManifest(ctx context.Context) (*upload.Manifest, error)
}

// Retention is the per-topic retention policy bucket retention applies.
type Retention interface {
	// HasOverride reports whether some topic overrides STRATAMQ_RETENTION.
	HasOverride() bool
	// PinnedFloor is the commitlog offset of the oldest undelivered
	// scheduled message (-1: none): nothing from there is deleted.
	PinnedFloor(ctx context.Context) int64
	// ExpireTopics raises queue minima by each topic's retention; defFloor
	// is where the default rule puts the floor (-1: none).
	ExpireTopics(ctx context.Context, now time.Time, defFloor int64) error
}
