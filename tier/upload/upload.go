package upload

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/segfile"
)

// Config configures an Uploader. Zero values mean the documented default.
type Config struct {
	Bucket tier.Bucket   // required
	Source SegmentSource // required
	// Prefix is prepended to every key ("cluster/broker"); "" for none.
	Prefix string
	// FrameSize is the input bytes per frame (segfile default 2 MiB). For
	// consumequeue segments it is rounded down to whole entries.
	FrameSize int
	// Level is the zstd level (default zstd.SpeedDefault).
	Level zstd.EncoderLevel
	// Concurrency is the number of segments encoded and uploaded at once.
	// Default 2.
	Concurrency int
	// PollInterval is how often Sealed is asked when nobody calls Notify.
	// Default 1s.
	PollInterval time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential backoff
	// between attempts. Defaults 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// AttemptTimeout bounds one Put attempt (a hung connection counts as a
	// retryable failure). Default 5m.
	AttemptTimeout time.Duration
	// MaxHardAttempts is how many times an error tier.IsRetryable rejects is
	// tried before the segment is parked for MaxBackoff. Default 5.
	MaxHardAttempts int
	// ManifestDelay is how long the committer may hold finished uploads
	// after the first one, to list more in one manifest delta (fewer
	// PUTs). Default 0. It holds them only while another upload is
	// running or, with MoreSoon, another segment is expected to be ready
	// in time; otherwise it commits at once. Segments it holds are not
	// marked uploaded (so stay local) until their delta is written.
	ManifestDelay time.Duration
	// MoreSoon, if set, tells the committer whether another segment is
	// expected to be sealed within the given duration (the rest of the
	// ManifestDelay window, less the time the last upload took): asked
	// when an upload finishes and again every ManifestDelay/8 (1 ms to 1
	// s) while it holds some, with no other upload running. Nil: hold for
	// the whole ManifestDelay.
	MoreSoon func(within time.Duration) bool
	// ListOutOfOrder lists a commitlog object as soon as it is uploaded,
	// though one below it is still missing, as uploaders before ordered
	// listing did (Uploader.listable). Only for tests of readers of the
	// manifests with holes those left; never set it otherwise.
	ListOutOfOrder bool
	// PairQueueIndex lists a commitlog segment's object and the queue
	// index object of the same base in the manifest only together (or
	// one of them once the other is already listed): a restore that
	// finds a segment listed without its queue index cannot reach its
	// records by queue offset, so for it they would be lost.
	PairQueueIndex bool
	// PairKeyIndex (with PairQueueIndex) adds the key index object of the
	// same base to that group: the three are listed together, or the rest
	// once the others are listed, so a restored broker finds every listed
	// segment's keys.
	PairKeyIndex bool
	// Sections lists the index kinds (KindQueueIndex, KindKeyIndex) stored
	// inside each commitlog object as segfile sections, in this order
	// (ascending Kind): after encoding a commitlog segment's frames the
	// Uploader opens Segment{Kind: k, Base: its base, Length: -1} of the
	// Source for each and appends it, so a segment and its indexes are one
	// object, one PUT and one manifest entry (Object.Sections). Pairing
	// (PairQueueIndex) then concerns only indexes uploaded on their own,
	// for segments whose object was uploaded before sections existed.
	Sections []Kind
	// SpoolDir, if set, holds each encoded object in a temporary file there
	// (upload-*.seg) instead of memory while it is uploaded, so a worker
	// keeps only its encoding buffers in memory however long the bucket is
	// down. The file is removed when the upload ends (success, failure or
	// shutdown); New removes files of that pattern a crashed process left.
	// The directory must exist.
	SpoolDir string
	// Fence, if set, is called before every bucket write the Uploader
	// issues (object PUTs, manifest writes, DeleteObjects). A non-nil error
	// skips that write: the Uploader backs off and tries again later, as
	// for a failing bucket, so a fenced broker never writes an object or
	// the manifest. The epoch it returns is recorded in the manifest
	// written under it (Manifest.Epoch). Nil means no fencing.
	Fence func() (epoch int64, err error)
	// ValidFor, if set (with Fence), is how much longer the answer Fence
	// gives stays true: the lease's remaining validity. Every bucket write
	// the Uploader issues runs under a context whose deadline is at most
	// that far away, so a write that cannot finish while the lease is
	// valid is cancelled (and, like a timeout, retried under the fence).
	// A request the server received before the deadline may still be
	// applied after it; keys that carry the epoch (KeyAt) and the
	// manifest's epoch rule keep such a late write from changing what a
	// newer holder's readers see (see the package doc, "Fencing").
	ValidFor func() time.Duration
	// SnapshotEvery is how many manifest deltas are written between two
	// snapshots (see the package doc). Default DefaultSnapshotEvery.
	SnapshotEvery int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

func (c *Config) normalize() error {
	if c.Bucket == nil || c.Source == nil {
		return errors.New("upload: Config.Bucket and Config.Source are required")
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 2
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = c.MinBackoff
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 5 * time.Minute
	}
	if c.MaxHardAttempts <= 0 {
		c.MaxHardAttempts = 5
	}
	if c.FrameSize < 0 || c.FrameSize > segfile.MaxFrameSize {
		return fmt.Errorf("upload: FrameSize %d", c.FrameSize)
	}
	if c.SnapshotEvery <= 0 {
		c.SnapshotEvery = DefaultSnapshotEvery
	}
	for i, k := range c.Sections {
		if k != KindQueueIndex && k != KindKeyIndex || i > 0 && k <= c.Sections[i-1] {
			return fmt.Errorf("upload: Config.Sections %v: want queue and key index kinds, ascending, once each", c.Sections)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Uploader uploads sealed segments and maintains the manifest. Create it
// with New and start it with Run.
type Uploader struct {
	cfg        Config
	log        *slog.Logger
	mkey       string
	lay        layout
	writeMu    sync.Mutex // one manifest write (delta, snapshot, collection) at a time
	wake       chan struct{}
	flush      chan struct{} // cuts a ManifestDelay short (Flush)
	jobs       chan job
	done       chan done
	stats      stats
	runMu      sync.Mutex    // held by Run for its whole life
	loaded     chan struct{} // closed once the manifest has been read
	loadedOnce sync.Once
	fenced     atomic.Bool // the last Fence call refused; for logging state changes
	cqWarned   atomic.Bool

	mu struct {
		sync.Mutex
		inflight map[string]bool      // key -> being uploaded or committed
		idle     int                  // workers waiting for a job (worker, scan)
		parked   map[string]time.Time // key -> not before
		manifest *Manifest            // last one written or read (st.m)
		st       *mstate              // what writes extend
		orphans  []string             // keys to delete at the next collection (failed deletes)
		// pending are the commitlog ranges the last scan found sealed
		// and not wholly in the manifest ([the first missing part's
		// base, the local segment's end)), ascending: the committer lists
		// no commitlog object above one of them before the manifest holds
		// all of it below that object (listable).
		pending [][2]int64
	}
}

// job is one upload: seg is the segment Sealed listed, part what is
// uploaded of it (seg itself, or for a commitlog segment the part of it
// the manifest lacks: Segment.Skip), slot the key it is in flight under
// (Key of seg: without an epoch).
type job struct {
	seg, part Segment
	slot      string
}

// whole reports whether the job uploads its whole segment.
func (j job) whole() bool { return j.part.Skip == 0 && j.part.Length == j.seg.Length }

type done struct {
	job
	obj  Object
	took time.Duration // encoding and putting it
}

// New checks cfg and returns an Uploader.
func New(cfg Config) (*Uploader, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	u := &Uploader{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "tier/upload"),
		mkey:   ManifestKey(cfg.Prefix),
		lay:    layoutOf(ManifestKey(cfg.Prefix)),
		wake:   make(chan struct{}, 1),
		flush:  make(chan struct{}, 1),
		jobs:   make(chan job),
		done:   make(chan done, cfg.Concurrency),
		loaded: make(chan struct{}),
	}
	u.mu.inflight = make(map[string]bool)
	u.mu.parked = make(map[string]time.Time)
	if cfg.SpoolDir != "" {
		// Spool files of a crashed process: nobody uploads them any more.
		old, err := filepath.Glob(filepath.Join(cfg.SpoolDir, spoolPattern))
		if err != nil {
			return nil, fmt.Errorf("upload: SpoolDir %q: %w", cfg.SpoolDir, err)
		}
		for _, name := range old {
			if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("upload: remove old spool file: %w", err)
			}
		}
	}
	return u, nil
}

// Notify asks for a scan now (a segment was sealed). It never blocks.
func (u *Uploader) Notify() {
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// Version is the Version of the manifest Manifest would return, and false
// before Run has loaded it. It copies nothing (Manifest copies every
// object): a cheap way to tell whether the manifest changed, since every
// write raises it.
func (u *Uploader) Version() (int64, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.mu.manifest == nil {
		return 0, false
	}
	return u.mu.manifest.Version, true
}

// Manifest returns a copy of the last manifest written or read, or nil
// before Run has loaded it.
func (u *Uploader) Manifest() *Manifest {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.mu.manifest == nil {
		return nil
	}
	m := *u.mu.manifest
	m.Objects = append([]Object(nil), m.Objects...)
	return &m
}

// Run uploads until ctx is done, then waits for its goroutines and returns
// ctx's error. An upload cut short by ctx leaves its segment pending; it
// is repeated by the next Run. Run may be called again after it returns,
// but not concurrently.
func (u *Uploader) Run(ctx context.Context) error {
	if !u.runMu.TryLock() {
		return errors.New("upload: Run is already running")
	}
	defer u.runMu.Unlock()

	if err := u.loadManifest(ctx); err != nil {
		return err
	}
	// Before anything is listed or marked: the manifest holds our epoch,
	// so a deposed holder's late delta changes nothing we read.
	if err := u.Claim(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for range u.cfg.Concurrency {
		wg.Go(func() { u.worker(ctx) })
	}
	commitDone := make(chan struct{})
	go func() {
		defer close(commitDone)
		u.committer(ctx)
	}()
	u.scanLoop(ctx)
	wg.Wait()
	<-commitDone
	// Anything still in flight was abandoned; forget it so a later Run
	// starts clean.
	u.mu.Lock()
	clear(u.mu.inflight)
	u.mu.idle = 0 // its workers are gone
	u.mu.Unlock()
	return ctx.Err()
}

func (u *Uploader) loadManifest(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		st, err := readState(ctx, u.cfg.Bucket, u.lay)
		if err == nil {
			u.setState(st)
			u.loadedOnce.Do(func() { close(u.loaded) })
			if st.legacy {
				// Migrate now if the fence allows; else the first write does.
				u.writeMu.Lock()
				if epoch, err := u.fence(); err == nil && epoch >= st.m.Epoch {
					if err := u.migrate(ctx, epoch); err != nil && ctx.Err() == nil {
						u.log.Warn("manifest migration failed; retried at the next write", "err", err)
					}
				}
				u.writeMu.Unlock()
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		u.stats.errors.Add(1)
		u.log.Warn("load manifest failed; retrying", "key", u.mkey, "attempt", attempt+1, "err", err)
		if err := u.sleep(ctx, attempt); err != nil {
			return err
		}
	}
}

func (u *Uploader) setState(st *mstate) {
	u.mu.Lock()
	u.mu.st, u.mu.manifest = st, st.m
	u.mu.Unlock()
}

func (u *Uploader) state() *mstate {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.mu.st
}

// scanLoop lists sealed segments and hands them to workers until ctx ends.
func (u *Uploader) scanLoop(ctx context.Context) {
	t := time.NewTicker(u.cfg.PollInterval)
	defer t.Stop()
	for {
		u.scan(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-u.wake:
		}
	}
}

func (u *Uploader) scan(ctx context.Context) {
	segs, err := u.cfg.Source.Sealed(ctx)
	if err != nil {
		if ctx.Err() == nil {
			u.stats.errors.Add(1)
			u.log.Warn("list sealed segments failed", "err", err)
		}
		return
	}
	now := u.cfg.Now()
	var lagBytes int64
	var oldest time.Time
	for _, s := range segs {
		lagBytes += max(s.Length, 0) // -1: known once opened
		if !s.SealedAt.IsZero() && (oldest.IsZero() || s.SealedAt.Before(oldest)) {
			oldest = s.SealedAt
		}
	}
	u.stats.lagBytes.Store(lagBytes)
	u.stats.pending.Store(int64(len(segs)))
	u.notePending(segs)
	if oldest.IsZero() {
		u.stats.lagNanos.Store(0)
	} else {
		u.stats.lagNanos.Store(int64(max(now.Sub(oldest), 0)))
	}

	for _, s := range segs {
		if s.Kind == KindConsumeQueue {
			// Not uploaded any more: every entry is in the queue index
			// object of the segment holding its record, and the manifest
			// format does not carry them.
			if !u.cqWarned.Swap(true) {
				u.log.Warn("consumequeue segments are not uploaded (the queue index objects hold their entries)", "segment", s.Name)
			}
			continue
		}
		key, err := Key(u.cfg.Prefix, s)
		if err != nil {
			u.stats.errors.Add(1)
			u.log.Error("segment cannot be uploaded", "segment", s.Name, "err", err)
			continue
		}
		u.mu.Lock()
		busy := u.mu.inflight[key]
		notBefore := u.mu.parked[key]
		part, listed, covered := u.partLocked(s)
		if !busy && (notBefore.IsZero() || !now.Before(notBefore)) {
			u.mu.inflight[key] = true
			delete(u.mu.parked, key)
		} else {
			busy = true
		}
		u.mu.Unlock()
		if busy {
			continue
		}
		if covered {
			// Uploaded and listed before a crash or a failed mark, or (a
			// broker that took over) its bytes are the bucket's already:
			// mark it, no new PUT.
			u.mark(ctx, s, listed)
			u.release(key)
			continue
		}
		u.mu.Lock()
		free := u.mu.idle > 0
		if free {
			u.mu.idle--
		}
		u.mu.Unlock()
		if !free {
			// All workers busy: leave the rest for the next scan (a
			// finishing worker triggers one).
			u.release(key)
			return
		}
		select {
		case u.jobs <- job{seg: s, part: part, slot: key}: // taken at once: that worker counted itself free
		case <-ctx.Done():
			u.release(key)
			return
		}
	}
}

// notePending records the commitlog ranges of segs the manifest lacks
// (Uploader.mu.pending): from the first part it lacks to the local
// segment's end, since a segment that straddles listed objects (a broker
// that took over) is uploaded one missing part at a time. Sealed lists
// every sealed segment not marked, and segments seal in log order, so a
// commitlog object the scan hands out has every unlisted range below it
// in the same list.
func (u *Uploader) notePending(segs []Segment) {
	var pending [][2]int64
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range segs {
		if s.Kind != KindCommitLog {
			continue
		}
		if part, _, covered := u.partLocked(s); !covered {
			pending = append(pending, [2]int64{part.Base, max(s.Base+s.Length, part.Base+1)})
		}
	}
	slices.SortFunc(pending, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	u.mu.pending = pending
}

// partLocked returns what of s to upload, or, when the manifest holds
// all of it, covered and the object listed for it (for MarkUploaded).
//
// A commitlog segment is compared by range: the manifest's commitlog
// objects (and expired ranges) are the log as uploaded, whoever uploaded
// it. The part of s they hold is not uploaded again: a broker that took
// over continues the uploaded log exactly where it ends, though its local
// segment boundaries may differ from the old master's (it sealed by age, a
// slave never does). The first part they lack is uploaded as an object
// of its own (Segment.Skip; its base where the gap starts), and the
// segment is marked once the manifest holds all of it. A segment whose
// object is listed at its base, the usual case, is covered as before.
//
// Other kinds are found by kind and base (any key).
func (u *Uploader) partLocked(s Segment) (part Segment, listed Object, covered bool) {
	m := u.mu.manifest
	if s.Kind != KindCommitLog || s.Length < 0 {
		if m == nil {
			return s, Object{}, false
		}
		o, ok := m.findAt(s.Kind.String(), s.Topic, s.QueueID, s.Base)
		if ok && (s.Length < 0 || o.Length == s.Length) {
			return s, o, true
		}
		return s, Object{}, false
	}
	if m == nil || s.Length == 0 {
		return s, Object{}, false
	}
	cl := m.commitLogSorted()
	from, to, gap := m.firstGap(cl, s.Base, s.Base+s.Length)
	if !gap {
		o, ok := m.findAt(s.Kind.String(), "", 0, s.Base)
		if !ok || o.End() < s.Base+s.Length {
			o, _ = objectAt(cl, s.Base+s.Length-1) // an expired range may hold the end: then none
		}
		return s, o, true
	}
	if from == s.Base && to == s.Base+s.Length {
		return s, Object{}, false // all of it: the usual upload
	}
	part = s
	part.Base, part.Length, part.Skip, part.End = from, to-from, from-s.Base, to
	return part, Object{}, false
}

func (u *Uploader) release(key string) {
	u.mu.Lock()
	delete(u.mu.inflight, key)
	u.mu.Unlock()
}

func (u *Uploader) park(key string) {
	u.mu.Lock()
	delete(u.mu.inflight, key)
	u.mu.parked[key] = u.cfg.Now().Add(u.cfg.MaxBackoff)
	u.mu.Unlock()
}

func (u *Uploader) worker(ctx context.Context) {
	for {
		// Free: the next scan hands this worker a job (counted, so a scan
		// never offers one nobody will take), and a scan runs now, so what
		// an earlier scan left for want of a free worker does not wait for
		// the next PollInterval.
		u.mu.Lock()
		u.mu.idle++
		u.mu.Unlock()
		u.Notify()
		select {
		case <-ctx.Done():
			return
		case j := <-u.jobs:
			start := time.Now()
			obj, err := u.upload(ctx, j)
			if err != nil {
				if ctx.Err() != nil {
					u.release(j.slot)
				} else {
					u.park(j.slot)
				}
				continue
			}
			select {
			case u.done <- done{job: j, obj: obj, took: time.Since(start)}:
			case <-ctx.Done():
				u.release(j.slot)
				return
			}
		}
	}
}

// spool holds one encoded object.
type spool interface {
	io.Writer
	reader() (io.Reader, error)
	close()
}

type memSpool struct{ bytes.Buffer }

func (m *memSpool) reader() (io.Reader, error) { return bytes.NewReader(m.Bytes()), nil }
func (m *memSpool) close()                     {}

type fileSpool struct{ *os.File }

func (f fileSpool) reader() (io.Reader, error) {
	// An *os.File is an io.ReaderAt and io.Seeker: providers upload its
	// parts in parallel. It is written no more: a local bucket may link it
	// (tier.FrozenFile).
	_, err := f.Seek(0, io.SeekStart)
	return frozenSpool{f.File}, err
}

// frozenSpool is a finished spool file as a Put body (tier.FrozenFile).
type frozenSpool struct{ *os.File }

func (s frozenSpool) FrozenPath() string { return s.Name() }

func (f fileSpool) close() {
	f.Close()
	os.Remove(f.Name())
}

// spoolPattern names the Uploader's files in Config.SpoolDir.
const spoolPattern = "upload-*.seg"

func (u *Uploader) newSpool() (spool, error) {
	if u.cfg.SpoolDir == "" {
		return &memSpool{}, nil
	}
	f, err := os.CreateTemp(u.cfg.SpoolDir, spoolPattern)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	return fileSpool{f}, nil
}

// fence asks Config.Fence whether a bucket write may be issued now, and
// logs when the answer changes.
func (u *Uploader) fence() (int64, error) {
	if u.cfg.Fence == nil {
		return 0, nil
	}
	epoch, err := u.cfg.Fence()
	if st := u.state(); err == nil && st != nil && epoch < st.m.Epoch {
		// A newer lease holder wrote the manifest: this one is deposed.
		err = fmt.Errorf("%w (fence epoch %d, manifest epoch %d)", errStaleEpoch, epoch, st.m.Epoch)
	}
	if err != nil {
		if !u.fenced.Swap(true) {
			u.log.Warn("bucket writes fenced; uploads and manifest writes wait", "err", err)
		}
		return 0, err
	}
	if u.fenced.Swap(false) {
		u.log.Info("bucket writes no longer fenced; uploads resume", "epoch", epoch)
	}
	return epoch, nil
}

// upload encodes j's part once, then puts it until it succeeds, ctx
// ends, or a non-retryable error repeats MaxHardAttempts times. The key
// carries the epoch Fence returned for the attempt (KeyAt).
func (u *Uploader) upload(ctx context.Context, j job) (Object, error) {
	sp, footer, secs, err := u.encode(ctx, j.part)
	if err != nil {
		u.stats.errors.Add(1)
		u.log.Warn("encode segment failed; parked", "segment", j.seg.Name, "err", err)
		return Object{}, err
	}
	defer sp.close()
	size := footer.ObjectSize()
	hard := 0
	for attempt := 0; ; attempt++ {
		epoch, err := u.fence()
		if err != nil {
			if err := u.sleep(ctx, attempt); err != nil {
				return Object{}, err
			}
			continue
		}
		key, err := KeyAt(u.cfg.Prefix, j.part, epoch)
		if err != nil {
			return Object{}, err
		}
		r, err := sp.reader()
		if err == nil {
			actx, cancel := u.bound(ctx, u.cfg.AttemptTimeout)
			err = u.cfg.Bucket.Put(actx, key, r, size)
			cancel()
		}
		if err == nil {
			u.stats.objects.Add(1)
			u.stats.bytes.Add(size)
			u.stats.logical.Add(footer.LogicalSize)
			return Object{
				Key: key, Kind: j.part.Kind.String(), Topic: j.part.Topic, QueueID: j.part.QueueID,
				Base: j.part.Base, Length: footer.LogicalSize, Size: size, Frames: len(footer.Frames),
				Created: u.cfg.Now().UTC(), Sections: secs,
			}, nil
		}
		if ctx.Err() != nil {
			return Object{}, ctx.Err()
		}
		u.stats.errors.Add(1)
		retry := retryable(ctx, err)
		if !retry {
			hard++
		}
		u.log.Warn("upload failed", "key", key, "attempt", attempt+1, "retryable", retry, "err", err)
		if hard >= u.cfg.MaxHardAttempts {
			return Object{}, err
		}
		if err := u.sleep(ctx, attempt); err != nil {
			return Object{}, err
		}
	}
}

// bound returns ctx bounded by timeout and, with Config.ValidFor, by the
// lease's remaining validity: a write that cannot finish while the lease
// is valid is cancelled (an expired one at once).
func (u *Uploader) bound(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	d := timeout
	if u.cfg.ValidFor != nil {
		if v := u.cfg.ValidFor(); v < d || d <= 0 {
			d = max(v, 0)
		}
	}
	return context.WithTimeout(ctx, d)
}

func (u *Uploader) encode(ctx context.Context, s Segment) (spool, *segfile.Footer, []Section, error) {
	r, err := u.cfg.Source.Open(ctx, s)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open %s: %w", s.Name, err)
	}
	defer r.Close()
	length := r.Size()
	if s.Length >= 0 && length != s.Length {
		return nil, nil, nil, fmt.Errorf("segment %s: opened %d bytes, listed %d", s.Name, length, s.Length)
	}
	opts := u.options(s.Kind, s.Base, r)
	if l, ok := r.(Layouter); ok {
		opts.Layout = l.Layout()
	}
	sp, err := u.newSpool()
	if err != nil {
		return nil, nil, nil, err
	}
	w, err := segfile.NewWriter(sp, opts)
	if err == nil {
		err = w.WriteFrom(r, length)
	}
	if err == nil && s.Kind == KindCommitLog {
		err = u.sections(ctx, s, w)
	}
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		sp.close()
		return nil, nil, nil, fmt.Errorf("encode %s: %w", s.Name, err)
	}
	var secs []Section
	for _, sec := range w.Footer().Sections {
		secs = append(secs, Section{Kind: Kind(sec.ID).String(), Off: sec.Off, Size: sec.Size, Length: sec.LogicalSize})
	}
	return sp, w.Footer(), secs, nil
}

// options are the segfile options of a segment (or section) of kind k.
func (u *Uploader) options(k Kind, base int64, r SegmentReader) segfile.Options {
	opts := segfile.Options{FrameSize: u.cfg.FrameSize, Level: u.cfg.Level, Base: base}
	if c, ok := r.(Cutter); ok {
		opts.Cuts = c.Cuts()
	}
	if k == KindConsumeQueue && opts.Cuts == nil {
		fs := opts.FrameSize
		if fs == 0 {
			fs = segfile.DefaultFrameSize
		}
		opts.FrameSize = max(fs-fs%ConsumeQueueEntrySize, ConsumeQueueEntrySize)
	}
	if k == KindKeyIndex && opts.Cuts == nil {
		opts.FrameSize = KeyIndexFrameSize
	}
	if k == KindKeyIndex || k == KindQueueIndex {
		opts.Planes = IndexEntrySize
	}
	return opts
}

// sections appends the Config.Sections indexes of commitlog segment s to
// its object, each opened from the Source only now (a queue index is
// built on Open) and closed once encoded.
func (u *Uploader) sections(ctx context.Context, s Segment, w *segfile.Writer) error {
	for _, k := range u.cfg.Sections {
		is := Segment{Kind: k, Name: fmt.Sprintf("%s:%s", s.Name, k), Base: s.Base, Length: -1, SealedAt: s.SealedAt,
			Skip: s.Skip, End: s.End}
		r, err := u.cfg.Source.Open(ctx, is)
		if err != nil {
			return fmt.Errorf("open its %s: %w", k, err)
		}
		_, err = w.AddSection(uint32(k), r, r.Size(), u.options(k, s.Base, r))
		if cerr := r.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("its %s: %w", k, err)
		}
	}
	return nil
}

// committer writes the manifest after uploads finish, batching those that
// finish together, then marks their segments uploaded. What listable
// holds back (an earlier commitlog part still uploading, a partner not
// finished) waits in held, still in flight so nobody uploads it again,
// and is looked at again with every finished upload and every
// PollInterval (the scan may find the part it waits for listed, or gone).
func (u *Uploader) committer(ctx context.Context) {
	var held []done
	for {
		var batch []done
		var recheck *time.Timer
		var recheckC <-chan time.Time
		if len(held) > 0 {
			recheck = time.NewTimer(u.cfg.PollInterval)
			recheckC = recheck.C
		}
		select {
		case <-ctx.Done():
			return
		case d := <-u.done:
			batch = append(batch, d)
		case <-recheckC:
		}
		if recheck != nil {
			recheck.Stop()
		}
		if d := u.cfg.ManifestDelay; d > 0 && len(batch) > 0 {
			deadline := time.Now().Add(d)
			t := time.NewTimer(d)
			tick := time.NewTicker(max(min(d/8, time.Second), time.Millisecond))
		gather:
			for u.worthHolding(batch, len(held), deadline) {
				select {
				case d := <-u.done:
					batch = append(batch, d)
				case <-tick.C:
				case <-t.C:
					break gather
				case <-u.flush:
					break gather
				case <-ctx.Done():
					break gather
				}
			}
			t.Stop()
			tick.Stop()
		}
	drain:
		for {
			select {
			case d := <-u.done:
				batch = append(batch, d)
			default:
				break drain
			}
		}
		batch, held = u.listable(append(held, batch...))
		u.stats.held.Store(int64(len(held)))
		if len(batch) == 0 {
			continue
		}
		objs := make([]Object, len(batch))
		for i, d := range batch {
			objs[i] = d.obj
		}
		if err := u.commit(ctx, true, func(*Manifest) *delta { return &delta{Put: objs} }); err != nil {
			for _, d := range append(batch, held...) {
				u.release(d.slot)
			}
			return // ctx is done
		}
		for _, d := range batch {
			if d.whole() {
				u.mark(ctx, d.seg, d.obj)
			}
			// A part: the next scan uploads the next part the manifest
			// lacks, or marks the segment once it holds all of it.
			u.release(d.slot)
		}
		u.Notify()
	}
}

// worthHolding reports whether the committer should go on holding the
// finished uploads of batch (and held, waiting for partners) before
// writing their delta: the window is not over, and another upload is
// running, or (MoreSoon) another segment is expected to be sealed in time
// for its upload to finish within the window.
func (u *Uploader) worthHolding(batch []done, held int, deadline time.Time) bool {
	left := time.Until(deadline)
	if left <= 0 {
		return false
	}
	u.mu.Lock()
	running := len(u.mu.inflight) > len(batch)+held
	u.mu.Unlock()
	if running || u.cfg.MoreSoon == nil {
		return true
	}
	var took time.Duration
	for _, d := range batch {
		took = max(took, d.took)
	}
	return left > took && u.cfg.MoreSoon(left-took)
}

// pairKey names a commitlog segment or its queue index.
type pairKey struct {
	kind Kind
	base int64
}

// partners are the other members of d's group: a commitlog segment, its
// queue index and (PairKeyIndex) its key index; an index stored inside
// the commitlog object (Config.Sections) is no partner: it comes with it.
func (u *Uploader) partners(d done) []pairKey {
	kinds := []Kind{KindCommitLog, KindQueueIndex}
	if u.cfg.PairKeyIndex {
		kinds = append(kinds, KindKeyIndex)
	}
	if !slices.Contains(kinds, d.seg.Kind) {
		return nil
	}
	var out []pairKey
	for _, k := range kinds {
		if k == d.seg.Kind {
			continue
		}
		if _, inside := d.obj.Section(k); inside && d.seg.Kind == KindCommitLog {
			continue
		}
		out = append(out, pairKey{k, d.seg.Base})
	}
	return out
}

// listable splits the finished uploads cands into those the next delta
// lists and those that wait. Two rules decide:
//
//   - Order. A commitlog object is listed only once every commitlog part
//     below it that the last scan found missing (mu.pending) is listed,
//     or goes into the same delta. The manifest's commitlog objects never
//     leave a hole below one of them: an empty-disk restore starts the
//     local log at their highest end, and what a hole held would be
//     served by nobody (a bucket-durable topic's records in it live only
//     in WAL objects past no restore's start). An upload that keeps
//     failing holds back the listing of every later segment: the local
//     copies stay, the upload lag grows and says so.
//   - Groups (PairQueueIndex). A commitlog object, its queue index (and,
//     PairKeyIndex, its key index) go into the manifest together, or the
//     rest once the others are listed (an index inside the listed
//     commitlog object counts as listed). A restore from a manifest that
//     lists one without the other could not reach the segment's records
//     by queue offset.
//
// Groups are taken in the order of their segments, so an earlier group
// waiting for its index holds back the commitlog objects above it.
func (u *Uploader) listable(cands []done) (ready, wait []done) {
	avail := make(map[pairKey]bool, len(cands))
	for _, d := range cands {
		avail[pairKey{d.seg.Kind, d.seg.Base}] = true
	}
	u.mu.Lock()
	m := u.mu.manifest
	pending := u.mu.pending
	u.mu.Unlock()
	var cl []Object
	if m != nil {
		cl = m.commitLogSorted()
	}
	going := map[int64]int64{} // commitlog objects listed by this delta: base -> end
	// covered reports whether the manifest, with what this delta lists,
	// holds all of [lo, hi).
	covered := func(lo, hi int64) bool {
		for lo < hi {
			if m != nil {
				from, _, gap := m.firstGap(cl, lo, hi)
				if !gap {
					return true
				}
				lo = from
			}
			end, ok := going[lo]
			if !ok || end <= lo {
				return false
			}
			lo = end
		}
		return true
	}
	// listed reports whether the manifest holds p (a stored manifest is
	// never changed in place: writeManifest and loadManifest replace it).
	listed := func(p pairKey) bool {
		if m == nil {
			return false
		}
		if _, ok := m.findAt(p.kind.String(), "", 0, p.base); ok {
			return true
		}
		if p.kind != KindCommitLog {
			if o, ok := m.findAt(KindCommitLog.String(), "", 0, p.base); ok {
				_, ok = o.Section(p.kind)
				return ok
			}
		}
		return false
	}
	// A group is complete when each member is finished or listed.
	complete := func(d done) bool {
		if !u.cfg.PairQueueIndex {
			return true
		}
		for _, p := range u.partners(d) {
			if !avail[p] && !listed(p) {
				return false
			}
		}
		return true
	}
	var logs []done
	for _, d := range cands {
		if d.seg.Kind == KindCommitLog {
			logs = append(logs, d)
		}
	}
	slices.SortFunc(logs, func(a, b done) int { return cmp.Compare(a.obj.Base, b.obj.Base) })
	blocked := map[int64]bool{} // commitlog segments that wait, by segment base
	stopped := false            // a commitlog object waits: so do those above it (but ListOutOfOrder)
	for _, d := range logs {
		for _, r := range pending {
			if r[0] >= d.obj.Base {
				break
			}
			if !covered(r[0], min(r[1], d.obj.Base)) {
				stopped = true
				break
			}
		}
		if (stopped && !u.cfg.ListOutOfOrder) || !complete(d) {
			stopped = true
			blocked[d.seg.Base] = true
			continue
		}
		going[d.obj.Base] = d.obj.End()
	}
	for _, d := range cands {
		ok := true
		switch {
		case d.seg.Kind == KindCommitLog:
			ok = !blocked[d.seg.Base]
		case u.cfg.PairQueueIndex && len(u.partners(d)) > 0:
			// An index goes with its commitlog object, or after it.
			ok = complete(d) && !blocked[d.seg.Base]
		}
		if ok {
			ready = append(ready, d)
		} else {
			wait = append(wait, d)
		}
	}
	return ready, wait
}

// writeManifest commits apply(a copy of the current manifest: its Objects
// and Expired) as a delta (the difference), retrying until it is written or
// ctx ends. On a conflicting write it rereads the manifest and applies
// again, so concurrent writers (the committer and Trim, or another
// process) never undo each other. While Config.Fence refuses, it waits
// (backing off) if waitFence is set, else returns the refusal.
func (u *Uploader) writeManifest(ctx context.Context, waitFence bool, apply func(*Manifest)) error {
	return u.commit(ctx, waitFence, func(cur *Manifest) *delta {
		next := &Manifest{Objects: slices.Clone(cur.Objects), Expired: slices.Clone(cur.Expired)}
		apply(next)
		next.Objects = mergeSorted(nil, next.Objects)
		return diff(cur, next)
	})
}

// Flush asks the committer to write the manifest for the uploads it is
// holding back (ManifestDelay) now: at shutdown nobody waits for the delay.
func (u *Uploader) Flush() {
	select {
	case u.flush <- struct{}{}:
	default:
	}
}

// Trim removes from the manifest every commitlog object that ends at or
// below floor (bucket retention), and the queue and key index of each, and
// returns them; the caller deletes the objects after Trim returns
// (DeleteObjects), so the manifest never lists a missing object. A crash
// in between leaves unlisted objects behind, which are harmless. Expired
// ranges below the first commitlog object left are dropped. While
// Config.Fence refuses, Trim returns its error without writing.
func (u *Uploader) Trim(ctx context.Context, floor int64) ([]Object, error) {
	return u.remove(ctx, func(o Object) bool { return o.End() <= floor }, false)
}

// Expire removes from the manifest the commitlog objects at the given
// bases, with their queue and key indexes, records their ranges in
// Manifest.Expired, and returns them for DeleteObjects, as Trim does. It is
// for objects in the middle of the log whose every record has expired
// (per-topic retention) while an earlier object stays: the gap they leave
// is marked as expired, so a reader of the manifest (a slave finding where
// the uploaded log ends, a restore) tells it from an upload still to come.
// The newest commitlog object is never removed: the manifest keeps
// recording how far the log was uploaded.
func (u *Uploader) Expire(ctx context.Context, bases []int64) ([]Object, error) {
	set := make(map[int64]bool, len(bases))
	for _, b := range bases {
		set[b] = true
	}
	return u.remove(ctx, func(o Object) bool { return set[o.Base] }, true)
}

// remove drops the commitlog objects gone picks (with their indexes) from
// the manifest; with expire, their ranges go into Expired and the newest
// commitlog object stays whatever gone says.
func (u *Uploader) remove(ctx context.Context, gone func(Object) bool, expire bool) ([]Object, error) {
	select {
	case <-u.loaded:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var removed []Object
	err := u.writeManifest(ctx, false, func(m *Manifest) {
		removed = removed[:0]
		cl := m.CommitLog()
		bases := map[int64]bool{} // bases of removed commitlog objects
		var spans []Span
		for i, o := range cl {
			if !gone(o) || expire && i == len(cl)-1 {
				continue
			}
			bases[o.Base] = true
			if expire {
				spans = append(spans, Span{From: o.Base, To: o.End()})
			}
		}
		kept := m.Objects[:0]
		first := int64(-1)
		for _, o := range m.Objects {
			// A segment's queue and key indexes go with it.
			if (o.Kind == KindCommitLog.String() || o.Kind == KindQueueIndex.String() || o.Kind == KindKeyIndex.String()) && bases[o.Base] {
				removed = append(removed, o)
				continue
			}
			if o.Kind == KindCommitLog.String() && (first < 0 || o.Base < first) {
				first = o.Base
			}
			kept = append(kept, o)
		}
		m.Objects = kept
		m.Expired = addSpans(m.Expired, spans...)
		// A range below the first object is no gap any more.
		for len(m.Expired) > 0 && (first < 0 || m.Expired[0].To <= first) {
			m.Expired = m.Expired[1:]
		}
		if len(m.Expired) == 0 {
			m.Expired = nil
		}
	})
	if err != nil {
		return nil, err
	}
	return removed, nil
}

// DeleteObjects deletes objs from the bucket (after Trim has removed them
// from the manifest), each under Config.Fence: a fenced Uploader deletes
// nothing and returns the fence's error. It tries every object and
// returns the errors joined.
func (u *Uploader) DeleteObjects(ctx context.Context, objs []Object) error {
	var errs []error
	for _, o := range objs {
		if _, err := u.fence(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("upload: delete %s: %w", o.Key, err))...)
		}
		dctx, cancel := u.bound(ctx, u.cfg.AttemptTimeout)
		err := u.cfg.Bucket.Delete(dctx, o.Key)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("upload: delete %s: %w", o.Key, err))
		}
	}
	return errors.Join(errs...)
}

