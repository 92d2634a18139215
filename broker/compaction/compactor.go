package compaction

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// Topic is one compacted topic as the compactor sees it.
type Topic struct {
	Name   string
	Queues int32 // read queue count
	// Retention is how long its keyless records are kept (0: the broker
	// default, which is unlimited when STRATAMQ_RETENTION is not set; -1:
	// for ever).
	Retention time.Duration
}

// Topics lists the compacted topics.
type Topics interface {
	Compacted() []Topic
}

// Store is the log the compactor reads the records past a generation
// from (local segments, or the bucket through the cold reader).
type Store interface {
	Get(ctx context.Context, req store.GetRequest) (store.GetResult, error)
}

// Log is the bucket side the compactor writes through.
type Log interface {
	Listing
	// FreshGenerations reads the manifest from the bucket (not a copy in
	// memory, which a commit whose answer was lost leaves behind) and
	// returns its generations: what may be deleted is judged by it.
	FreshGenerations(ctx context.Context) (map[QueueKey]upload.Object, error)
	// UploadedEnds returns, per queue, its next offset at the end of the
	// uploaded log (the newest listed commitlog object): offsets below
	// are in sealed, uploaded segments.
	UploadedEnds(ctx context.Context) (map[QueueKey]int64, error)
	// Replace lists put and unlists del in one fenced manifest delta, if
	// cond accepts the generations the manifest lists when the delta is
	// built (upload.Uploader.ReplaceIf); cond's refusal is returned.
	Replace(ctx context.Context, put, del []upload.Object, cond func(map[QueueKey]upload.Object) error) error
}

// Config is what a Compactor runs by.
type Config struct {
	// Interval between rounds (STRATAMQ_COMPACTION_INTERVAL).
	Interval time.Duration
	// MinOffsets: a queue is compacted again once this many offsets past
	// its point are uploaded (STRATAMQ_COMPACTION_MIN_MESSAGES).
	MinOffsets int64
	// TombstoneRetention: a record with an empty body removes its key from
	// the generation once it was stored longer ago than this
	// (STRATAMQ_COMPACTION_TOMBSTONE_RETENTION).
	TombstoneRetention time.Duration
	// Rate bounds the bytes a round reads per second (0: no bound;
	// STRATAMQ_COMPACTION_RATE).
	Rate int64
	// CPUShare bounds the compactor's share of one core, in (0, 1]: after
	// each batch it rests in proportion to the time it worked
	// (STRATAMQ_COMPACTION_CPU).
	CPUShare float64
	// DefaultRetention is STRATAMQ_RETENTION (keyless records of a topic
	// without its own retention.time; 0: kept).
	DefaultRetention time.Duration
	// SpoolDir holds a round's records while it builds a generation
	// (temporary files, removed when the round ends). "": in memory.
	SpoolDir string
	// MaxDelay is the longest a queue with fewer new offsets than its
	// generation keeps waits for its next round (default 1h;
	// STRATAMQ_COMPACTION_MAX_DELAY).
	MaxDelay time.Duration
	// Grace: a replaced generation is deleted from the bucket this long
	// after the manifest stops listing it (readers still on the old
	// listing: a slave between reloads).
	Grace time.Duration
	Now   func() time.Time
}

// Deps is what a Compactor calls.
type Deps struct {
	Store  Store
	Topics Topics
	Log    Log
	Reader *Reader
	Bucket tier.Bucket
	// Fence is asked before every bucket write (the lease); it returns the
	// lease epoch the object key carries.
	Fence    func() (int64, error)
	ValidFor func() time.Duration
	// ColdGets, if set, counts the bucket GETs of the cold reader: a round
	// counts those made while it ran as its own (op "get"; a consumer
	// reading cold meanwhile is counted with it).
	ColdGets func() int64
	Logger   *slog.Logger
	Metrics  *Metrics // nil: not counted
}

// Compactor builds generations of the compacted queues, one queue at a
// time, in its own goroutine (Run).
type Compactor struct {
	cfg    Config
	d      Deps
	doomed []doomed // unlisted generations, deleted after Grace (if still unlisted)
	swept  time.Time

	// dropMu serializes a round's listing with DropTopic: a generation of
	// a topic deleted during its round is never listed (drops counts each
	// topic's drops; a round lists only if the count did not move).
	dropMu sync.Mutex
	drops  map[string]int64

	lastRound map[QueueKey]time.Time // each queue's last listed generation (this process)
}

