package broker

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/segfile"
	"github.com/stratamq/stratamq/tier/upload"
)

// tiering moves the commitlog between the local disk and the bucket:
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
// It implements upload.SegmentSource over the store.
//
// Memory does not grow with the upload backlog: a segment's queue index
// is built only when the uploader opens it (one at a time, into a file
// under <data dir>/spool, removed when the uploader closes it), and the
// uploader spools each encoded object there too.
type tiering struct {
	b        *Broker
	bucket   tier.Bucket // already scoped to <cluster>/<brokerName>/
	uploader *upload.Uploader
	cold     *coldread.Reader

	spool string // the uploader's spool dir ("": not on the real filesystem)
	// readOnly: a slave's view of the master's bucket (STRATAMQ_ROLE=slave):
	// the cold reader and the cold index over the manifest read at start
	// (atStart); the uploader is built but never run, and nothing seals,
	// drops, uploads or applies bucket retention (run and drain are not
	// called; slave_follow.go reloads the manifest into the cold reader and
	// latest, and drops local segments it covers).
	readOnly bool
	atStart  *upload.Manifest // the manifest read at start; nil if unreadable
	retMu    sync.Mutex       // serializes local-retention passes (uploader and ticker)
	coldMu   sync.Mutex       // serializes telling the cold reader the manifest's objects
	idxSem   chan struct{}    // one queue index blob built and held at a time
	growMu   sync.Mutex       // guards grow
	grow     growth           // moreSoon's last look at the active segment

	latest atomic.Pointer[upload.Manifest] // readOnly: the master's manifest last reloaded (slave_follow.go)

	// ownIndexObjects: indexes are uploaded as objects of their own, with
	// their segment (indexObjectsForTest), not inside it.
	ownIndexObjects bool

	// testHooks are set only by tests.
	testHooks struct {
		setCold  func([]coldread.Object) error // replaces cold.SetObjects
		uploaded func(base int64)              // a commitlog segment now counts as uploaded
		clock    func(time.Time) time.Time     // shifts the time bucket retention goes by
	}

	mu struct {
		sync.Mutex
		uploaded    map[int64]upload.Object // local commitlog segment base → its object
		uploadedIdx map[int64]bool          // segment base → its queue index object is uploaded
		uploadedKix map[int64]bool          // segment base → its key index object is uploaded
	}

	indexObjs atomic.Pointer[indexTable] // key and queue index objects of the manifest last looked at

	blocks segmentBlocks // per-topic retention: what keeps each bucket segment (retention.go)
}

// indexObjectsForTest, set only by tests, makes brokers created while it
// is set upload a segment's queue and key index as objects of their own
// (commitlog/<base>.idx, .kix), as brokers did before sections: a bucket
// in the old format, for the tests that read one.
var indexObjectsForTest atomic.Bool

// spoolDir holds the uploader's temporary files; it is emptied at start.
func spoolDir(dataDir string) string { return filepath.Join(dataDir, "spool") }