func (u *Uploader) mark(ctx context.Context, s Segment, obj Object) {
	if err := u.cfg.Source.MarkUploaded(ctx, s, obj); err != nil && ctx.Err() == nil {
		// The segment stays listed; the next scan finds it in the manifest
		// and marks it again.
		u.stats.errors.Add(1)
		u.log.Warn("mark uploaded failed", "segment", s.Name, "err", err)
	}
}

// retryable is tier.IsRetryable, plus our own per-attempt timeout.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	return tier.IsRetryable(err)
}

// backoff is exponential from MinBackoff to MaxBackoff with full jitter.
func (u *Uploader) backoff(attempt int) time.Duration {
	d := u.cfg.MinBackoff << min(attempt, 30)
	if d <= 0 || d > u.cfg.MaxBackoff {
		d = u.cfg.MaxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

func (u *Uploader) sleep(ctx context.Context, attempt int) error {
	t := time.NewTimer(u.backoff(attempt))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Replace lists put in the manifest and unlists del (matched by key) in one
// delta, under Config.Fence like every manifest write (a fenced Uploader
// writes nothing and returns the refusal). It is for objects other than
// the log's own (KindCommitLog and its indexes), which Replace refuses:
// compacted generations (broker/compaction), each replacing the one
// before it. The caller puts the objects in the bucket first and deletes
// the unlisted ones after Replace returns, so the manifest never lists a
// missing object.
func (u *Uploader) Replace(ctx context.Context, put, del []Object) error {
	return u.ReplaceIf(ctx, put, del, nil)
}

// ReplaceIf is Replace if cond (nil: always) accepts the manifest as it is
// when the delta is built (after a conflict, as it is then): a refusal
// writes nothing and is returned.
func (u *Uploader) ReplaceIf(ctx context.Context, put, del []Object, cond func(*Manifest) error) error {
	for _, o := range append(slices.Clone(put), del...) {
		if _, known := kindOf(o.Kind); known || o.Key == "" {
			return fmt.Errorf("upload: replace: object %q of kind %q: only objects of other kinds, with a key", o.Key, o.Kind)
		}
	}
	select {
	case <-u.loaded:
	case <-ctx.Done():
		return ctx.Err()
	}
	var refused error
	err := u.writeManifest(ctx, false, func(m *Manifest) {
		refused = nil
		if cond != nil {
			if refused = cond(m); refused != nil {
				return // unchanged: an empty delta writes nothing
			}
		}
		gone := make(map[string]bool, len(del)+len(put))
		for _, o := range del {
			gone[o.Key] = true
		}
		for _, o := range put {
			gone[o.Key] = true // a put replaces an entry of the same key
		}
		kept := m.Objects[:0]
		for _, o := range m.Objects {
			if !gone[o.Key] {
				kept = append(kept, o)
			}
		}
		m.Objects = append(kept, put...)
	})
	if err != nil {
		return err
	}
	return refused
}
