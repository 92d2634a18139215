package broker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/broker/tiering"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// Tiering's wiring: its config, and tierHost and tierStore, the adapters
// that implement the interfaces package tiering declares over the broker's
// lease (durability), per-topic retention (package retention) and store. They
// read b.store, b.dur and b.sched when called: the store opens after the
// Tiering is made (the cold reader and cold index are the store's), and
// the schedule service later still.

// indexObjectsForTest, set only by tests, makes brokers created while it
// is set upload a segment's queue and key index as objects of their own
// (commitlog/<base>.idx, .kix), as brokers did before sections: a bucket
// in the old format, for the tests that read one.
var indexObjectsForTest atomic.Bool

// newTiering builds the broker's Tiering over bucket (scoped to its
// prefix); m is the manifest already read at start, if any.
func newTiering(b *Broker, bucket tier.Bucket, reg prometheus.Registerer, m *upload.Manifest) (*tiering.Tiering, error) {
	h := tierHost{b}
	return tiering.New(tierConfig(b, bucket), tiering.Deps{Store: tierStore{b}, Owner: h, Retention: h, Logger: b.log,
		Registerer: reg}, m)
}

func tierConfig(b *Broker, bucket tier.Bucket) tiering.Config {
	return tiering.Config{
		Bucket:          bucket,
		FS:              b.fs,
		DataDir:         b.cfg.DataDir,
		ReadOnly:        b.cfg.Role == RoleSlave,
		CacheSize:       int64(b.cfg.CacheSize),
		CommitDelay:     b.cfg.TierCommitDelay,
		Layout:          b.cfg.TierLayout,
		LocalRetention:  int64(b.cfg.LocalRetention),
		SegmentMaxAge:   b.cfg.SegmentMaxAge,
		SegmentSize:     int64(b.cfg.SegmentSize),
		Retention:       b.cfg.Retention,
		OwnIndexObjects: indexObjectsForTest.Load(),
		ListOutOfOrder:  b.listOutOfOrder,
	}
}

// readManifest reads the bucket's manifest; the lease holder claims it
// first (upload.ClaimManifest: an empty delta under its epoch, if the
// manifest holds an older one), so the manifest it decides where its log
// continues by can no longer be changed by a late commit of a deposed
// holder (one sent before that holder's lease ran out and applied by the
// server after): readers ignore deltas of an older epoch than one the
// manifest holds.
func (b *Broker) readManifest(ctx context.Context, bucket tier.Bucket) (*upload.Manifest, error) {
	if b.dur == nil || b.cfg.Role == RoleSlave {
		m, _, err := upload.LoadManifest(ctx, bucket, upload.ManifestKey(""))
		return m, err
	}
	return upload.ClaimManifest(ctx, bucket, upload.ManifestKey(""), b.dur.ID().Epoch)
}

// leaseValidFor is how long this broker's lease stays valid without a
// renewal (upload.Config.ValidFor): every bucket write of the uploader
// must finish within it. Without a lease (no bucket durability), no bound.
func (b *Broker) leaseValidFor() time.Duration {
	if b.dur == nil {
		return time.Duration(1<<63 - 1)
	}
	return b.dur.Lease().ValidFor()
}

type tierHost struct{ b *Broker }

var (
	_ tiering.Owner     = tierHost{}
	_ tiering.Retention = tierHost{}
	_ tiering.Store     = tierStore{}
)

func (h tierHost) Fence() (int64, error)   { return h.b.fence() }
func (h tierHost) ValidFor() time.Duration { return h.b.leaseValidFor() }

func (h tierHost) Fenced() bool { return h.b.dur != nil && h.b.dur.Fenced() }

func (h tierHost) ReadManifest(ctx context.Context) (*upload.Manifest, error) {
	return h.b.readManifest(ctx, h.b.scoped)
}

func (h tierHost) HasOverride() bool { return h.b.ret.HasOverride() }

func (h tierHost) PinnedFloor(ctx context.Context) int64 { return h.b.sched.PinnedFloor(ctx) }