// newTiering loads the manifest (bounded: a missing bucket must not stop
// the broker from starting) unless m, the one already read at start, is
// given, and builds the cold reader and the uploader.
func newTiering(b *Broker, bucket tier.Bucket, reg prometheus.Registerer, m *upload.Manifest) (*tiering, error) {
	t := &tiering{b: b, bucket: bucket, idxSem: make(chan struct{}, 1), readOnly: b.cfg.Role == RoleSlave}
	t.mu.uploaded = map[int64]upload.Object{}
	t.mu.uploadedIdx = map[int64]bool{}
	t.mu.uploadedKix = map[int64]bool{}
	var objs []coldread.Object
	var err error
	if m == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err = b.readManifest(ctx, bucket)
		cancel()
	}
	if err != nil {
		// The uploader keeps retrying; until then dropped segments (there
		// are none we know of) cannot be read, and nothing is dropped.
		b.log.Warn("bucket manifest not readable at start; tiering will catch up", "err", err)
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
	t.cold, err = coldread.New(coldread.Config{Bucket: bucket, CacheBytes: int64(b.cfg.CacheSize)}, objs)
	if err != nil {
		return nil, err
	}
	// The uploader spools encoded objects to disk, not memory, so an outage
	// costs disk, not heap. Only on the real filesystem: a data dir on
	// another vfs.FS (a test's) is not on the disk os.CreateTemp writes.
	var spool string
	if b.fs == vfs.OS() {
		spool = spoolDir(b.cfg.DataDir)
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
	if t.ownIndexObjects = indexObjectsForTest.Load(); t.ownIndexObjects {
		sections = nil
	}
	t.uploader, err = upload.New(upload.Config{Bucket: bucket, Source: t, Logger: b.log,
		ManifestDelay: b.cfg.TierCommitDelay, MoreSoon: t.moreSoon, SpoolDir: spool, Fence: b.fence, ValidFor: b.leaseValidFor,
		PairQueueIndex: true, PairKeyIndex: true,
		Sections: sections})
	if err != nil {
		t.cold.Close()
		return nil, err
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{t.uploader, t.cold} {
			if err := reg.Register(c); err != nil {
				b.log.Warn("tier metrics not registered", "err", err)
			}
		}
	}
	return t, nil
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
	return upload.ClaimManifest(ctx, bucket, upload.ManifestKey(""), b.dur.id.Epoch)
}

// Sealed implements upload.SegmentSource: sealed commitlog segments not
// yet uploaded; the uploader stores each one's queue index and key index
// inside its object (upload.Config.Sections, opened here by Open). A
// segment whose object was uploaded before sections existed, without an
// index object the manifest lists, gets that index uploaded on its own,
// as before. Consumequeue files are not uploaded: every entry of them is
// in the queue index of the segment holding its record (issue 12:
// consumequeue objects were written and never read, and cost a PUT and a
// manifest entry each).
func (t *tiering) Sealed(ctx context.Context) ([]upload.Segment, error) {
	if d := t.b.dur; d != nil && d.Fenced() {
		return nil, nil // another broker owns the prefix now
	}
	segs := t.b.store.SealedSegments()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]upload.Segment, 0, len(segs))
	for _, s := range segs {
		if _, ok := t.mu.uploaded[s.Base]; !ok {
			out = append(out, upload.Segment{Kind: upload.KindCommitLog, Name: s.Path, Base: s.Base, Length: s.Length, SealedAt: s.Created})
			if !t.ownIndexObjects {
				continue
			}
		}
		if !t.mu.uploadedIdx[s.Base] {
			// Built when opened: its length is not known yet.
			out = append(out, upload.Segment{Kind: upload.KindQueueIndex, Name: indexName(s.Base), Base: s.Base,
				Length: -1, SealedAt: s.Created})
		}
		if !t.mu.uploadedKix[s.Base] {
			// Written by the store once the segment seals; waited for in Open.
			out = append(out, upload.Segment{Kind: upload.KindKeyIndex, Name: keyIndexName(s.Base), Base: s.Base,
				Length: -1, SealedAt: s.Created})
		}
	}
	return out, nil
}

// segmentFile is an open sealed segment handed to the uploader.
type segmentFile struct {
	f    vfs.File
	size int64
}

func (s *segmentFile) ReadAt(p []byte, off int64) (int, error) { return s.f.ReadAt(p, off) }
func (s *segmentFile) Size() int64                             { return s.size }
func (s *segmentFile) Close() error                            { return s.f.Close() }

func indexName(base int64) string { return fmt.Sprintf("queueindex:%020d", base) }

func keyIndexName(base int64) string { return fmt.Sprintf("keyindex:%020d", base) }

// blobReader serves a queue index blob to the uploader while it encodes
// it; Close releases the blob and the build slot.
type blobReader struct {
	*bytes.Reader
	release func()
}

func (r *blobReader) Size() int64 { return r.Reader.Size() }

func (r *blobReader) Close() error {
	if r.release != nil {
		r.Reader.Reset(nil)
		r.release()
		r.release = nil
	}
	return nil
}

// indexFile serves a queue index blob built into a spool file; Close
// removes the file and releases the build slot.
type indexFile struct {
	f       *os.File
	size    int64
	release func()
}

func (r *indexFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	if len(p) > int(r.size-off) {
		n, err := r.f.ReadAt(p[:r.size-off], off)
		return n, cmp.Or(err, io.EOF)
	}
	return r.f.ReadAt(p, off)
}

func (r *indexFile) Size() int64 { return r.size }

func (r *indexFile) Close() error {
	if r.release == nil {
		return nil
	}
	err := r.f.Close()
	if rerr := os.Remove(r.f.Name()); err == nil {
		err = rerr
	}
	r.release()
	r.release = nil
	return err
}

// queueIndexPattern names the queue index files in the spool dir (all of
// it is cleared at start).
const queueIndexPattern = "queueindex-*.tmp"

