package coldread

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/segfile"
	"github.com/stratamq/stratamq/tier/upload"
)

// ErrCorrupt is segfile.ErrCorrupt: a frame or footer failed its checksum.
var ErrCorrupt = segfile.ErrCorrupt

// ErrNotTiered: the offset is not covered by any object (below the first
// object, or in a gap between two).
var ErrNotTiered = errors.New("coldread: offset not in the tier")

// Object is one entry of the object table.
type Object struct {
	Key    string
	Base   int64 // logical offset of the object's first byte
	Length int64 // logical bytes
	Size   int64 // object bytes (for the footer read)
}

// End is the logical offset just past the object.
func (o Object) End() int64 { return o.Base + o.Length }

// CommitLogObjects returns the commitlog objects of a manifest as a table.
func CommitLogObjects(m *upload.Manifest) []Object {
	var out []Object
	for _, o := range m.CommitLog() {
		out = append(out, Object{Key: o.Key, Base: o.Base, Length: o.Length, Size: o.Size})
	}
	return out
}

// Config configures a Reader. Zero values mean the documented default.
type Config struct {
	Bucket tier.Reader // required
	// CacheBytes bounds the decompressed frames kept (STRATAMQ_CACHE_SIZE).
	// Default 256 MiB.
	CacheBytes int64
	// ReadAhead is how many frames past a sequential read are fetched in
	// the background. Default 2; negative disables read-ahead.
	ReadAhead int
	// ReadAheadBuffer bounds the frames fetched ahead and not yet read.
	// Default 16.
	ReadAheadBuffer int
	// MaxColdGets bounds the bucket GETs in flight (and the goroutines
	// doing background fetches). Default 4.
	MaxColdGets int
}

// Reader reads logical ranges from tiered objects. Safe for concurrent use.
type Reader struct {
	cfg    Config
	bucket tier.Reader
	cache  *ristretto.Cache[string, []byte]
	sem    chan struct{}
	table  atomic.Pointer[[]Object]
	stats  stats

	ctx    context.Context // background fetches; canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		flights  map[string]*flight       // frame key -> fetch in flight, or recently finished
		retained []string                 // finished keys in flights, oldest first
		footers  map[string]*footerFlight // object key -> footer
		lastEnd  map[string]int64         // object key -> end of its last read
		closed   bool
	}
}

type flight struct {
	done     chan struct{}
	data     []byte
	err      error
	ahead    bool // a background fetch
	used     bool // a reader has taken it
	finished bool
}

type footerFlight struct {
	done chan struct{}
	f    *segfile.Footer
	err  error
}

