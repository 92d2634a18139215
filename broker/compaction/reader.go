package compaction

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/upload"
)

// QueueKey names one queue.
type QueueKey struct {
	Topic   string
	QueueID int32
}

// Listing is where a Reader learns the generations: the manifest the
// broker's cold indexes go by (the uploader's on a master, the master's
// last reload on a slave).
type Listing interface {
	// Generations returns the generation objects the manifest lists, by
	// queue, and the manifest's version (the same version, the same map:
	// the caller must not change it).
	Generations(ctx context.Context) (map[QueueKey]upload.Object, int64, error)
}

// ObjectReader reads a generation's logical stream (the broker's cold
// reader: footers and frames cached).
type ObjectReader interface {
	ReadObjectAt(ctx context.Context, o coldread.Object, p []byte, off int64) error
}

// Reader serves the compacted part of every compacted queue: offsets
// below its generation's point. It holds the decoded tables of the
// generations it has read (tableBytes each: about 56 bytes per kept record
// and 16 per lookup value), dropped when the manifest stops listing them,
// and at most MaxTableBytes of them: past that the least recently used go
// first, and are read again (two ranged reads, through the cold reader's
// cache) when next needed.
type Reader struct {
	list ObjectReader
	ls   Listing

	mu      sync.Mutex
	version int64
	gens    map[QueueKey]upload.Object
	loaded  map[string]*genIndex // by object key
	held    int64                // tableBytes of the loaded tables
	clock   int64                // use counter (LRU)
	max     int64                // MaxTableBytes (tests: less)
}

// MaxTableBytes bounds the decoded generation tables a Reader holds.
const MaxTableBytes = 256 << 20

type genIndex struct {
	once sync.Once
	x    *Index
	err  error
	size int64 // tableBytes once loaded
	used int64 // Reader.clock at its last use
}

// tableBytes is the memory a decoded table holds.
func tableBytes(x *Index) int64 {
	return int64(len(x.Entries))*int64(unsafe.Sizeof(Entry{})) + int64(len(x.keys))*int64(unsafe.Sizeof(keyRef{}))
}

// NewReader returns a Reader over the generations ls lists, read through r.
func NewReader(ls Listing, r ObjectReader) *Reader {
	return &Reader{list: r, ls: ls, loaded: map[string]*genIndex{}, max: MaxTableBytes}
}

// Generation is a listed generation and its tables.
type Generation struct {
	Object upload.Object
	*Index
}

// generation returns the listed generation of topic/queue (nil: none).
func (r *Reader) generation(ctx context.Context, k QueueKey) (*Generation, error) {
	gens, err := r.refresh(ctx)
	if err != nil {
		return nil, err
	}
	o, ok := gens[k]
	if !ok {
		return nil, nil
	}
	return r.open(ctx, o)
}