// Open implements upload.SegmentSource. A queue index is built from the
// sealed segment now, while the uploader is about to encode it, and is
// dropped when the uploader closes it (once encoded into its spool file):
// nothing is kept per pending segment. One index is built and held at a
// time; on the real filesystem it is built into a file in the spool dir
// (store.WriteSegmentIndex: a fixed buffer and a few hundred bytes per
// queue of heap, whatever the segment holds), else in memory.
func (t *tiering) Open(ctx context.Context, s upload.Segment) (upload.SegmentReader, error) {
	if s.End != 0 {
		return t.openPart(ctx, s)
	}
	if s.Kind == upload.KindKeyIndex {
		f, size, err := t.b.store.OpenKeyIndex(ctx, s.Base)
		if err != nil {
			return nil, fmt.Errorf("broker: key index of segment %d: %w", s.Base, err)
		}
		return &segmentFile{f: f, size: size}, nil
	}
	if s.Kind == upload.KindQueueIndex {
		select {
		case t.idxSem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		release := func() { <-t.idxSem }
		if t.spool == "" {
			blob, err := t.b.store.BuildSegmentIndex(s.Base)
			if err != nil {
				release()
				return nil, fmt.Errorf("broker: queue index of segment %d: %w", s.Base, err)
			}
			return &blobReader{Reader: bytes.NewReader(blob), release: release}, nil
		}
		f, err := os.CreateTemp(t.spool, queueIndexPattern)
		if err != nil {
			release()
			return nil, fmt.Errorf("broker: queue index of segment %d: %w", s.Base, err)
		}
		r := &indexFile{f: f, release: release}
		if r.size, err = t.b.store.WriteSegmentIndex(s.Base, f); err != nil {
			r.Close()
			return nil, fmt.Errorf("broker: queue index of segment %d: %w", s.Base, err)
		}
		return r, nil
	}
	var layout []segfile.Run
	if s.Kind == upload.KindCommitLog && t.b.cfg.TierLayout == "queue" {
		runs, err := t.b.store.SegmentLayout(s.Base)
		if err != nil {
			return nil, fmt.Errorf("broker: layout of segment %d: %w", s.Base, err)
		}
		layout = segmentLayout(runs)
	}
	f, err := t.b.fs.OpenFile(s.Name, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("broker: open segment %s: %w", s.Name, err)
	}
	if layout != nil {
		return &layoutFile{segmentFile{f: f, size: s.Length}, layout}, nil
	}
	return &segmentFile{f: f, size: s.Length}, nil
}

// openPart opens a part of a local segment the uploader asks for (a
// broker that took over uploads only what the manifest lacks of a local
// segment: upload.Segment.Skip and End): its bytes, in log order, or the
// queue or key index of its records alone.
func (t *tiering) openPart(ctx context.Context, s upload.Segment) (upload.SegmentReader, error) {
	local := s.Base - s.Skip
	switch s.Kind {
	case upload.KindKeyIndex:
		blob, err := t.b.store.KeyIndexPart(local, s.Base, s.End)
		if err != nil {
			return nil, fmt.Errorf("broker: key index of segment %d part [%d, %d): %w", local, s.Base, s.End, err)
		}
		return &blobReader{Reader: bytes.NewReader(blob)}, nil
	case upload.KindQueueIndex:
		select {
		case t.idxSem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		release := func() { <-t.idxSem }
		blob, err := t.b.store.BuildSegmentIndexPart(local, s.Base, s.End)
		if err != nil {
			release()
			return nil, fmt.Errorf("broker: queue index of segment %d part [%d, %d): %w", local, s.Base, s.End, err)
		}
		return &blobReader{Reader: bytes.NewReader(blob), release: release}, nil
	case upload.KindCommitLog:
		f, err := t.b.fs.OpenFile(s.Name, os.O_RDONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("broker: open segment %s: %w", s.Name, err)
		}
		return &partFile{segmentFile{f: f, size: s.Length}, s.Skip}, nil
	}
	return nil, fmt.Errorf("broker: a part of a %s segment", s.Kind)
}

// partFile is the part of a local segment file from off on.
type partFile struct {
	segmentFile
	off int64
}

func (p *partFile) ReadAt(b []byte, off int64) (int, error) {
	if off >= p.size {
		return 0, io.EOF
	}
	if len(b) > int(p.size-off) {
		n, err := p.f.ReadAt(b[:p.size-off], p.off+off)
		return n, cmp.Or(err, io.EOF)
	}
	return p.f.ReadAt(b, p.off+off)
}

// layoutFile is a commitlog segment stored queue-major (upload.Layouter).
type layoutFile struct {
	segmentFile
	layout []segfile.Run
}

func (l *layoutFile) Layout() []segfile.Run { return l.layout }

// segmentLayout is the store's layout of a segment (STRATAMQ_TIER_LAYOUT=
// queue) as segfile's runs: stream positions in order, a group per queue.
// nil (log order) when the store gave none.
func segmentLayout(runs []store.LayoutRun) []segfile.Run {
	if len(runs) == 0 {
		return nil
	}
	out := make([]segfile.Run, len(runs))
	var pos int64
	for i, r := range runs {
		out[i] = segfile.Run{Off: r.Off, Len: r.Len, Pos: pos, Group: int64(r.Group)}
		pos += r.Len
	}
	return out
}

// MarkUploaded implements upload.SegmentSource: the segment is in the
// bucket and listed in the manifest. Whatever serves it once the local
// copy is gone learns it first, and only then does it count as uploaded,
// so local retention may drop it: a commitlog object is told to the cold
// reader (an error leaves the segment not uploaded; the uploader marks it
// again at its next scan). A queue index object is served by ColdIndex
// from the uploader's manifest, which lists it before this is called.
// Consumequeue files stay local; their upload only stops them being listed.
func (t *tiering) MarkUploaded(ctx context.Context, s upload.Segment, obj upload.Object) error {
	switch s.Kind {
	case upload.KindQueueIndex:
		t.mu.Lock()
		t.mu.uploadedIdx[s.Base] = true
		t.mu.Unlock()
		return t.enforceLocalRetention()
	case upload.KindKeyIndex:
		t.mu.Lock()
		t.mu.uploadedKix[s.Base] = true
		t.mu.Unlock()
		return t.enforceLocalRetention()
	}
	if err := t.syncCold(); err != nil {
		return fmt.Errorf("segment %d uploaded, but the cold reader was not told: %w", s.Base, err)
	}
	t.mu.Lock()
	t.mu.uploaded[s.Base] = obj
	if obj.Base != s.Base || obj.End() < s.Base+s.Length {
		// The segment is held by objects of other bounds (a broker that
		// took over: the old master's, and parts this one uploaded), each
		// listed with the indexes of its records.
		t.mu.uploadedIdx[s.Base] = true
		t.mu.uploadedKix[s.Base] = true
	}
	if _, ok := obj.Section(upload.KindQueueIndex); ok {
		t.mu.uploadedIdx[s.Base] = true
	}
	if _, ok := obj.Section(upload.KindKeyIndex); ok {
		t.mu.uploadedKix[s.Base] = true
	}
	t.mu.Unlock()
	if h := t.testHooks.uploaded; h != nil {
		h(s.Base)
	}
	t.b.log.Debug("segment uploaded", "base", s.Base, "bytes", s.Length, "object", obj.Key, "objectBytes", obj.Size)
	return t.enforceLocalRetention()
}

// syncCold tells the cold reader the commitlog objects of the uploader's
// current manifest. Serialized, with the manifest read under the lock, so
// an older manifest never replaces a newer one in the cold reader.
func (t *tiering) syncCold() error {
	t.coldMu.Lock()
	defer t.coldMu.Unlock()
	m := t.uploader.Manifest()
	if m == nil {
		return errors.New("manifest not loaded yet")
	}
	set := t.cold.SetObjects
	if t.testHooks.setCold != nil {
		set = t.testHooks.setCold
	}
	return set(coldread.CommitLogObjects(m))
}

// enforceLocalRetention drops the oldest uploaded local segments while
// their bytes exceed STRATAMQ_LOCAL_RETENTION.
func (t *tiering) enforceLocalRetention() error {
	t.retMu.Lock()
	defer t.retMu.Unlock()
	segs := t.b.store.SealedSegments()
	sort.Slice(segs, func(i, j int) bool { return segs[i].Base < segs[j].Base })
	// The store drops only its oldest segment, so candidates are the
	// uploaded prefix of the sealed segments: stop at the first one that
	// is not uploaded yet.
	t.mu.Lock()
	var kept int64
	var candidates []store.SegmentInfo
	prefix := true
	for _, s := range segs {
		_, up := t.mu.uploaded[s.Base]
		up = up && t.mu.uploadedIdx[s.Base] && t.mu.uploadedKix[s.Base] // the bytes and their queue and key indexes
		if up {
			kept += s.Length
		}
		if up && prefix {
			candidates = append(candidates, s)
		} else {
			prefix = false
		}
	}
	t.mu.Unlock()
	limit := int64(t.b.cfg.LocalRetention)
	for _, s := range candidates {
		if kept <= limit {
			break
		}
		if err := t.b.store.DropSegment(s.Base); err != nil {
			return fmt.Errorf("drop segment %d: %w", s.Base, err)
		}
		kept -= s.Length
		t.mu.Lock()
		delete(t.mu.uploaded, s.Base)
		delete(t.mu.uploadedIdx, s.Base)
		delete(t.mu.uploadedKix, s.Base)
		t.mu.Unlock()
		t.b.log.Debug("local segment dropped after upload", "base", s.Base, "bytes", s.Length)
	}
	return nil
}

// leaseValidFor is how long this broker's lease stays valid without a
// renewal (upload.Config.ValidFor): every bucket write of the uploader
// must finish within it. Without a lease (no bucket durability), no bound.
func (b *Broker) leaseValidFor() time.Duration {
	if b.dur == nil {
		return time.Duration(1<<63 - 1)
	}
	return b.dur.lease.ValidFor()
}

// run owns the uploader and the housekeeping loop until ctx ends.
func (t *tiering) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := t.uploader.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.b.log.Error("uploader stopped", "err", err)
		}
	})
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case now := <-tick.C:
			t.sealIfOld(now)
			if err := t.enforceLocalRetention(); err != nil {
				t.b.log.Warn("local retention", "err", err)
			}
			if h := t.testHooks.clock; h != nil {
				now = h(now)
			}
			if err := t.enforceBucketRetention(ctx, now); err != nil && ctx.Err() == nil {
				t.b.log.Warn("bucket retention", "err", err)
			}
		}
	}
}