// New returns a Reader over objects (see SetObjects). Close it to stop its
// goroutines.
func New(cfg Config, objects []Object) (*Reader, error) {
	if cfg.Bucket == nil {
		return nil, errors.New("coldread: Config.Bucket is required")
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = 256 << 20
	}
	if cfg.ReadAhead == 0 {
		cfg.ReadAhead = 2
	}
	if cfg.ReadAheadBuffer <= 0 {
		cfg.ReadAheadBuffer = 16
	}
	if cfg.MaxColdGets <= 0 {
		cfg.MaxColdGets = 4
	}
	r := &Reader{cfg: cfg, bucket: cfg.Bucket, sem: make(chan struct{}, cfg.MaxColdGets)}
	if err := r.SetObjects(objects); err != nil {
		return nil, err
	}
	// About ten counters per frame that fits, frames being ~256 KiB-4 MiB.
	counters := max(cfg.CacheBytes/(256<<10)*10, 1000)
	cache, err := ristretto.NewCache(&ristretto.Config[string, []byte]{
		NumCounters:        counters,
		MaxCost:            cfg.CacheBytes,
		BufferItems:        64,
		Metrics:            true,
		IgnoreInternalCost: true,
		OnEvict: func(it *ristretto.Item[[]byte]) {
			r.stats.evictions.Add(1)
			r.stats.evictedBytes.Add(it.Cost)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("coldread: cache: %w", err)
	}
	r.cache = cache
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.mu.flights = make(map[string]*flight)
	r.mu.footers = make(map[string]*footerFlight)
	r.mu.lastEnd = make(map[string]int64)
	return r, nil
}

// Objects returns the current object table, sorted by base.
func (r *Reader) Objects() []Object {
	if t := r.table.Load(); t != nil {
		return append([]Object(nil), (*t)...)
	}
	return nil
}

// SetObjects replaces the object table, e.g. after the manifest grew.
// Objects must not overlap; they are sorted by Base.
func (r *Reader) SetObjects(objects []Object) error {
	t := slices.Clone(objects)
	slices.SortFunc(t, func(a, b Object) int { return int(min(max(a.Base-b.Base, -1), 1)) })
	for i, o := range t {
		if o.Length < 0 || o.Key == "" {
			return fmt.Errorf("coldread: bad object %+v", o)
		}
		if i > 0 && o.Base < t[i-1].End() {
			return fmt.Errorf("coldread: objects %s and %s overlap", t[i-1].Key, o.Key)
		}
	}
	r.table.Store(&t)
	return nil
}

// Close stops background fetches, waits for them, and frees the cache.
func (r *Reader) Close() error {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return nil
	}
	r.mu.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	r.cache.Close()
	return nil
}

// WaitCache waits until cache writes so far are applied (for tests).
func (r *Reader) WaitCache() { r.cache.Wait() }

// find returns the index of the object holding off.
func find(t []Object, off int64) (int, error) {
	i := sort.Search(len(t), func(i int) bool { return t[i].End() > off })
	if i == len(t) {
		return -1, io.EOF
	}
	if off < t[i].Base {
		return -1, fmt.Errorf("%w: %d (next object starts at %d)", ErrNotTiered, off, t[i].Base)
	}
	return i, nil
}

// ReadAt reads len(p) bytes starting at logical offset off. It returns
// n < len(p) only with an error: io.EOF past the last object, ErrNotTiered
// for a gap, ErrCorrupt for a bad frame, or a bucket error.
func (r *Reader) ReadAt(ctx context.Context, off int64, p []byte) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("coldread: negative offset %d", off)
	}
	t := *r.table.Load()
	n := 0
	first := true
	for n < len(p) {
		pos := off + int64(n)
		oi, err := find(t, pos)
		if err != nil {
			return n, err
		}
		obj := t[oi]
		f, err := r.footer(ctx, obj)
		if err != nil {
			return n, err
		}
		rel := pos - obj.Base
		fi := f.Find(rel)
		if fi < 0 {
			return n, fmt.Errorf("%w: %s: offset %d not in its %d frames (manifest length %d, footer %d)",
				ErrCorrupt, obj.Key, rel, len(f.Frames), obj.Length, f.LogicalSize)
		}
		if first {
			first = false
			r.beforeRead(t, oi, f, fi, pos, off+int64(len(p)))
		}
		data, err := r.frame(ctx, obj.Key, f, fi)
		if err != nil {
			return n, err
		}
		fr := f.Frames[fi]
		n += copy(p[n:], data[rel-fr.Off:])
	}
	r.stats.readBytes.Add(int64(n))
	return n, nil
}

// ReadObjectAt fills p from logical offset off of object o, which need not
// be in the object table (an index object beside the commitlog, say),
// through the same footer cache, frame cache and GET pool as ReadAt,
// without read-ahead. Reading past the object's end is io.EOF.
func (r *Reader) ReadObjectAt(ctx context.Context, o Object, p []byte, off int64) error {
	if off < 0 {
		return fmt.Errorf("coldread: negative offset %d", off)
	}
	f, err := r.footer(ctx, o)
	if err != nil {
		return err
	}
	for n := 0; n < len(p); {
		rel := off + int64(n)
		if rel >= f.LogicalSize {
			return fmt.Errorf("coldread: %s: %d bytes at %d: %w", o.Key, len(p), off, io.EOF)
		}
		fi := f.Find(rel)
		if fi < 0 {
			return fmt.Errorf("%w: %s: offset %d not in its %d frames", ErrCorrupt, o.Key, rel, len(f.Frames))
		}
		data, err := r.frame(ctx, o.Key, f, fi)
		if err != nil {
			return err
		}
		n += copy(p[n:], data[rel-f.Frames[fi].Off:])
	}
	return nil
}

