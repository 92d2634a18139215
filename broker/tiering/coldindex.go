package tiering

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/stratamq/stratamq/broker/compaction"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/segfile"
	"github.com/stratamq/stratamq/tier/upload"
)

// Segments implements store.ColdIndex over the queue indexes the manifest
// lists (sections of segment objects, or objects of their own before
// sections): how a broker restored on a fresh disk finds the consumequeue
// entries of history it never had locally.
func (t *Tiering) Segments(ctx context.Context) ([]int64, error) {
	kt, err := t.IndexObjects(ctx)
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
func (t *Tiering) ReadIndex(ctx context.Context, base int64) ([]byte, error) {
	return t.queueIndexAt(ctx, base, 0, -1)
}

// queueIndexAt reads n logical bytes (-1: to the end) at off of the queue
// index object of the segment at base. Through the cold reader when the
// manifest lists the object: its footer is cached there and its size known,
// so a read is its frames' ranged GETs (no HEAD, no footer GET) and
// repeated reads share the frame cache. Otherwise (a manifest that does not
// list it yet) from the bucket: a HEAD, the footer and the frames.
func (t *Tiering) queueIndexAt(ctx context.Context, base, off, n int64) ([]byte, error) {
	out, err := t.readQueueIndex(ctx, base, off, n)
	if errors.Is(err, tier.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", store.ErrNotFound, err) // deleted by retention
	}
	return out, err
}

func (t *Tiering) readQueueIndex(ctx context.Context, base, off, n int64) ([]byte, error) {
	if kt, err := t.IndexObjects(ctx); err == nil {
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
func (t *Tiering) indexFooter(ctx context.Context, base int64) (string, segfile.ReadAtFunc, *segfile.Footer, error) {
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
func (t *Tiering) segmentKey(ctx context.Context, base int64) (string, error) {
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

// IndexManifest is the manifest the cold indexes go by: the uploader's
// once it has loaded it; until then (always on a slave, whose uploader
// never runs) a slave's last reload of its master's, else the manifest read
// at start (nothing was written since: the uploader writes only after its
// load), else read from the bucket.
func (t *Tiering) IndexManifest(ctx context.Context) (*upload.Manifest, error) {
	m, _, err := t.currentIndexManifest(ctx)
	return m, err
}

// currentIndexManifest is IndexManifest, and live when it is the
// uploader's (a copy: Uploader.Version tells whether it changed since).
func (t *Tiering) currentIndexManifest(ctx context.Context) (*upload.Manifest, bool, error) {
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
func (t *Tiering) heldManifest() *upload.Manifest {
	if t.readOnly {
		if m := t.latest.Load(); m != nil {
			return m
		}
	}
	return t.atStart
}

// IndexTable is the key index and queue index objects of one manifest, by
// base (built once per manifest: IndexObjects).
type IndexTable struct {
	m       *upload.Manifest
	live    bool                                  // m is a copy of the uploader's manifest at version
	version int64                                 // m.Version
	objs    map[int64]kixObject                   // key index objects
	idx     map[int64]coldread.Object             // queue index objects
	gens    map[compaction.QueueKey]upload.Object // compacted generations, by queue
	objects int                                   // objects the manifest lists (every kind)
	bytes   int64                                 // and their bytes
}

// Totals is how many objects the manifest lists and their bytes: what the
// bucket holds for this broker (beside the manifest's own and the WAL's).
func (kt *IndexTable) Totals() (objects int, bytes int64) { return kt.objects, kt.bytes }

// Counts is how many queue index and key index objects the table lists.
func (kt *IndexTable) Counts() (queue, key int) { return len(kt.idx), len(kt.objs) }

// QueueIndex is the queue index object of the segment at base.
func (kt *IndexTable) QueueIndex(base int64) (coldread.Object, bool) {
	o, ok := kt.idx[base]
	return o, ok
}

type kixObject struct {
	coldread.Object
	created time.Time // uploaded
}

// IndexObjects returns the key and queue index objects of the current
// manifest, built once per manifest: every queue and key index read looks
// an object up here, so a lookup must not cost O(history) (neither a copy
// of the uploader's manifest, nor a bucket read of it).
func (t *Tiering) IndexObjects(ctx context.Context) (*IndexTable, error) {
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
	kt := &IndexTable{m: m, live: live, version: m.Version, objs: map[int64]kixObject{}, idx: map[int64]coldread.Object{},
		gens: generationsOf(m), objects: len(m.Objects)}
	for _, o := range m.Objects {
		kt.bytes += o.Size
	}
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

// Generations implements compaction.Listing: the compacted generations the
// current manifest lists, by queue (one map per manifest).
func (t *Tiering) Generations(ctx context.Context) (map[compaction.QueueKey]upload.Object, int64, error) {
	kt, err := t.IndexObjects(ctx)
	if err != nil {
		return nil, 0, err
	}
	return kt.gens, kt.version, nil
}

// UploadedEnds returns every queue's next offset at the end of the newest
// commitlog object the manifest lists (its queue index directory: one
// ranged read per new object): offsets below are in uploaded segments.
func (t *Tiering) UploadedEnds(ctx context.Context) (map[compaction.QueueKey]int64, error) {
	kt, err := t.IndexObjects(ctx)
	if err != nil {
		return nil, err
	}
	base := int64(-1)
	for b := range kt.idx {
		base = max(base, b)
	}
	if base < 0 {
		return nil, nil
	}
	if c := t.ends.Load(); c != nil && c.base == base {
		return c.ends, nil
	}
	x, err := t.readIndexDirectory(ctx, base)
	if err != nil {
		return nil, err
	}
	ends := make(map[compaction.QueueKey]int64, len(x.Queues))
	for _, q := range x.Queues {
		ends[compaction.QueueKey{Topic: q.Topic, QueueID: q.QueueID}] = q.FirstOffset + q.Count
	}
	t.ends.Store(&queueEnds{base: base, ends: ends})
	return ends, nil
}

// queueEnds caches UploadedEnds for the newest object.
type queueEnds struct {
	base int64
	ends map[compaction.QueueKey]int64
}

// ReplaceObjects lists put and unlists del in one fenced manifest delta
// if cond (nil: always) accepts the generations listed when it is built
// (upload.Uploader.ReplaceIf): compacted generations.
func (t *Tiering) ReplaceObjects(ctx context.Context, put, del []upload.Object, cond func(map[compaction.QueueKey]upload.Object) error) error {
	if t.readOnly {
		return errors.New("tiering: a slave writes no manifest")
	}
	var c func(*upload.Manifest) error
	if cond != nil {
		c = func(m *upload.Manifest) error { return cond(generationsOf(m)) }
	}
	return t.uploader.ReplaceIf(ctx, put, del, c)
}

// FreshGenerations reads the manifest from the bucket (not the copy in
// memory) and returns its compacted generations.
func (t *Tiering) FreshGenerations(ctx context.Context) (map[compaction.QueueKey]upload.Object, error) {
	m, _, err := upload.LoadManifest(ctx, t.bucket, upload.ManifestKey(""))
	if err != nil {
		return nil, err
	}
	return generationsOf(m), nil
}

// generationsOf is m's compacted generations, by queue.
func generationsOf(m *upload.Manifest) map[compaction.QueueKey]upload.Object {
	gens := map[compaction.QueueKey]upload.Object{}
	for _, o := range m.Objects {
		if o.Kind == compaction.Kind {
			gens[compaction.QueueKey{Topic: o.Topic, QueueID: int32(o.QueueID)}] = o
		}
	}
	return gens
}

// keyIndexClockMargin is how far a segment's store times may run past
// its upload time (a clock stepped back: store times never go back).
const keyIndexClockMargin = 5 * time.Minute

// KeyIndexes implements store.ColdKeyIndex: the segments whose key index
// object the manifest lists; StoredBy is the object's upload time plus a
// margin (every record was stored before its segment sealed, hence before
// the upload), so a query bounded to later times reads none of them.
func (t *Tiering) KeyIndexes(ctx context.Context) ([]store.KeyIndexRef, error) {
	kt, err := t.IndexObjects(ctx)
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
func (t *Tiering) ReadKeyIndex(ctx context.Context, base int64, p []byte, off int64) error {
	kt, err := t.IndexObjects(ctx)
	if err != nil {
		return err
	}
	o, ok := kt.objs[base]
	if !ok {
		return fmt.Errorf("broker: no key index object for segment %d: %w", base, tier.ErrNotExist)
	}
	return t.cold.ReadObjectAt(ctx, o.Object, p, off)
}

// PrefetchLog implements store.ColdReadAhead: the cold index's hint of
// where a queue replaying from the bucket continues in the next segment,
// followed by the cold reader in the background (coldread.Reader.Prefetch:
// bounded, never blocking the read that gave it).
func (t *Tiering) PrefetchLog(next func(ctx context.Context) (off int64, ok bool, err error)) bool {
	return t.cold.Prefetch(next)
}

var _ store.ColdReadAhead = (*Tiering)(nil)
