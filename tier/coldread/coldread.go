package coldread

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
	// Off, when not 0, is where the object starts inside the bucket object
	// Key: a segfile section (a segment's queue or key index stored in the
	// segment's object). ReadObjectAt and ReadStream read it as an object
	// of its own, cached under its own name (sectionKey).
	Off int64
}

// sectionSep separates a bucket key from a section's offset in the name
// the caches know a section by ("commitlog/….seg#268435456"); object keys
// of the tier never hold it.
const sectionSep = "#"

// named returns o with the name the caches and GETs go by: its Key, or,
// for a section (Off > 0), its Key and Off joined by sectionSep.
func (o Object) named() Object {
	if o.Off > 0 {
		o.Key = o.Key + sectionSep + strconv.FormatInt(o.Off, 10)
		o.Off = 0
	}
	return o
}

// readAt reads p at off of the object a cache name (named) stands for:
// a section's reads are shifted by its offset in the bucket object.
func (r *Reader) readAt(ctx context.Context, name string, p []byte, off int64) error {
	if i := strings.LastIndex(name, sectionSep); i >= 0 {
		if at, err := strconv.ParseInt(name[i+len(sectionSep):], 10, 64); err == nil && at > 0 {
			return r.bucket.ReadAt(ctx, name[:i], p, at+off)
		}
	}
	return r.bucket.ReadAt(ctx, name, p, off)
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
	// ReadAhead, when positive, is how many frames past a sequential read
	// are kept fetched in the background, instead of ReadAheadBytes.
	// Negative disables read-ahead.
	ReadAhead int
	// ReadAheadBytes is how many logical bytes past a sequential read are
	// kept fetched in the background once the reader has proved sequential
	// (the depth doubles from one frame with every sequential read).
	// Default 32 MiB.
	ReadAheadBytes int64
	// RunBytes bounds the logical bytes of one background GET: read-ahead
	// fetches runs of consecutive frames of an object with one ranged GET
	// each, so a replay makes few, large requests. Default 8 MiB.
	RunBytes int64
	// MaxColdGets bounds the bucket GETs in flight (and the goroutines
	// doing background fetches); read-ahead uses at most MaxColdGets-1 of
	// them, so a demand read always finds a slot free soon. Default 8:
	// against a bucket shaped to 500 MB/s, 4 left a replay of 1,024-record
	// pulls waiting at the fetch front (0.91 of the bucket's rate; 8: 0.95).
	MaxColdGets int
}

// Reader reads logical ranges from tiered objects. Safe for concurrent use.
type Reader struct {
	cfg    Config
	bucket tier.Reader
	cache  *frames
	sem    chan struct{}
	table  atomic.Pointer[[]Object]
	stats  stats

	ctx    context.Context // background fetches; canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		flights map[string]*flight       // frame key -> fetch in flight, or recently finished
		footers map[string]*footerFlight // object key -> footer
		fbytes  int64                    // footerCost of the footers read and kept
		seq     map[string]*seqState     // object key -> how it is being read
		streams map[string][]*stream     // object key -> its layout's readers (layout.go)
		tick    uint64                   // counts layout reads (stream recency)
		ahead   int                      // read-ahead GETs in flight
		hints   int                      // hints being followed (hint.go)
		freed   chan struct{}            // closed when a pool slot is released (waitSlot)
		closed  bool
	}
}

// seqState tracks the reads of one object, to tell a sequential scan
// (possibly several readers moving through the same frames, as the queues
// of a topic replaying together do) from random reads.
type seqState struct {
	hi     int // highest frame a read touched (-1: none; the next object of a scan)
	streak int // sequential reads in a row (carried into the next object)
	next   int // first frame not yet considered for read-ahead
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
	done  chan struct{}
	f     *segfile.Footer
	err   error
	bytes int64 // what it counts against footerBudget once read (footerCost)
	hit   bool  // read again since the last eviction pass looked at it
	bg    bool  // read in the background (prefetchFooter, a hint)
}

// footerCost is what a footer counts against the footer budget: its frame
// entries as held in memory, and the map entry around it.
func footerCost(f *segfile.Footer, key string) int64 {
	return int64(len(f.Frames))*int64(unsafe.Sizeof(segfile.Frame{})) + int64(len(key)) + 256
}