// beforeRead starts background fetches: the other frames this read needs,
// and, when the read continues the previous one, the next ReadAhead frames.
func (r *Reader) beforeRead(t []Object, oi int, f *segfile.Footer, fi int, pos, end int64) {
	key := t[oi].Key
	r.mu.Lock()
	last, seen := r.mu.lastEnd[key]
	if len(r.mu.lastEnd) > 4096 {
		clear(r.mu.lastEnd)
	}
	r.mu.lastEnd[key] = end
	if end >= t[oi].End() && oi+1 < len(t) {
		r.mu.lastEnd[t[oi+1].Key] = t[oi+1].Base
	}
	r.mu.Unlock()

	ahead := 0
	if r.cfg.ReadAhead > 0 && seen && last == pos {
		ahead = r.cfg.ReadAhead
	}
	// Walk the frames after fi: those inside [pos, end), then `ahead` more.
	o, fr := oi, fi
	cur := f
	for {
		fr++
		if fr >= len(cur.Frames) {
			o, fr = o+1, 0
			if o >= len(t) {
				return
			}
			if t[o].Base >= end && ahead == 0 {
				return
			}
			nf, ok := r.cachedFooter(t[o].Key)
			if !ok {
				r.prefetchFooter(t[o])
				return
			}
			cur = nf
			if len(cur.Frames) == 0 {
				return
			}
		}
		start := t[o].Base + cur.Frames[fr].Off
		if start >= end {
			if ahead == 0 {
				return
			}
			ahead--
		}
		if !r.prefetch(t[o].Key, cur, fr) {
			return // pool busy
		}
	}
}

func frameKey(objKey string, i int) string { return objKey + "#" + strconv.Itoa(i) }