// moreSoon implements upload.Config.MoreSoon: whether the active segment
// is expected to seal within d, by age (SegmentMaxAge) or by size at the
// rate it grew since the last call (since it was created, on the first
// call for it). A producer that stops makes the rate 0, so finished
// uploads are listed at the next ask, not after the whole delay.
func (t *tiering) moreSoon(d time.Duration) bool {
	var act *store.SegmentInfo
	for _, s := range t.b.store.LocalSegments() {
		if !s.Sealed {
			act = &s
		}
	}
	if act == nil || act.Created.IsZero() {
		return false
	}
	now := time.Now()
	if act.Length > 0 && now.Add(d).Sub(act.Created) >= t.b.cfg.SegmentMaxAge {
		return true
	}
	t.growMu.Lock()
	prev := t.grow
	t.grow = growth{base: act.Base, length: act.Length, at: now}
	t.growMu.Unlock()
	var rate float64 // bytes a second
	if el := now.Sub(prev.at); prev.base == act.Base && !prev.at.IsZero() && el > 0 {
		rate = float64(act.Length-prev.length) / el.Seconds()
	} else if el := now.Sub(act.Created); el > 0 {
		rate = float64(act.Length) / el.Seconds()
	}
	if rate <= 0 {
		return false
	}
	return float64(int64(t.b.cfg.SegmentSize)-act.Length)/rate <= d.Seconds()
}