func (h tierHost) ExpireTopics(ctx context.Context, now time.Time, defFloor int64) error {
	return h.b.ret.ExpireTopics(ctx, now, defFloor)
}

// uploadedEnd is where the bucket's listed commitlog objects end: in m
// (the manifest New read), or in the uploader's (0 without either).
func uploadedEnd(m *upload.Manifest, t *tiering.Tiering) int64 {
	if m == nil && t != nil && t.Uploader() != nil {
		m = t.Uploader().Manifest()
	}
	var end int64
	if m != nil {
		for _, o := range m.CommitLog() {
			end = max(end, o.End())
		}
	}
	return end
}

// tierStore is b.store, read when called.
type tierStore struct{ b *Broker }

func (s tierStore) SealedSegments() []store.SegmentInfo { return s.b.store.SealedSegments() }
func (s tierStore) LocalSegments() []store.SegmentInfo  { return s.b.store.LocalSegments() }
func (s tierStore) SealActive() error                   { return s.b.store.SealActive() }
func (s tierStore) DropSegment(base int64) error        { return s.b.store.DropSegment(base) }
func (s tierStore) MinPhysOffset() int64                { return s.b.store.MinPhysOffset() }
func (s tierStore) SetMinPhysOffset(off int64) error    { return s.b.store.SetMinPhysOffset(off) }
func (s tierStore) MaxPhysOffset() int64                { return s.b.store.MaxPhysOffset() }

func (s tierStore) MinQueueOffset(topic string, queueID int32) int64 {
	return s.b.store.MinQueueOffset(topic, queueID)
}

func (s tierStore) MaxQueueOffset(topic string, queueID int32) int64 {
	return s.b.store.MaxQueueOffset(topic, queueID)
}

func (s tierStore) OpenKeyIndex(ctx context.Context, base int64) (vfs.File, int64, error) {
	return s.b.store.OpenKeyIndex(ctx, base)
}

func (s tierStore) KeyIndexPart(base, from, to int64) ([]byte, error) {
	return s.b.store.KeyIndexPart(base, from, to)
}

func (s tierStore) BuildSegmentIndex(base int64) ([]byte, error) {
	return s.b.store.BuildSegmentIndex(base)
}

func (s tierStore) BuildSegmentIndexPart(base, from, to int64) ([]byte, error) {
	return s.b.store.BuildSegmentIndexPart(base, from, to)
}

func (s tierStore) WriteSegmentIndex(base int64, f store.SegmentIndexFile) (int64, error) {
	return s.b.store.WriteSegmentIndex(base, f)
}

func (s tierStore) SegmentLayout(base int64) ([]store.LayoutRun, error) {
	return s.b.store.SegmentLayout(base)
}

func (s tierStore) ReleaseIndexPlan(base int64) { s.b.store.ReleaseIndexPlan(base) }

func (s tierStore) SegmentBytes(base int64) ([]byte, func(), bool) {
	return s.b.store.SegmentBytes(base)
}

func (s tierStore) SyncThrough(off int64) error { return s.b.store.SyncThrough(off) }

// tierPending is the part of the log not in the bucket (Tiering.PendingRange).
func (b *Broker) tierPending() *durability.OffsetRange {
	from, to := b.tier.PendingRange()
	return &durability.OffsetRange{From: from, To: to}
}

// segmentsEnd is how far the manifest's commitlog objects hold the log
// without a hole from p: the end of the run of objects (and of ranges
// retention expired: what the WAL need not keep either) that covers p, or
// p itself when none does. An expired range counts, or the WAL's oldest
// object, kept by its trims (wal: the newest object stays), would hold
// every trim back once retention expired the segments under it.
func segmentsEnd(m *upload.Manifest, p int64) int64 {
	objs := m.CommitLog()
	for moved := true; moved; {
		moved = false
		for _, o := range objs {
			if o.Base <= p && p < o.End() {
				p, moved = o.End(), true
			}
		}
		if to, ok := m.ExpiredAt(p); ok && to > p {
			p, moved = to, true
		}
	}
	return p
}