// footerBudget is the bytes of footers kept: a sixteenth of the cache (16
// MiB, ~3,000 footers of 128 frames, with the default cache), at least 1
// MiB. Past it the least recently used go (see evictFootersLocked); a
// footer read again costs one small GET.
func footerBudget(cacheBytes int64) int64 { return max(cacheBytes/16, 1<<20) }

// New returns a Reader over objects (see SetObjects). Close it to stop its
// goroutines.
func New(cfg Config, objects []Object) (*Reader, error) {
	if cfg.Bucket == nil {
		return nil, errors.New("coldread: Config.Bucket is required")
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = 256 << 20
	}
	if cfg.ReadAheadBytes <= 0 {
		cfg.ReadAheadBytes = 32 << 20
	}
	if cfg.RunBytes <= 0 {
		cfg.RunBytes = 8 << 20
	}
	// Read ahead no further than a quarter of the cache, so frames fetched
	// ahead are not evicted before they are read.
	cfg.ReadAheadBytes = max(min(cfg.ReadAheadBytes, cfg.CacheBytes/4), 1)
	if cfg.MaxColdGets <= 0 {
		cfg.MaxColdGets = 8
	}
	r := &Reader{cfg: cfg, bucket: cfg.Bucket, sem: make(chan struct{}, cfg.MaxColdGets)}
	if err := r.SetObjects(objects); err != nil {
		return nil, err
	}
	cache, err := newFrames(cfg.CacheBytes)
	if err != nil {
		return nil, err
	}
	r.cache = cache
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.mu.flights = make(map[string]*flight)
	r.mu.footers = make(map[string]*footerFlight)
	r.mu.seq = make(map[string]*seqState)
	r.mu.streams = make(map[string][]*stream)
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
		if o.Length < 0 || o.Key == "" || o.Off != 0 {
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
	r.cache.close()
	return nil
}

// WaitCache waits until cache writes so far are applied (for tests).
func (r *Reader) WaitCache() { r.cache.wait() }

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
	for n < len(p) {
		b, err := r.frameAt(ctx, t, off+int64(n), off+int64(len(p)), n == 0)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], b)
	}
	r.stats.readBytes.Add(int64(n))
	return n, nil
}

// Lend returns between 1 and n bytes at logical offset off as a slice of
// a decoded frame (the cache's, or one just fetched), which is never
// written again: the caller may keep it (store.ColdLender). It reads
// ahead as ReadAt does. Errors as ReadAt's.
func (r *Reader) Lend(ctx context.Context, off int64, n int) ([]byte, error) {
	if off < 0 || n <= 0 {
		return nil, fmt.Errorf("coldread: lend %d bytes at %d", n, off)
	}
	b, err := r.frameAt(ctx, *r.table.Load(), off, off+int64(n), true)
	if err != nil {
		return nil, err
	}
	b = b[:min(len(b), n):min(len(b), n)]
	r.stats.readBytes.Add(int64(len(b)))
	return b, nil
}

// frameAt returns the bytes from logical offset pos to the end of the
// frame holding it (a slice of the decoded frame). first: pos starts a
// read that ends at end, which may start background fetches.
func (r *Reader) frameAt(ctx context.Context, t []Object, pos, end int64, first bool) ([]byte, error) {
	oi, err := find(t, pos)
	if err != nil {
		return nil, err
	}
	obj := t[oi]
	f, err := r.footer(ctx, obj)
	if err != nil {
		return nil, err
	}
	rel := pos - obj.Base
	fi, spos, n := -1, int64(0), int64(0)
	if rel < f.LogicalSize {
		sec, err := r.layout(ctx, obj.Key, f)
		if err != nil {
			return nil, err
		}
		spos, n = f.Locate(sec, rel)
		fi = f.Find(spos)
	}
	if fi < 0 {
		return nil, fmt.Errorf("%w: %s: offset %d not in its %d frames (manifest length %d, footer %d)",
			ErrCorrupt, obj.Key, rel, len(f.Frames), obj.Length, f.LogicalSize)
	}
	if first && f.Layout != nil {
		r.beforeReadLayout(obj, f, fi) // layout.go
	} else if first {
		r.beforeRead(t, oi, f, fi, pos, end)
	}
	data, err := r.frame(ctx, obj.Key, f, fi)
	if err != nil {
		return nil, err
	}
	b := data[spos-f.Frames[fi].Off:]
	if int64(len(b)) > n {
		b = b[:n] // the run ends: the next logical byte is stored elsewhere
	}
	return b, nil
}