// growth is the active segment's length when moreSoon last looked.
type growth struct {
	base, length int64
	at           time.Time
}

// sealIfOld seals a non-empty active segment older than SegmentMaxAge.
func (t *tiering) sealIfOld(now time.Time) {
	for _, s := range t.b.store.LocalSegments() {
		if s.Sealed || s.Length == 0 || s.Created.IsZero() || now.Sub(s.Created) < t.b.cfg.SegmentMaxAge {
			continue
		}
		if err := t.b.store.SealActive(); err != nil {
			t.b.log.Warn("seal by age failed", "err", err)
			return
		}
		t.b.log.Debug("active segment sealed by age", "base", s.Base, "bytes", s.Length)
		t.uploader.Notify()
		return
	}
}

// enforceBucketRetention deletes whole commitlog objects past retention:
// raise the store's floor, trim the manifest, drop any local copy, delete
// the objects. Without a per-topic override, objects uploaded longer ago
// than STRATAMQ_RETENTION go, oldest first; with one, queue minima move
// first by each topic's retention and an object goes once all of its
// records have expired, from the front of the log (the floor moves) or
// from its middle (retention.go: expireTopics, expiredSegments).
func (t *tiering) enforceBucketRetention(ctx context.Context, now time.Time) error {
	overrides := t.b.hasRetentionOverride()
	if t.b.cfg.Retention <= 0 && !overrides {
		return nil
	}
	if _, err := t.b.fence(); err != nil {
		return nil // the prefix's new owner enforces retention
	}
	m := t.uploader.Manifest()
	if m == nil {
		return nil
	}
	floor := t.defaultRetentionFloor(ctx, m, now)
	var middle []int64
	if overrides {
		if err := t.expireTopics(ctx, now, floor); err != nil {
			t.b.log.Warn("per-topic retention", "err", err) // deletion follows the minima as they are
		}
		var err error
		if floor, middle, err = t.expiredSegments(ctx, m); err != nil {
			return err
		}
	}
	var removed []upload.Object
	if floor >= 0 {
		// The manifest still lists the objects below floor (even when an
		// earlier pass raised the store's floor and then failed to trim).
		if floor > t.b.store.MinPhysOffset() {
			if err := t.b.store.SetMinPhysOffset(floor); err != nil {
				return err
			}
		}
		r, err := t.uploader.Trim(ctx, floor)
		if err != nil {
			return err
		}
		removed = r
	}
	if len(middle) > 0 {
		r, err := t.uploader.Expire(ctx, middle)
		if err != nil {
			return err
		}
		removed = append(removed, r...)
	}
	if len(removed) == 0 {
		return nil
	}
	if err := t.syncCold(); err != nil {
		return err
	}
	t.forgetBlocks(t.uploader.Manifest())
	var errs []error
	segs := t.b.store.SealedSegments()
	sort.Slice(segs, func(i, j int) bool { return segs[i].Base < segs[j].Base })
	for _, s := range segs {
		if s.Base+s.Length > floor {
			break
		}
		if err := t.b.store.DropSegment(s.Base); err != nil {
			errs = append(errs, err)
			break
		}
		t.mu.Lock()
		delete(t.mu.uploaded, s.Base)
		delete(t.mu.uploadedIdx, s.Base)
		delete(t.mu.uploadedKix, s.Base)
		t.mu.Unlock()
	}
	// Fenced like every other bucket write: a broker that lost the prefix
	// deletes nothing.
	if err := t.uploader.DeleteObjects(ctx, removed); err != nil {
		errs = append(errs, err)
	}
	t.b.log.Info("bucket retention", "floor", floor, "expiredFromTheMiddle", len(middle), "objectsDeleted", len(removed))
	return errors.Join(errs...)
}