// frame returns frame i of the object, decoded and verified.
func (r *Reader) frame(ctx context.Context, objKey string, f *segfile.Footer, i int) ([]byte, error) {
	k := frameKey(objKey, i)
	for attempt := 0; ; attempt++ {
		if data, ok := r.cache.Get(k); ok {
			r.stats.hits.Add(1)
			return data, nil
		}
		r.mu.Lock()
		fl := r.mu.flights[k]
		if fl == nil {
			fl = &flight{done: make(chan struct{})}
			r.mu.flights[k] = fl
			r.mu.Unlock()
			r.stats.misses.Add(1)
			if err := r.acquire(ctx); err != nil {
				r.finish(k, fl, nil, err)
				return nil, err
			}
			data, err := r.fetch(ctx, objKey, f, i)
			<-r.sem
			r.finish(k, fl, data, err)
			return data, err
		}
		used := fl.used
		fl.used = true
		finished := fl.finished
		r.mu.Unlock()
		if fl.ahead && !used {
			r.stats.aheadHits.Add(1)
		}
		if !finished {
			r.stats.shared.Add(1)
			select {
			case <-fl.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if fl.err == nil {
			r.stats.hits.Add(1)
			return fl.data, nil
		}
		// The fetcher's context ended (ours has not), or a background
		// fetch failed: fetch ourselves.
		if (fl.ahead || isCtxErr(fl.err) && ctx.Err() == nil) && attempt < 3 {
			continue
		}
		return nil, fl.err
	}
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func (r *Reader) acquire(ctx context.Context) error {
	select {
	case r.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finish publishes a fetch result and caches good data. A good result
// also stays in the flight map (a FIFO of ReadAheadBuffer entries): for
// read-ahead, whose frames ristretto's admission policy may refuse, and for
// the moment before the cache makes a Set visible.
func (r *Reader) finish(k string, fl *flight, data []byte, err error) {
	fl.data, fl.err = data, err
	if err == nil {
		r.cache.Set(k, data, int64(len(data)))
	}
	r.mu.Lock()
	fl.finished = true
	if err == nil {
		r.mu.retained = append(r.mu.retained, k)
		for len(r.mu.retained) > r.cfg.ReadAheadBuffer {
			old := r.mu.retained[0]
			r.mu.retained = r.mu.retained[1:]
			if of := r.mu.flights[old]; of != nil && of.finished {
				if of.ahead && !of.used {
					r.stats.aheadDropped.Add(1)
				}
				delete(r.mu.flights, old)
			}
		}
	} else if r.mu.flights[k] == fl {
		delete(r.mu.flights, k) // errors are not kept
	}
	r.mu.Unlock()
	close(fl.done)
}

// prefetch starts a background fetch of frame i unless it is cached or in
// flight. It returns false when the cold GET pool has no free slot.
func (r *Reader) prefetch(objKey string, f *segfile.Footer, i int) bool {
	k := frameKey(objKey, i)
	if _, ok := r.cache.Get(k); ok {
		return true
	}
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return false
	}
	if r.mu.flights[k] != nil {
		r.mu.Unlock()
		return true
	}
	select {
	case r.sem <- struct{}{}:
	default:
		r.mu.Unlock()
		return false
	}
	fl := &flight{done: make(chan struct{}), ahead: true}
	r.mu.flights[k] = fl
	r.wg.Add(1)
	r.mu.Unlock()
	r.stats.aheadFetches.Add(1)
	go func() {
		defer r.wg.Done()
		data, err := r.fetch(r.ctx, objKey, f, i)
		<-r.sem
		r.finish(k, fl, data, err)
	}()
	return true
}

// fetch GETs and decodes frame i. The caller holds a pool slot.
func (r *Reader) fetch(ctx context.Context, objKey string, f *segfile.Footer, i int) ([]byte, error) {
	fr := f.Frames[i]
	comp := make([]byte, fr.CompLen)
	r.stats.gets.Add(1)
	if err := r.bucket.ReadAt(ctx, objKey, comp, fr.CompOff); err != nil {
		if !isCtxErr(err) {
			r.stats.errors.Add(1)
		}
		return nil, fmt.Errorf("coldread: get %s frame %d: %w", objKey, i, err)
	}
	r.stats.getBytes.Add(fr.CompLen)
	data, err := segfile.DecodeFrame(nil, fr, comp)
	if err != nil {
		r.stats.corrupt.Add(1)
		return nil, fmt.Errorf("coldread: %s frame %d: %w", objKey, i, err)
	}
	r.stats.decodedBytes.Add(int64(len(data)))
	return data, nil
}

func (r *Reader) cachedFooter(key string) (*segfile.Footer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ff := r.mu.footers[key]
	if ff == nil {
		return nil, false
	}
	select {
	case <-ff.done:
		return ff.f, ff.err == nil
	default:
		return nil, false
	}
}

// footer returns the object's footer, reading it once.
func (r *Reader) footer(ctx context.Context, o Object) (*segfile.Footer, error) {
	r.mu.Lock()
	ff := r.mu.footers[o.Key]
	if ff == nil {
		ff = &footerFlight{done: make(chan struct{})}
		r.mu.footers[o.Key] = ff
		r.mu.Unlock()
		if err := r.acquire(ctx); err != nil {
			r.footerDone(o, ff, err)
			return nil, err
		}
		r.loadFooter(ctx, o, ff)
	} else {
		r.mu.Unlock()
	}
	select {
	case <-ff.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return ff.f, ff.err
}

// loadFooter reads the footer; the caller holds a pool slot, which is
// released.
func (r *Reader) loadFooter(ctx context.Context, o Object, ff *footerFlight) {
	r.stats.gets.Add(1)
	f, err := segfile.ReadFooter(ctx, r.bucket.ReadAt, o.Key, o.Size)
	<-r.sem
	ff.f = f
	r.footerDone(o, ff, err)
}

func (r *Reader) footerDone(o Object, ff *footerFlight, err error) {
	if err == nil && ff.f.LogicalSize != o.Length {
		err = fmt.Errorf("%w: %s: footer holds %d bytes, table says %d", ErrCorrupt, o.Key, ff.f.LogicalSize, o.Length)
	}
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			r.stats.corrupt.Add(1)
		} else if !isCtxErr(err) {
			r.stats.errors.Add(1)
		}
		ff.f, ff.err = nil, err
		r.mu.Lock()
		delete(r.mu.footers, o.Key) // errors are not cached
		r.mu.Unlock()
	}
	close(ff.done)
}

func (r *Reader) prefetchFooter(o Object) {
	r.mu.Lock()
	if r.mu.closed || r.mu.footers[o.Key] != nil {
		r.mu.Unlock()
		return
	}
	select {
	case r.sem <- struct{}{}:
	default:
		r.mu.Unlock()
		return // pool busy
	}
	ff := &footerFlight{done: make(chan struct{})}
	r.mu.footers[o.Key] = ff
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		r.loadFooter(r.ctx, o, ff)
	}()
}