// ReadObjectAt fills p from logical offset off of object o, which need not
// be in the object table (an index object beside the commitlog, say),
// through the same footer cache, frame cache and GET pool as ReadAt,
// without read-ahead. Reading past the object's end is io.EOF.
func (r *Reader) ReadObjectAt(ctx context.Context, o Object, p []byte, off int64) error {
	o = o.named()
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
		sec, err := r.layout(ctx, o.Key, f)
		if err != nil {
			return err
		}
		spos, run := f.Locate(sec, rel)
		fi := f.Find(spos)
		if fi < 0 {
			return fmt.Errorf("%w: %s: offset %d not in its %d frames", ErrCorrupt, o.Key, rel, len(f.Frames))
		}
		data, err := r.frame(ctx, o.Key, f, fi)
		if err != nil {
			return err
		}
		b := data[spos-f.Frames[fi].Off:]
		n += copy(p[n:], b[:min(int64(len(b)), run)])
	}
	return nil
}

// ReadStream fills p with the stored stream of object o (in the object
// table or not) from stream position pos: the object's bytes in the order
// its frames hold them, which for an object with a layout is not the
// log's (each queue's records together; whole records in every run). A
// reader that wants every record of an object, in any order, reads it so:
// each frame once, in order, with the frames after it fetched ahead, where
// reading a layout object in log order would go back and forth between
// its frames. Reading past the end is io.EOF.
func (r *Reader) ReadStream(ctx context.Context, o Object, p []byte, pos int64) error {
	o = o.named()
	f, err := r.footer(ctx, o)
	if err != nil {
		return err
	}
	for n := 0; n < len(p); {
		at := pos + int64(n)
		if at < 0 || at >= f.LogicalSize {
			return fmt.Errorf("coldread: %s: %d stream bytes at %d: %w", o.Key, len(p), pos, io.EOF)
		}
		fi := f.Find(at)
		if n == 0 && r.cfg.ReadAhead >= 0 {
			// The frames after it, up to ReadAheadBytes, in runs.
			r.prefetchUpTo(o.Key, f, fi+1, f.Frames[fi].End()+r.cfg.ReadAheadBytes, false)
		}
		data, err := r.frame(ctx, o.Key, f, fi)
		if err != nil {
			return err
		}
		n += copy(p[n:], data[at-f.Frames[fi].Off:])
	}
	return nil
}

