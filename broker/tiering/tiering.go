package tiering

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/upload"
)

// Tiering moves the commitlog between the local disk and the bucket:
//
//   - the uploader (tier/upload) puts every sealed segment into the bucket
//     as a framed zstd object and lists it in the manifest;
//   - once a segment is listed, it may be dropped locally: the oldest
//     uploaded segments go when their bytes exceed STRATAMQ_LOCAL_RETENTION;
//     a segment that is not uploaded is never dropped;
//   - the cold reader (tier/coldread) serves dropped ranges to the store;
//   - the active segment seals after STRATAMQ_SEGMENT_MAX_AGE and at
//     shutdown, so bytes do not stay only local for long;
//   - bucket retention (STRATAMQ_RETENTION) deletes whole objects past the
//     limit, oldest first, after raising the store's floor so consumers
//     behind it get PULL_OFFSET_MOVED.
//
// It implements upload.SegmentSource over the store, and store.ColdIndex
// and store.ColdKeyIndex over the manifest.
//
// Memory does not grow with the upload backlog: a segment's queue index
// is built only when the uploader opens it (one at a time, into a file
// under <data dir>/spool, removed when the uploader closes it), and the
// uploader spools each encoded object there too.
type Tiering struct {
	cfg    Config
	st     Store
	owner  Owner
	ret    Retention
	log    *slog.Logger
	bucket tier.Bucket // already scoped to <cluster>/<brokerName>/

	uploader *upload.Uploader
	cold     *coldread.Reader

	spool string // the uploader's spool dir ("": not on the real filesystem)
	// readOnly: a slave's view of the master's bucket (Config.ReadOnly):
	// the cold reader and the cold index over the manifest read at start
	// (atStart); the uploader is built but never run, and nothing seals,
	// drops, uploads or applies bucket retention (Run and Drain are not
	// called; ReloadManifest reloads the manifest into the cold reader and
	// latest, and MarkCovered lets local retention drop what it covers).
	readOnly bool
	atStart  *upload.Manifest // the manifest read at start; nil if unreadable
	retMu    sync.Mutex       // serializes local-retention passes (uploader and ticker)
	coldMu   sync.Mutex       // serializes telling the cold reader the manifest's objects
	idxSem   chan struct{}    // one queue index blob built and held at a time
	growMu   sync.Mutex       // guards grow
	grow     growth           // moreSoon's last look at the active segment

	latest atomic.Pointer[upload.Manifest] // readOnly: the master's manifest last reloaded (ReloadManifest)

	// ownIndexObjects: indexes are uploaded as objects of their own, with
	// their segment (Config.OwnIndexObjects), not inside it.
	ownIndexObjects bool

	// Hooks are set only by tests, before Run.
	Hooks Hooks

	mu struct {
		sync.Mutex
		uploaded    map[int64]upload.Object // local commitlog segment base → its object
		uploadedIdx map[int64]bool          // segment base → its queue index object is uploaded
		uploadedKix map[int64]bool          // segment base → its key index object is uploaded
	}

	indexObjs atomic.Pointer[IndexTable] // key and queue index objects of the manifest last looked at
	ends      atomic.Pointer[queueEnds]  // UploadedEnds of the newest object

	blocks segmentBlocks // per-topic retention: what keeps each bucket segment (retention.go)
}

// Hooks let tests watch and steer a Tiering; nil fields do nothing.
type Hooks struct {
	SetCold  func([]coldread.Object) error // replaces the cold reader's SetObjects
	Uploaded func(base int64)              // a commitlog segment now counts as uploaded
	Clock    func(time.Time) time.Time     // shifts the time bucket retention goes by
}

// SpoolDir holds the uploader's temporary files; it is emptied at start.
func SpoolDir(dataDir string) string { return filepath.Join(dataDir, "spool") }

// New loads the manifest (bounded: a missing bucket must not stop the
// broker from starting) unless m, the one already read at start, is given,
// and builds the cold reader and the uploader. Nothing runs until Run.
func New(cfg Config, deps Deps, m *upload.Manifest) (*Tiering, error) {
	t := &Tiering{cfg: cfg, st: deps.Store, owner: deps.Owner, ret: deps.Retention, log: deps.Logger,
		bucket: cfg.Bucket, idxSem: make(chan struct{}, 1), readOnly: cfg.ReadOnly}
	bucket, reg := cfg.Bucket, deps.Registerer
	t.mu.uploaded = map[int64]upload.Object{}
	t.mu.uploadedIdx = map[int64]bool{}
	t.mu.uploadedKix = map[int64]bool{}
	var objs []coldread.Object
	var err error
	if m == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err = t.owner.ReadManifest(ctx)
		cancel()
	}
	if err != nil {
		// The uploader keeps retrying; until then dropped segments (there
		// are none we know of) cannot be read, and nothing is dropped.
		t.log.Warn("bucket manifest not readable at start; tiering will catch up", "err", err)
	} else {
		t.atStart = m
		objs = coldread.CommitLogObjects(m)
		for base := range m.Indexes(upload.KindQueueIndex) {
			t.mu.uploadedIdx[base] = true
		}
		for base := range m.Indexes(upload.KindKeyIndex) {
			t.mu.uploadedKix[base] = true
		}
	}
	t.cold, err = coldread.New(coldread.Config{Bucket: bucket, CacheBytes: cfg.CacheSize}, objs)
	if err != nil {
		return nil, err
	}
	// The uploader spools encoded objects to disk, not memory, so an outage
	// costs disk, not heap. Only on the real filesystem: a data dir on
	// another vfs.FS (a test's) is not on the disk os.CreateTemp writes.
	var spool string
	if cfg.FS == vfs.OS() {
		spool = SpoolDir(cfg.DataDir)
		// Whatever is there was left by a crash.
		if err := os.RemoveAll(spool); err != nil {
			t.cold.Close()
			return nil, fmt.Errorf("clear spool dir: %w", err)
		}
		if err := os.MkdirAll(spool, 0o755); err != nil {
			t.cold.Close()
			return nil, fmt.Errorf("create spool dir: %w", err)
		}
	}
	// ManifestDelay (STRATAMQ_TIER_COMMIT_DELAY) batches manifest
	// deltas: an upload waits for the next ones while another runs or
	// moreSoon expects the active segment to seal in time, so at a steady
	// write rate several segments share one PUT. Fence
	// stops every bucket write of a broker that lost the prefix, and
	// ValidFor cancels one that cannot finish while the lease is valid. A
	// segment's queue and key index are sections of its object (one PUT);
	// the pairing applies only to indexes of segments whose object was
	// uploaded before sections, on their own.
	t.spool = spool
	sections := []upload.Kind{upload.KindQueueIndex, upload.KindKeyIndex}
	if t.ownIndexObjects = cfg.OwnIndexObjects; t.ownIndexObjects {
		sections = nil
	}
	t.uploader, err = upload.New(upload.Config{Bucket: bucket, Source: t, Logger: t.log,
		ManifestDelay: cfg.CommitDelay, MoreSoon: t.moreSoon, SpoolDir: spool, Fence: t.owner.Fence, ValidFor: t.owner.ValidFor,
		PairQueueIndex: true, PairKeyIndex: true, ListOutOfOrder: cfg.ListOutOfOrder,
		Sections: sections})
	if err != nil {
		t.cold.Close()
		return nil, err
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{t.uploader, t.cold} {
			if err := reg.Register(c); err != nil {
				t.log.Warn("tier metrics not registered", "err", err)
			}
		}
	}
	return t, nil
}