type doomed struct {
	key string
	at  time.Time
}

// New returns a Compactor; Run starts it.
func New(cfg Config, d Deps) *Compactor {
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.MinOffsets <= 0 {
		cfg.MinOffsets = 1
	}
	if cfg.CPUShare <= 0 || cfg.CPUShare > 1 {
		cfg.CPUShare = 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 5 * time.Minute
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = time.Hour
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return &Compactor{cfg: cfg, d: d, lastRound: map[QueueKey]time.Time{}}
}

// Run compacts every Interval until ctx ends.
func (c *Compactor) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		if err := c.Round(ctx); err != nil && ctx.Err() == nil {
			c.d.Logger.Warn("compaction round failed; the next round tries again", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round compacts each compacted queue with at least MinOffsets uploaded
// offsets past its point, and deletes replaced generations past their
// grace. It returns the first error (every queue is still tried).
func (c *Compactor) Round(ctx context.Context) error {
	topics := c.d.Topics.Compacted()
	if len(topics) == 0 && len(c.doomed) == 0 {
		return nil
	}
	var errs []error
	if now := c.cfg.Now(); now.Sub(c.swept) >= c.cfg.Grace {
		if err := c.sweep(ctx); err != nil {
			errs = append(errs, err)
		} else {
			c.swept = now
		}
	}
	if err := c.deleteDoomed(ctx); err != nil {
		errs = append(errs, err)
	}
	if len(topics) == 0 {
		return errors.Join(errs...)
	}
	ends, err := c.d.Log.UploadedEnds(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	points, err := c.d.Reader.Listed(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, t := range topics {
		for q := int32(0); q < t.Queues; q++ {
			k := QueueKey{t.Name, q}
			end, ok := ends[k]
			if !ok || end-points[k] < c.cfg.MinOffsets {
				continue
			}
			// A round rewrites the whole generation: wait until at least
			// as many new offsets as it keeps, so that each kept record is
			// rewritten a bounded number of times per new one (about twice),
			// but no longer than MaxDelay after the queue's last round.
			if g, err := c.d.Reader.generation(ctx, k); err == nil && g != nil && end-points[k] < int64(len(g.Entries)) &&
				c.cfg.Now().Sub(c.lastRound[k]) < c.cfg.MaxDelay {
				continue
			}
			if err := c.CompactQueue(ctx, t, q, end); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				errs = append(errs, fmt.Errorf("compact %s/%d: %w", t.Name, q, err))
			}
		}
	}
	return errors.Join(errs...)
}

// sweep (every Grace) dooms the generation objects the manifest does not
// list: a round a crash (or a failed manifest delta) cut between its PUT
// and its listing, a replaced one whose delete was lost, a deposed
// holder's late write. They are deleted Grace later, if still unlisted.
func (c *Compactor) sweep(ctx context.Context) error {
	gens, err := c.d.Log.FreshGenerations(ctx)
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, o := range gens {
		listed[o.Key] = true
	}
	for _, d := range c.doomed {
		listed[d.key] = true // doomed already
	}
	now := c.cfg.Now()
	err = c.d.Bucket.List(ctx, "compacted/", func(key string, _ int64) error {
		if !listed[key] && strings.HasSuffix(key, ".cmp") {
			c.doomed = append(c.doomed, doomed{key: key, at: now})
		}
		return nil
	})
	if err != nil && !errors.Is(err, tier.ErrNotExist) {
		return fmt.Errorf("compaction: list generations: %w", err)
	}
	return nil
}

// deleteDoomed deletes the doomed generations past their grace that the
// manifest, read from the bucket now, does not list: a key is never
// deleted while listed (a round retried under the same key, or a delta
// that landed although its commit reported an error, lists it again).
func (c *Compactor) deleteDoomed(ctx context.Context) error {
	now := c.cfg.Now()
	due := false
	for _, d := range c.doomed {
		due = due || now.Sub(d.at) >= c.cfg.Grace
	}
	if !due {
		return nil
	}
	gens, err := c.d.Log.FreshGenerations(ctx)
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, o := range gens {
		listed[o.Key] = true
	}
	kept := c.doomed[:0]
	for _, d := range c.doomed {
		switch {
		case listed[d.key]:
			continue // listed again: not garbage
		case now.Sub(d.at) < c.cfg.Grace:
			kept = append(kept, d)
			continue
		}
		if _, err := c.d.Fence(); err != nil {
			kept = append(kept, d)
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, min(c.d.ValidFor(), time.Minute))
		err := c.d.Bucket.Delete(dctx, d.key)
		cancel()
		c.d.Metrics.request("delete")
		if err != nil && !errors.Is(err, tier.ErrNotExist) {
			kept = append(kept, d)
		}
	}
	c.doomed = kept
	return nil
}

// DropTopic unlists topic's generations through unlist, serialized with
// the rounds' listings: a round of the topic running meanwhile lists
// nothing (the topic is being deleted).
func (c *Compactor) DropTopic(topic string, unlist func() error) error {
	c.dropMu.Lock()
	defer c.dropMu.Unlock()
	if c.drops == nil {
		c.drops = map[string]int64{}
	}
	c.drops[topic]++
	return unlist()
}

func (c *Compactor) dropCount(topic string) int64 {
	c.dropMu.Lock()
	defer c.dropMu.Unlock()
	return c.drops[topic]
}

// spool holds a round's new records back to back, in queue order (a
// record starts with its own length, TOTALSIZE).
type spool struct {
	f   *os.File
	w   *bufio.Writer
	mem []byte
}

func (c *Compactor) newSpool() (*spool, error) {
	if c.cfg.SpoolDir == "" {
		return &spool{}, nil
	}
	if err := os.MkdirAll(c.cfg.SpoolDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(c.cfg.SpoolDir, "compaction-*.tmp")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name()) // gone with the process, whatever happens
	return &spool{f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

func (s *spool) add(rec []byte) error {
	if s.f == nil {
		s.mem = append(s.mem, rec...)
		return nil
	}
	_, err := s.w.Write(rec)
	return err
}

// each calls fn with every record added, in order.
func (s *spool) each(fn func(rec []byte) error) error {
	var r io.Reader
	if s.f == nil {
		r = bytes.NewReader(s.mem)
	} else {
		if err := s.w.Flush(); err != nil {
			return err
		}
		if _, err := s.f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		r = bufio.NewReaderSize(s.f, 1<<20)
	}
	var head [4]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		n := int(binary.BigEndian.Uint32(head[:]))
		if n < store.RecordOverhead || n > 64<<20 {
			return fmt.Errorf("%w: spooled record of %d bytes", ErrCorrupt, n)
		}
		buf = append(buf[:0], head[:]...)
		buf = append(buf, make([]byte, n-4)...)
		if _, err := io.ReadFull(r, buf[4:]); err != nil {
			return err
		}
		if err := fn(buf); err != nil {
			return err
		}
	}
}

func (s *spool) close() {
	if s.f != nil {
		s.f.Close()
	}
}

// pace rests after a batch that read n bytes and took worked, so that the
// round stays within Rate and CPUShare.
func (c *Compactor) pace(ctx context.Context, n int, worked time.Duration) error {
	rest := time.Duration(0)
	if c.cfg.CPUShare < 1 {
		rest = time.Duration(float64(worked) * (1/c.cfg.CPUShare - 1))
	}
	if c.cfg.Rate > 0 {
		rest = max(rest, time.Duration(float64(n)/float64(c.cfg.Rate)*float64(time.Second))-worked)
	}
	if rest <= 0 {
		return nil
	}
	t := time.NewTimer(rest)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// keep decides whether a record stays in the generation: a keyed record
// if it is its key's latest (latestOK) and no tombstone past its
// retention; a keyless one while its topic's retention keeps it.
func (c *Compactor) keep(m meta, latestOK bool, t Topic, now time.Time) bool {
	stored := time.UnixMilli(m.storeTime)
	if m.keyed {
		if !latestOK {
			return false
		}
		return !m.tombstone || now.Sub(stored) < c.cfg.TombstoneRetention
	}
	ret := t.Retention
	if ret == 0 {
		ret = c.cfg.DefaultRetention
	}
	return ret <= 0 || now.Sub(stored) < ret
}

// CompactQueue builds the generation of topic/queue up to point (queue
// offsets below it are uploaded) from the current generation and the
// records past its point, uploads it, lists it in place of the current
// one and schedules the current one's delete.
func (c *Compactor) CompactQueue(ctx context.Context, t Topic, queueID int32, point int64) error {
	started := time.Now()
	if c.d.ColdGets != nil {
		g0 := c.d.ColdGets()
		defer func() { c.d.Metrics.gets(c.d.ColdGets() - g0) }()
	}
	k := QueueKey{t.Name, queueID}
	drops := c.dropCount(t.Name)
	prev, err := c.d.Reader.generation(ctx, k)
	if err != nil {
		return err
	}
	from := int64(0)
	if prev != nil {
		from = prev.Point
	}
	if point <= from {
		return nil
	}
	sp, err := c.newSpool()
	if err != nil {
		return err
	}
	defer sp.close()

	// Pass 1: the records past the current point, to the spool, and the
	// latest offset of each key among them.
	latest := map[string]int64{}
	off, read := from, int64(0)
	for off < point {
		t0 := time.Now()
		res, err := c.d.Store.Get(ctx, store.GetRequest{Topic: t.Name, QueueID: queueID, Offset: off, MaxMsgs: store.MaxGetMsgs, MaxBytes: 4 << 20})
		if err != nil {
			return err
		}
		n := 0
		switch res.Status {
		case store.Found:
			for _, rec := range res.Records {
				m, err := parse(rec)
				if err != nil {
					return err
				}
				if m.offset >= point {
					break
				}
				if err := sp.add(rec); err != nil {
					return err
				}
				if m.keyed {
					if _, seen := latest[m.key]; !seen {
						m.key = strings.Clone(m.key) // not the record's properties
					}
					latest[m.key] = m.offset
				}
				n += len(rec)
			}
		case store.OffsetFoundNull, store.NoMatchedMessage, store.MessageWasRemoving, store.OffsetTooSmall:
			// A hole, or records below the queue's min: nothing to keep.
		default:
			// The queue ends before the point (it cannot: the point is
			// uploaded); a generation must never claim offsets it did not read.
			return fmt.Errorf("compaction: %s/%d ends at %d (%v), below the uploaded point %d", t.Name, queueID, off, res.Status, point)
		}
		if res.NextBeginOffset <= off {
			return fmt.Errorf("compaction: %s/%d: no progress at %d (%v)", t.Name, queueID, off, res.Status)
		}
		off = res.NextBeginOffset
		read += int64(n)
		c.d.Metrics.readBytes(n)
		if err := c.pace(ctx, n, time.Since(t0)); err != nil {
			return err
		}
	}

	// Pass 2: the current generation's records that no newer one replaces,
	// then the spooled ones that are their key's latest, into the new
	// generation.
	now := c.cfg.Now()
	obj, err := newObjectSpool(c.cfg.SpoolDir)
	if err != nil {
		return err
	}
	defer obj.close()
	w, err := NewWriter(obj, point)
	if err != nil {
		return err
	}
	dropped := 0
	if prev != nil {
		for i := 0; i < len(prev.Entries); {
			t0 := time.Now()
			// A batch: up to 1024 records and 4 MiB (at least one record).
			j, size := i+1, int64(prev.Entries[i].Size)
			for j < len(prev.Entries) && j-i < 1024 && size+int64(prev.Entries[j].Size) <= 4<<20 {
				size += int64(prev.Entries[j].Size)
				j++
			}
			recs, err := c.d.Reader.readRecords(ctx, prev.Object, prev.Entries[i:j])
			if err != nil {
				return err
			}
			n := 0
			for _, rec := range recs {
				m, _ := parse(rec) // checked by readRecords
				_, newer := latest[m.key]
				if !c.keep(m, !newer, t, now) {
					dropped++
					continue
				}
				if err := w.Add(rec); err != nil {
					return err
				}
				n += len(rec)
			}
			c.d.Metrics.readBytes(n)
			i = j
			if err := c.pace(ctx, n, time.Since(t0)); err != nil {
				return err
			}
		}
	}
	err = sp.each(func(rec []byte) error {
		m, err := parse(rec)
		if err != nil {
			return err
		}
		if !c.keep(m, latest[m.key] == m.offset, t, now) {
			dropped++
			return nil
		}
		return w.Add(rec)
	})
	if err != nil {
		return err
	}
	footer, err := w.Close()
	if err != nil {
		return err
	}

	// Upload, list in place of the current one, then let the current go.
	epoch, err := c.d.Fence()
	if err != nil {
		return err
	}
	key := Key(t.Name, queueID, point, epoch)
	size := footer.ObjectSize()
	if err := c.put(ctx, key, obj, size); err != nil {
		return err
	}
	o := upload.Object{Key: key, Kind: Kind, Topic: t.Name, QueueID: int(queueID), Base: point, Length: footer.LogicalSize,
		Size: size, Frames: len(footer.Frames), Created: now.UTC()}
	var del []upload.Object
	if prev != nil {
		del = append(del, prev.Object)
	}
	// Listed only if the queue's listed generation is still the one this
	// round merged (none: none), and the topic was not deleted meanwhile.
	// A failed listing leaves the object unlisted: the sweep dooms it
	// (never this round: the delta may have landed although the commit
	// reported an error, and a later round may list the same key).
	cond := func(listed map[QueueKey]upload.Object) error {
		cur, ok := listed[k]
		if ok != (prev != nil) || ok && cur.Key != prev.Object.Key {
			return fmt.Errorf("compaction: %s/%d: the listed generation changed during the round", t.Name, queueID)
		}
		return nil
	}
	c.dropMu.Lock()
	err = nil
	if c.drops[t.Name] != drops || !c.stillCompacted(t.Name) {
		err = fmt.Errorf("compaction: %s/%d: the topic was deleted or changed during the round: nothing listed", t.Name, queueID)
	} else {
		err = c.d.Log.Replace(ctx, []upload.Object{o}, del, cond)
	}
	c.dropMu.Unlock()
	c.d.Metrics.request("manifest")
	if err != nil {
		return err
	}
	if prev != nil && prev.Object.Key != key {
		c.doomed = append(c.doomed, doomed{key: prev.Object.Key, at: now})
	}
	c.lastRound[k] = now
	c.d.Metrics.round(w.Len(), dropped, read, size, time.Since(started))
	c.d.Logger.Info("compacted", "topic", t.Name, "queue", queueID, "from", from, "point", point, "kept", w.Len(),
		"dropped", dropped, "read", read, "object", size, "took", time.Since(started).Round(time.Millisecond))
	return nil
}

// stillCompacted reports whether topic is still a compacted topic.
func (c *Compactor) stillCompacted(topic string) bool {
	for _, t := range c.d.Topics.Compacted() {
		if t.Name == topic {
			return true
		}
	}
	return false
}

// put uploads the generation under the fence, within the lease, retrying
// a few times.
func (c *Compactor) put(ctx context.Context, key string, obj *objectSpool, size int64) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if _, err = c.d.Fence(); err != nil {
			return err
		}
		r, rerr := obj.reader()
		if rerr != nil {
			return rerr
		}
		pctx, cancel := context.WithTimeout(ctx, c.d.ValidFor())
		err = c.d.Bucket.Put(pctx, key, r, size)
		cancel()
		c.d.Metrics.request("put")
		if err == nil || !tier.IsRetryable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(1<<attempt) * 100 * time.Millisecond):
		}
	}
	return err
}

// objectSpool holds an encoded generation until its PUT.
type objectSpool struct {
	f   *os.File
	mem []byte
}

func newObjectSpool(dir string) (*objectSpool, error) {
	if dir == "" {
		return &objectSpool{}, nil
	}
	f, err := os.CreateTemp(dir, "generation-*.tmp")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return &objectSpool{f: f}, nil
}

func (o *objectSpool) Write(p []byte) (int, error) {
	if o.f == nil {
		o.mem = append(o.mem, p...)
		return len(p), nil
	}
	return o.f.Write(p)
}

func (o *objectSpool) reader() (io.Reader, error) {
	if o.f == nil {
		return bytes.NewReader(o.mem), nil
	}
	fi, err := o.f.Stat()
	if err != nil {
		return nil, err
	}
	return io.NewSectionReader(o.f, 0, fi.Size()), nil
}

func (o *objectSpool) close() {
	if o.f != nil {
		o.f.Close()
	}
}