// refresh returns the current listing, forgetting the tables of
// generations it no longer holds.
func (r *Reader) refresh(ctx context.Context) (map[QueueKey]upload.Object, error) {
	gens, v, err := r.ls.Generations(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gens == nil || v != r.version {
		r.version, r.gens = v, gens
		listed := make(map[string]bool, len(gens))
		for _, o := range gens {
			listed[o.Key] = true
		}
		for key, g := range r.loaded {
			if !listed[key] {
				r.held -= g.size
				delete(r.loaded, key)
			}
		}
	}
	return r.gens, nil
}

// Listed returns the queues with a listed generation and their points.
func (r *Reader) Listed(ctx context.Context) (map[QueueKey]int64, error) {
	gens, err := r.refresh(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[QueueKey]int64, len(gens))
	for k, o := range gens {
		out[k] = o.Base
	}
	return out, nil
}

func (r *Reader) open(ctx context.Context, o upload.Object) (*Generation, error) {
	r.mu.Lock()
	g := r.loaded[o.Key]
	if g == nil {
		g = &genIndex{}
		r.loaded[o.Key] = g
	}
	r.clock++
	g.used = r.clock
	r.mu.Unlock()
	g.once.Do(func() {
		g.x, g.err = readIndex(ctx, r.list, o)
		if g.err == nil {
			r.mu.Lock()
			if r.loaded[o.Key] == g {
				g.size = tableBytes(g.x)
				r.held += g.size
				r.evictLocked(g)
			}
			r.mu.Unlock()
		}
	})
	if g.err != nil {
		r.mu.Lock()
		if r.loaded[o.Key] == g {
			delete(r.loaded, o.Key) // not kept: the next call reads again
		}
		r.mu.Unlock()
		return nil, g.err
	}
	return &Generation{Object: o, Index: g.x}, nil
}

// evictLocked drops the least recently used tables (never keep) while the
// loaded ones hold more than MaxTableBytes. A caller still using a dropped
// table keeps it until it returns.
func (r *Reader) evictLocked(keep *genIndex) {
	for r.held > r.max {
		var oldK string
		var old *genIndex
		for k, g := range r.loaded {
			if g != keep && g.size > 0 && (old == nil || g.used < old.used) {
				oldK, old = k, g
			}
		}
		if old == nil {
			return
		}
		r.held -= old.size
		delete(r.loaded, oldK)
	}
}

func coldObject(o upload.Object) coldread.Object {
	return coldread.Object{Key: o.Key, Length: o.Length, Size: o.Size}
}

// readIndex reads a generation's trailer and tables (two ranged reads
// past the footer).
func readIndex(ctx context.Context, rd ObjectReader, o upload.Object) (*Index, error) {
	if o.Length < TrailerSize {
		return nil, fmt.Errorf("%w: %s: %d logical bytes", ErrCorrupt, o.Key, o.Length)
	}
	t := make([]byte, TrailerSize)
	if err := rd.ReadObjectAt(ctx, coldObject(o), t, o.Length-TrailerSize); err != nil {
		return nil, fmt.Errorf("compaction: read %s: %w", o.Key, err)
	}
	tr, err := DecodeTrailer(t)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Key, err)
	}
	if tr.Point != o.Base || tr.TablesAt+tr.TablesLen()+TrailerSize != o.Length {
		return nil, fmt.Errorf("%w: %s: trailer says point %d, %d bytes; the manifest %d, %d", ErrCorrupt, o.Key,
			tr.Point, tr.TablesAt+tr.TablesLen()+TrailerSize, o.Base, o.Length)
	}
	tables := make([]byte, tr.TablesLen())
	if len(tables) > 0 {
		if err := rd.ReadObjectAt(ctx, coldObject(o), tables, tr.TablesAt); err != nil {
			return nil, fmt.Errorf("compaction: read %s: %w", o.Key, err)
		}
	}
	x, err := DecodeIndex(tr, tables, t)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Key, err)
	}
	return x, nil
}