// drain seals the active segment and waits until every sealed segment is
// uploaded or ctx ends (graceful shutdown).
func (t *tiering) drain(ctx context.Context) error {
	if err := t.b.store.SealActive(); err != nil {
		return fmt.Errorf("seal active segment: %w", err)
	}
	t.uploader.Notify()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := t.b.fence(); errors.Is(err, offsets.ErrFenced) {
			return fmt.Errorf("not uploading: %w", err) // another broker owns the prefix
		}
		pending, _ := t.Sealed(ctx)
		if len(pending) == 0 {
			return nil
		}
		t.uploader.Flush()
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d sealed segment(s) not uploaded before the shutdown deadline; they stay on local disk and upload at the next start", len(pending))
		case <-tick.C:
		}
	}
}

// pendingRange is the part of the log not in the bucket: from the first
// local segment holding records that is not uploaded to the end of the log.
func (t *tiering) pendingRange() *offsetRange {
	end := t.b.store.MaxPhysOffset()
	r := &offsetRange{From: end, To: end}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.b.store.LocalSegments() {
		if _, up := t.mu.uploaded[s.Base]; !up && s.Length > 0 && s.Base < r.From {
			r.From = s.Base
		}
	}
	return r
}

func (t *tiering) close() error { return t.cold.Close() }