// beforeRead starts background fetches: the other frames this read needs,
// and, when the read continues a sequential scan of the object (it touches
// the highest frame read so far or the one after it), keeps the frames up
// to the read-ahead depth past its end fetched, in runs of consecutive
// frames (one GET each), continuing into the next objects.
func (r *Reader) beforeRead(t []Object, oi int, f *segfile.Footer, fi int, pos, end int64) {
	obj := t[oi]
	last := fi
	if e := min(end, obj.End()) - 1 - obj.Base; e >= 0 {
		if li := f.Find(e); li > last {
			last = li
		}
	}
	// The other frames this read needs, in parallel.
	for fr := fi + 1; fr <= last; fr++ {
		if !r.prefetchRun(obj.Key, f, fr, fr+1) {
			break
		}
	}
	depth := int64(0)
	r.mu.Lock()
	if len(r.mu.seq) > 4096 {
		clear(r.mu.seq)
	}
	st := r.mu.seq[obj.Key]
	if st == nil {
		st = &seqState{hi: last}
		r.mu.seq[obj.Key] = st
	} else if st.hi < 0 && fi == 0 { // the next object of a scan
		st.hi = last
		st.streak++
	} else {
		switch {
		case fi > st.hi+1: // a jump forward: not a scan (reads behind hi may be a slower reader of the same scan)
			st.streak = 0
		case last > st.hi: // on into the next frame
			st.streak++
		}
		st.hi = max(st.hi, last)
	}
	// Two reads that moved on into the next frame make a scan; the depth
	// then doubles with each frame, up to ReadAheadBytes.
	if st.streak >= 2 && r.cfg.ReadAhead >= 0 {
		depth = r.cfg.ReadAheadBytes
		if r.cfg.ReadAhead > 0 {
			depth = int64(r.cfg.ReadAhead) * f.Frames[fi].Len // frames of this one's size
		} else if st.streak < 30 {
			depth = min(depth, f.Frames[fi].Len<<(st.streak-1))
		}
	}
	streak, from := st.streak, max(st.next, last+1)
	if end >= obj.End() && oi+1 < len(t) && r.mu.seq[t[oi+1].Key] == nil {
		r.mu.seq[t[oi+1].Key] = &seqState{hi: -1, streak: streak} // the scan goes on there
	}
	r.mu.Unlock()
	if depth == 0 {
		return
	}
	limit := end + depth // read ahead of frames that start before this
	o, cur := oi, f
	for {
		if from >= len(cur.Frames) {
			// On into the next object, which the scan will read next.
			o, from = o+1, 0
			if o >= len(t) || t[o].Base >= limit {
				return
			}
			nf, ok := r.cachedFooter(t[o].Key)
			if !ok {
				r.prefetchFooter(t[o])
				return
			}
			r.mu.Lock()
			if ns := r.mu.seq[t[o].Key]; ns == nil {
				r.mu.seq[t[o].Key] = &seqState{hi: -1, streak: streak}
			} else {
				from = ns.next
			}
			r.mu.Unlock()
			cur = nf
			continue
		}
		// A run from `from`: consecutive frames within the depth, up to
		// RunBytes of input.
		a, b, run := from, from, int64(0)
		for b < len(cur.Frames) && t[o].Base+cur.Frames[b].Off < limit &&
			(b == a || run+cur.Frames[b].Len <= r.cfg.RunBytes) {
			run += cur.Frames[b].Len
			b++
		}
		if b == a {
			return
		}
		if !r.prefetchRun(t[o].Key, cur, a, b) {
			return // pool busy: the next read carries on from here
		}
		from = b
		r.mu.Lock()
		if s := r.mu.seq[t[o].Key]; s != nil {
			s.next = max(s.next, b)
		}
		r.mu.Unlock()
	}
}

func frameKey(objKey string, i int) string { return objKey + "#" + strconv.Itoa(i) }

// layout returns the expanded layout section of a layout object (nil for
// one without), through the frame cache as frame len(f.Frames), so it is
// fetched once, shared and evicted like a frame (checked and expanded by
// fetch).
func (r *Reader) layout(ctx context.Context, objKey string, f *segfile.Footer) ([]byte, error) {
	if f.Layout == nil {
		return nil, nil
	}
	return r.frame(ctx, objKey, f, len(f.Frames))
}

// frameInfo is frame i of f, or its layout section for i == len(f.Frames).
func frameInfo(f *segfile.Footer, i int) segfile.Frame {
	if i == len(f.Frames) && f.Layout != nil {
		return *f.Layout
	}
	return f.Frames[i]
}

// frame returns frame i of the object, decoded and verified.
func (r *Reader) frame(ctx context.Context, objKey string, f *segfile.Footer, i int) ([]byte, error) {
	return r.frameOf(ctx, objKey, f, i, false)
}