// readRecords reads entries es (consecutive in the stream) and checks
// each record against its entry.
func (r *Reader) readRecords(ctx context.Context, o upload.Object, es []Entry) ([][]byte, error) {
	if len(es) == 0 {
		return nil, nil
	}
	from, to := es[0].Pos, es[len(es)-1].Pos+int64(es[len(es)-1].Size)
	buf := make([]byte, to-from)
	if err := r.list.ReadObjectAt(ctx, coldObject(o), buf, from); err != nil {
		return nil, fmt.Errorf("compaction: read %s: %w", o.Key, err)
	}
	out := make([][]byte, 0, len(es))
	for _, e := range es {
		p := e.Pos - from
		if p < 0 || p+int64(e.Size) > int64(len(buf)) {
			return nil, fmt.Errorf("%w: %s: entries not in stream order", ErrCorrupt, o.Key)
		}
		rec := buf[p : p+int64(e.Size) : p+int64(e.Size)]
		m, err := parse(rec)
		if err != nil || m.offset != e.Offset || m.phys != e.Phys {
			return nil, fmt.Errorf("%w: %s: record at %d is not queue offset %d (commitlog %d): %v", ErrCorrupt, o.Key, e.Pos, e.Offset, e.Phys, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// Get serves req if it asks for an offset below its queue's generation
// point (handled true), with the store's statuses: records found (their
// queue offsets sparse: NextBeginOffset is the next kept one, or the
// point), NoMatchedMessage when a filter refused every record it looked
// at, OffsetFoundNull (to the point) when none is kept from req.Offset.
// maxOffset is the queue's end for the result.
func (r *Reader) Get(ctx context.Context, req store.GetRequest, maxOffset int64) (store.GetResult, bool, error) {
	g, err := r.generation(ctx, QueueKey{req.Topic, req.QueueID})
	if err != nil || g == nil || req.Offset >= g.Point {
		return store.GetResult{}, false, err
	}
	res, err := r.get(ctx, g, req, maxOffset)
	if errors.Is(err, tier.ErrNotExist) {
		// Replaced and deleted under us: read the listing again, once.
		if g, err = r.generation(ctx, QueueKey{req.Topic, req.QueueID}); err != nil || g == nil || req.Offset >= g.Point {
			return store.GetResult{}, false, err
		}
		res, err = r.get(ctx, g, req, maxOffset)
	}
	return res, err == nil, err
}

func (r *Reader) get(ctx context.Context, g *Generation, req store.GetRequest, maxOffset int64) (store.GetResult, error) {
	maxMsgs, maxBytes := req.MaxMsgs, req.MaxBytes
	if maxMsgs <= 0 {
		maxMsgs = store.DefaultGetMaxMsgs
	}
	maxMsgs = min(maxMsgs, store.MaxGetMsgs)
	if maxBytes <= 0 {
		maxBytes = store.DefaultGetMaxBytes
	}
	res := store.GetResult{MinOffset: g.First, MaxOffset: maxOffset}
	i := g.Search(max(req.Offset, 0))
	scan := max(800, maxMsgs)
	var picked []Entry
	total, scanned := 0, 0
	for ; i < len(g.Entries) && scanned < scan && len(picked) < maxMsgs; i++ {
		e := g.Entries[i]
		if len(picked) > 0 && total+int(e.Size) > maxBytes {
			break
		}
		scanned++
		if req.Filter != nil && !req.Filter(e.TagsCode) {
			continue
		}
		picked = append(picked, e)
		total += int(e.Size)
	}
	res.NextBeginOffset = g.Point
	if i < len(g.Entries) {
		res.NextBeginOffset = g.Entries[i].Offset
	}
	if len(picked) == 0 {
		res.Status = store.OffsetFoundNull
		if scanned > 0 {
			res.Status = store.NoMatchedMessage
		}
		return res, nil
	}
	// Entries picked around filter misses are read as runs.
	var recs [][]byte
	for len(picked) > 0 {
		n := 1
		for n < len(picked) && picked[n].Pos == picked[n-1].Pos+int64(picked[n-1].Size) {
			n++
		}
		rs, err := r.readRecords(ctx, g.Object, picked[:n])
		if err != nil {
			return store.GetResult{}, err
		}
		recs = append(recs, rs...)
		picked = picked[n:]
	}
	if req.Match != nil {
		kept := recs[:0]
		total = 0
		for _, rec := range recs {
			rd, _, err := store.DecodeRecord(rec)
			if err == nil && req.Match([]byte(rd.Properties)) {
				kept = append(kept, rec)
				total += len(rec)
			}
		}
		recs = kept
		if len(recs) == 0 {
			res.Status = store.NoMatchedMessage
			return res, nil
		}
	}
	res.Records, res.Bytes, res.Status = recs, total, store.Found
	return res, nil
}

// Min returns the first kept offset of the queue's generation (ok false:
// the queue has none).
func (r *Reader) Min(ctx context.Context, topic string, queueID int32) (int64, bool, error) {
	g, err := r.generation(ctx, QueueKey{topic, queueID})
	if err != nil || g == nil {
		return 0, false, err
	}
	return g.First, true, nil
}

// Point returns the queue's generation point (ok false: none).
func (r *Reader) Point(ctx context.Context, topic string, queueID int32) (int64, bool, error) {
	gens, err := r.refresh(ctx)
	if err != nil {
		return 0, false, err
	}
	o, ok := gens[QueueKey{topic, queueID}]
	return o.Base, ok, nil
}

// OffsetAtTime returns the first kept offset of the queue's generation
// stored at or after tsMillis, or the point when none is (ok false: no
// generation).
func (r *Reader) OffsetAtTime(ctx context.Context, topic string, queueID int32, tsMillis int64) (int64, bool, error) {
	g, err := r.generation(ctx, QueueKey{topic, queueID})
	if err != nil || g == nil {
		return 0, false, err
	}
	for _, e := range g.Entries { // store times of a queue only rise, but a clock may step back: scan
		if e.StoreTime >= tsMillis {
			return e.Offset, true, nil
		}
	}
	return g.Point, true, nil
}

// ReadRecord returns the record at commitlog offset phys if a generation
// holds it (ok false: none does).
func (r *Reader) ReadRecord(ctx context.Context, phys int64) ([]byte, bool, error) {
	gens, err := r.refresh(ctx)
	if err != nil {
		return nil, false, err
	}
	for _, o := range gens {
		g, err := r.open(ctx, o)
		if err != nil {
			return nil, false, err
		}
		if e, ok := g.ByPhys(phys); ok {
			recs, err := r.readRecords(ctx, o, []Entry{e})
			if err != nil {
				return nil, false, err
			}
			return recs[0], true, nil
		}
	}
	return nil, false, nil
}

// QueryByKey returns up to maxNum records of topic's generations whose
// KEYS values or UNIQ_KEY equal key, stored within [begin, end] (unix
// ms; end 0: no bound), in commitlog order.
func (r *Reader) QueryByKey(ctx context.Context, topic, key string, begin, end int64, maxNum int) ([][]byte, error) {
	gens, err := r.refresh(ctx)
	if err != nil {
		return nil, err
	}
	type hit struct {
		phys int64
		rec  []byte
	}
	var hits []hit
	for k, o := range gens {
		if k.Topic != topic {
			continue
		}
		g, err := r.open(ctx, o)
		if err != nil {
			return nil, err
		}
		for _, e := range g.ByKey(key) {
			if e.StoreTime < begin || end > 0 && e.StoreTime > end {
				continue
			}
			recs, err := r.readRecords(ctx, o, []Entry{e})
			if err != nil {
				return nil, err
			}
			m, _ := parse(recs[0])
			if m.uniq == key || slices.Contains(strings.Fields(m.key), key) {
				hits = append(hits, hit{e.Phys, recs[0]})
			}
		}
	}
	slices.SortFunc(hits, func(a, b hit) int { return cmp.Compare(a.phys, b.phys) })
	if maxNum > 0 && len(hits) > maxNum {
		hits = hits[len(hits)-maxNum:] // the newest, as the store's query
	}
	out := make([][]byte, len(hits))
	for i, h := range hits {
		out[i] = h.rec
	}
	return out, nil
}

// Entry returns the kept entry at queue offset off of the queue's
// generation: covered is false when off is not below a listed point (the
// store has it), found false when the offset was compacted away.
func (r *Reader) Entry(ctx context.Context, topic string, queueID int32, off int64) (e Entry, found, covered bool, err error) {
	g, err := r.generation(ctx, QueueKey{topic, queueID})
	if err != nil || g == nil || off >= g.Point {
		return Entry{}, false, false, err
	}
	i := g.Search(off)
	if i < len(g.Entries) && g.Entries[i].Offset == off {
		return g.Entries[i], true, true, nil
	}
	return Entry{}, false, true, nil
}