// Segments implements store.ColdIndex over the queue indexes the manifest
// lists (sections of segment objects, or objects of their own before
// sections): how a broker restored on a fresh disk finds the consumequeue
// entries of history it never had locally.
func (t *tiering) Segments(ctx context.Context) ([]int64, error) {
	kt, err := t.indexObjects(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]int64, 0, len(kt.idx))
	for base := range kt.idx {
		out = append(out, base)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// ReadIndex implements store.ColdIndex: the whole queue index object of the
// segment at base, every frame verified by its checksum; an error matching
// store.ErrNotFound when retention deleted it.
func (t *tiering) ReadIndex(ctx context.Context, base int64) ([]byte, error) {
	return t.queueIndexAt(ctx, base, 0, -1)
}

// queueIndexAt reads n logical bytes (-1: to the end) at off of the queue
// index object of the segment at base. Through the cold reader when the
// manifest lists the object: its footer is cached there and its size known,
// so a read is its frames' ranged GETs (no HEAD, no footer GET) and
// repeated reads share the frame cache. Otherwise (a manifest that does not
// list it yet) from the bucket: a HEAD, the footer and the frames.
func (t *tiering) queueIndexAt(ctx context.Context, base, off, n int64) ([]byte, error) {
	out, err := t.readQueueIndex(ctx, base, off, n)
	if errors.Is(err, tier.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", store.ErrNotFound, err) // deleted by retention
	}
	return out, err
}

func (t *tiering) readQueueIndex(ctx context.Context, base, off, n int64) ([]byte, error) {
	if kt, err := t.indexObjects(ctx); err == nil {
		if o, ok := kt.idx[base]; ok && o.Length > 0 && o.Size > 0 {
			if n < 0 || off+n > o.Length {
				n = max(o.Length-off, 0)
			}
			out := make([]byte, n)
			return out, t.cold.ReadObjectAt(ctx, o, out, off)
		}
	}
	key, readAt, f, err := t.indexFooter(ctx, base)
	if err != nil {
		return nil, err
	}
	if n < 0 || off+n > f.LogicalSize {
		n = max(f.LogicalSize-off, 0)
	}
	if n == 0 {
		return nil, nil
	}
	first, last := f.Find(off), f.Find(off+n-1)
	frames, err := segfile.ReadFrames(ctx, readAt, key, f, first, last)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, n)
	for _, fr := range frames {
		out = append(out, fr...)
	}
	start := off - f.Frames[first].Off
	return out[start : start+n], nil
}

// indexFooter finds the queue index of the segment at base in the bucket
// alone: the section of the segment's object (its footer says where), or,
// for a segment uploaded before sections, its own object. It returns the
// key, how to read the index's bytes, and the index's footer.
func (t *tiering) indexFooter(ctx context.Context, base int64) (string, segfile.ReadAtFunc, *segfile.Footer, error) {
	key, err := t.segmentKey(ctx, base)
	if err != nil {
		return "", nil, nil, err
	}
	attrs, err := t.bucket.Stat(ctx, key)
	if err == nil {
		var f *segfile.Footer
		if f, err = segfile.ReadFooter(ctx, t.bucket.ReadAt, key, attrs.Size); err != nil {
			return "", nil, nil, err
		}
		if s, ok := f.Section(uint32(upload.KindQueueIndex)); ok {
			readAt := s.ReadAt(t.bucket.ReadAt)
			f, err := segfile.ReadFooter(ctx, readAt, key, s.Size)
			return key, readAt, f, err
		}
	} else if !errors.Is(err, tier.ErrNotExist) {
		return "", nil, nil, err
	}
	key, err = upload.Key("", upload.Segment{Kind: upload.KindQueueIndex, Base: base})
	if err != nil {
		return "", nil, nil, err
	}
	if attrs, err = t.bucket.Stat(ctx, key); err != nil {
		return "", nil, nil, err
	}
	f, err := segfile.ReadFooter(ctx, t.bucket.ReadAt, key, attrs.Size)
	return key, t.bucket.ReadAt, f, err
}

// segmentKey finds the key of the segment object at base in the bucket
// alone: the one of the newest epoch (upload.KeyAt) if any, else the key
// without an epoch.
func (t *tiering) segmentKey(ctx context.Context, base int64) (string, error) {
	plain, err := upload.Key("", upload.Segment{Kind: upload.KindCommitLog, Base: base})
	if err != nil {
		return "", err
	}
	key, epoch := plain, int64(0)
	err = t.bucket.List(ctx, fmt.Sprintf("commitlog/%020d.", base), func(k string, _ int64) error {
		if e := upload.KeyEpoch(k); e > epoch && strings.HasSuffix(k, ".seg") {
			key, epoch = k, e
		}
		return nil
	})
	return key, err
}

// indexManifest is the manifest the cold indexes go by: the uploader's
// once it has loaded it; until then (always on a slave, whose uploader
// never runs) a slave's last reload of its master's, else the manifest read
// at start (nothing was written since: the uploader writes only after its
// load), else read from the bucket.
func (t *tiering) indexManifest(ctx context.Context) (*upload.Manifest, error) {
	m, _, err := t.currentIndexManifest(ctx)
	return m, err
}