// frameOf is frame; bg: a background fetch (a hint, hint.go), whose
// failure a demand read sharing it does not take for its own: it fetches
// again.
func (r *Reader) frameOf(ctx context.Context, objKey string, f *segfile.Footer, i int, bg bool) ([]byte, error) {
	k := frameKey(objKey, i)
	for attempt := 0; ; attempt++ {
		if data, ok := r.cache.get(k); ok {
			r.stats.hits.Add(1)
			return data, nil
		}
		r.mu.Lock()
		fl := r.mu.flights[k]
		if fl == nil {
			if data, ok := r.cache.get(k); ok { // a fetch finished since the first look
				r.mu.Unlock()
				r.stats.hits.Add(1)
				return data, nil
			}
			fl = &flight{done: make(chan struct{}), ahead: bg}
			r.mu.flights[k] = fl
			r.mu.Unlock()
			t0 := time.Now()
			if bg {
				r.stats.aheadFetches.Add(1)
			} else {
				r.stats.misses.Add(1)
			}
			if err := r.acquire(ctx); err != nil {
				r.finish(k, fl, nil, err)
				return nil, err
			}
			data, err := r.fetch(ctx, objKey, f, i)
			r.release()
			r.finish(k, fl, data, err)
			if !bg {
				r.stats.waitNanos.Add(int64(time.Since(t0)))
			}
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
			t0 := time.Now()
			select {
			case <-fl.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if !bg {
				r.stats.waitNanos.Add(int64(time.Since(t0)))
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

// release gives a pool slot back and wakes the hints waiting for one
// (waitSlot).
func (r *Reader) release() {
	<-r.sem
	r.mu.Lock()
	r.wakeLocked()
	r.mu.Unlock()
}

func (r *Reader) wakeLocked() {
	if r.mu.freed != nil {
		close(r.mu.freed)
		r.mu.freed = nil
	}
}

// finish publishes a fetch result, caches good data and ends the flight.
func (r *Reader) finish(k string, fl *flight, data []byte, err error) {
	fl.data, fl.err = data, err
	if err == nil {
		r.cache.set(k, data)
	}
	r.mu.Lock()
	fl.finished = true
	if r.mu.flights[k] == fl {
		delete(r.mu.flights, k)
	}
	if fl.ahead && !fl.used && err == nil && !r.cache.has(k) {
		r.stats.aheadDropped.Add(1) // too big for the cache
	}
	r.mu.Unlock()
	close(fl.done)
}

// prefetchRun starts a background fetch of frames [a, b) of the object
// with one ranged GET, skipping frames cached or in flight at the start
// and stopping the run at the first such frame after it. It returns false
// when the pool has no slot free for read-ahead.
func (r *Reader) prefetchRun(objKey string, f *segfile.Footer, a, b int) bool {
	for a < b {
		if !r.cache.has(frameKey(objKey, a)) {
			break
		}
		a++
	}
	if a == b {
		return true
	}
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return false
	}
	for a < b && (r.mu.flights[frameKey(objKey, a)] != nil || r.cache.has(frameKey(objKey, a))) {
		a++ // fetched meanwhile, or being fetched
	}
	if a == b {
		r.mu.Unlock()
		return true
	}
	if r.mu.ahead >= max(r.cfg.MaxColdGets-1, 1) {
		r.mu.Unlock()
		return false
	}
	select {
	case r.sem <- struct{}{}:
	default:
		r.mu.Unlock()
		return false
	}
	r.mu.ahead++
	keys := make([]string, 0, b-a)
	fls := make([]*flight, 0, b-a)
	for i := a; i < b; i++ {
		k := frameKey(objKey, i)
		if r.mu.flights[k] != nil || r.cache.has(k) {
			break // the run ends before a frame that needs no fetch
		}
		fl := &flight{done: make(chan struct{}), ahead: true}
		r.mu.flights[k] = fl
		keys, fls = append(keys, k), append(fls, fl)
	}
	r.wg.Add(1)
	r.mu.Unlock()
	r.stats.aheadFetches.Add(int64(len(fls)))
	go func() {
		defer r.wg.Done()
		r.fetchRun(objKey, f, a, keys, fls)
	}()
	return true
}

// fetchRun GETs frames a, a+1, ... (one per flight) with one ranged GET,
// releases the pool slot, then decodes and publishes each frame.
func (r *Reader) fetchRun(objKey string, f *segfile.Footer, a int, keys []string, fls []*flight) {
	first, lastF := f.Frames[a], f.Frames[a+len(fls)-1]
	lo, hi := first.CompOff, lastF.CompOff+lastF.CompLen
	comp := make([]byte, hi-lo)
	r.stats.gets.Add(1)
	err := r.readAt(r.ctx, objKey, comp, lo)
	<-r.sem
	r.mu.Lock()
	r.mu.ahead--
	r.wakeLocked()
	r.mu.Unlock()
	if err != nil {
		if !isCtxErr(err) {
			r.stats.errors.Add(1)
		}
		err = fmt.Errorf("coldread: get %s frames %d-%d: %w", objKey, a, a+len(fls)-1, err)
		for j, fl := range fls {
			r.finish(keys[j], fl, nil, err)
		}
		return
	}
	r.stats.getBytes.Add(hi - lo)
	for j, fl := range fls {
		fr := f.Frames[a+j]
		data, err := segfile.DecodeFrame(nil, fr, comp[fr.CompOff-lo:fr.CompOff-lo+fr.CompLen])
		if err != nil {
			r.stats.corrupt.Add(1)
			err = fmt.Errorf("coldread: %s frame %d: %w", objKey, a+j, err)
		} else {
			r.stats.decodedBytes.Add(int64(len(data)))
			if fr.Raw && len(fls) > 1 {
				// A raw frame is a slice of the run's buffer: one frame
				// kept (cached, or lent to a response) would keep the whole
				// run. Its own copy keeps the cache's bound in bytes; a
				// copy is a tenth of a decode's cost.
				data = bytes.Clone(data)
			}
		}
		r.finish(keys[j], fl, data, err)
	}
}

// fetch GETs and decodes frame i. The caller holds a pool slot.
func (r *Reader) fetch(ctx context.Context, objKey string, f *segfile.Footer, i int) ([]byte, error) {
	fr := frameInfo(f, i)
	comp := make([]byte, fr.CompLen)
	r.stats.gets.Add(1)
	if err := r.readAt(ctx, objKey, comp, fr.CompOff); err != nil {
		if !isCtxErr(err) {
			r.stats.errors.Add(1)
		}
		return nil, fmt.Errorf("coldread: get %s frame %d: %w", objKey, i, err)
	}
	r.stats.getBytes.Add(fr.CompLen)
	data, err := segfile.DecodeFrame(nil, fr, comp)
	if err == nil && i == len(f.Frames) {
		data, err = segfile.ExpandLayout(data, f.LayoutRuns, f.LogicalSize)
	}
	if err != nil {
		r.stats.corrupt.Add(1)
		return nil, fmt.Errorf("coldread: %s frame %d: %w", objKey, i, err)
	}
	if i < len(f.Frames) {
		r.stats.decodedBytes.Add(int64(len(data)))
	}
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
	return r.footerOf(ctx, o, false)
}

// footerOf is footer; bg: read for a hint or read-ahead, whose failure a
// reader that shares it does not take for its own (it reads again).
func (r *Reader) footerOf(ctx context.Context, o Object, bg bool) (*segfile.Footer, error) {
	for attempt := 0; ; attempt++ {
		r.mu.Lock()
		ff := r.mu.footers[o.Key]
		if ff == nil {
			ff = &footerFlight{done: make(chan struct{}), bg: bg}
			r.mu.footers[o.Key] = ff
			r.mu.Unlock()
			if err := r.acquire(ctx); err != nil {
				r.footerDone(o, ff, err)
				return nil, err
			}
			r.loadFooter(ctx, o, ff)
		} else {
			ff.hit = true
			r.mu.Unlock()
		}
		select {
		case <-ff.done:
		default:
			t0 := time.Now()
			select {
			case <-ff.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if !bg {
				r.stats.waitNanos.Add(int64(time.Since(t0)))
			}
		}
		if ff.err != nil && (ff.bg && !bg || isCtxErr(ff.err)) && ctx.Err() == nil && attempt < 3 {
			continue // another's background read failed, or its reader went away: read it ourselves
		}
		return ff.f, ff.err
	}
}

// loadFooter reads the footer; the caller holds a pool slot, which is
// released.
func (r *Reader) loadFooter(ctx context.Context, o Object, ff *footerFlight) {
	r.stats.gets.Add(1)
	f, err := segfile.ReadFooter(ctx, r.readAt, o.Key, o.Size)
	r.release()
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
	} else {
		r.mu.Lock()
		if r.mu.footers[o.Key] == ff {
			ff.bytes = footerCost(ff.f, o.Key)
			r.mu.fbytes += ff.bytes
			r.evictFootersLocked(ff)
		}
		r.mu.Unlock()
	}
	close(ff.done)
}

// evictFootersLocked drops footers while they exceed the budget: a clock
// over the map's (random) order, sparing once each footer read again since
// the last pass, never keep (just read) nor one still being read.
func (r *Reader) evictFootersLocked(keep *footerFlight) {
	budget := footerBudget(r.cfg.CacheBytes)
	for pass := 0; pass < 2 && r.mu.fbytes > budget; pass++ {
		for k, ff := range r.mu.footers {
			if r.mu.fbytes <= budget {
				return
			}
			if ff == keep || ff.bytes == 0 {
				continue // being read, or just read
			}
			if ff.hit && pass == 0 {
				ff.hit = false
				continue
			}
			delete(r.mu.footers, k)
			r.mu.fbytes -= ff.bytes
		}
	}
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
	ff := &footerFlight{done: make(chan struct{}), bg: true}
	r.mu.footers[o.Key] = ff
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		r.loadFooter(r.ctx, o, ff)
	}()
}