// currentIndexManifest is indexManifest, and live when it is the
// uploader's (a copy: Uploader.Version tells whether it changed since).
func (t *tiering) currentIndexManifest(ctx context.Context) (*upload.Manifest, bool, error) {
	if m := t.uploader.Manifest(); m != nil {
		return m, true, nil
	}
	if m := t.heldManifest(); m != nil {
		return m, false, nil
	}
	m, _, err := upload.LoadManifest(ctx, t.bucket, upload.ManifestKey(""))
	return m, false, err
}

// heldManifest is the manifest in memory the cold indexes go by while the
// uploader has none: a slave's last reload, else the one read at start.
func (t *tiering) heldManifest() *upload.Manifest {
	if t.readOnly {
		if m := t.latest.Load(); m != nil {
			return m
		}
	}
	return t.atStart
}

// indexTable is the key index and queue index objects of one manifest, by
// base.
type indexTable struct {
	m       *upload.Manifest
	live    bool                      // m is a copy of the uploader's manifest at version
	version int64                     // m.Version
	objs    map[int64]kixObject       // key index objects
	idx     map[int64]coldread.Object // queue index objects
}

type kixObject struct {
	coldread.Object
	created time.Time // uploaded
}

// indexObjects returns the key and queue index objects of the current
// manifest, built once per manifest: every queue and key index read looks
// an object up here, so a lookup must not cost O(history) (neither a copy
// of the uploader's manifest, nor a bucket read of it).
func (t *tiering) indexObjects(ctx context.Context) (*indexTable, error) {
	if kt := t.indexObjs.Load(); kt != nil {
		if v, ok := t.uploader.Version(); ok {
			// Also a table of the manifest read at start, when the
			// uploader loaded the same version (the same delta log).
			if kt.version == v && (kt.live || kt.m == t.atStart) {
				return kt, nil
			}
		} else if !kt.live && kt.m == t.heldManifest() {
			return kt, nil
		}
	}
	m, live, err := t.currentIndexManifest(ctx)
	if err != nil {
		return nil, err
	}
	kt := &indexTable{m: m, live: live, version: m.Version, objs: map[int64]kixObject{}, idx: map[int64]coldread.Object{}}
	// Sections of the segments' objects, or (uploaded before sections)
	// objects of their own: read alike through the cold reader.
	for base, o := range m.Indexes(upload.KindKeyIndex) {
		kt.objs[base] = kixObject{coldread.Object{Key: o.Key, Off: o.Off, Base: o.Base, Length: o.Length, Size: o.Size}, o.Created}
	}
	for base, o := range m.Indexes(upload.KindQueueIndex) {
		kt.idx[base] = coldread.Object{Key: o.Key, Off: o.Off, Base: o.Base, Length: o.Length, Size: o.Size}
	}
	t.indexObjs.Store(kt)
	return kt, nil
}

// keyIndexClockMargin is how far a segment's store times may run past
// its upload time (a clock stepped back: store times never go back).
const keyIndexClockMargin = 5 * time.Minute

// KeyIndexes implements store.ColdKeyIndex: the segments whose key index
// object the manifest lists; StoredBy is the object's upload time plus a
// margin (every record was stored before its segment sealed, hence before
// the upload), so a query bounded to later times reads none of them.
func (t *tiering) KeyIndexes(ctx context.Context) ([]store.KeyIndexRef, error) {
	kt, err := t.indexObjects(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]store.KeyIndexRef, 0, len(kt.objs))
	for base, o := range kt.objs {
		var by int64
		if !o.created.IsZero() {
			by = o.created.Add(keyIndexClockMargin).UnixMilli()
		}
		out = append(out, store.KeyIndexRef{Base: base, StoredBy: by})
	}
	return out, nil
}

// ReadKeyIndex implements store.ColdKeyIndex: a ranged read of a key
// index object through the cold reader (footer and frames cached in its
// ristretto cache), never a download of the segment.
func (t *tiering) ReadKeyIndex(ctx context.Context, base int64, p []byte, off int64) error {
	kt, err := t.indexObjects(ctx)
	if err != nil {
		return err
	}
	o, ok := kt.objs[base]
	if !ok {
		return fmt.Errorf("broker: no key index object for segment %d: %w", base, tier.ErrNotExist)
	}
	return t.cold.ReadObjectAt(ctx, o.Object, p, off)
}
