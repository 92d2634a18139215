package store

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
)

// ColdIndex lists and reads the segment index blobs kept in the tier.
//
// ReadIndex returns an error matching ErrNotFound when the blob is gone:
// retention deleted its segment (per-topic retention deletes segments from
// the middle of the log, once every record in them has expired). The cold
// index then forgets that segment and looks again without it.
type ColdIndex interface {
	Segments(ctx context.Context) ([]int64, error)             // bases of segments that have an index blob, ascending
	ReadIndex(ctx context.Context, base int64) ([]byte, error) // the blob BuildSegmentIndex produced for that segment
}

// ColdReadAhead is implemented by a ColdIndex whose commitlog reader
// (Options.Cold) fetches ahead on a hint (the tier's): the cold index
// tells it where a queue replaying from the tier continues in the next
// segment a while before the queue gets there (coldReadAheadBytes), so
// the queue's first read there finds its records fetched. Read-ahead
// within an object cannot know it: which of the next object's records
// are the queue's is in the queue index, not in the commitlog object.
type ColdReadAhead interface {
	// PrefetchLog is a hint that a reader will soon read the log at the
	// offset next returns (ok false: nowhere to go). It must not block:
	// next runs later, on a goroutine of the implementation's, or not at
	// all; it returns whether the hint was taken.
	PrefetchLog(next func(ctx context.Context) (off int64, ok bool, err error)) bool
}

// coldReadAheadBytes: a queue's read that leaves at most this many bytes
// of the queue's records in a segment hints its first record in the next
// one (ColdReadAhead): about the depth the reader's read-ahead keeps
// within the segment, so the next segment's frames are fetched while the
// last of this one's are read.
const coldReadAheadBytes = 8 << 20

// DefaultColdIndexCacheBytes bounds the cache of segment index directories
// and entry blocks.
const DefaultColdIndexCacheBytes = 32 << 20

// coldBlockEntries is the size, in entries, of a cached block of one
// queue's entries in one segment index.
const coldBlockEntries = 4096

// coldIdx serves the consumequeue entries below a queue's local
// consumequeue (its coldEnd: a restored queue's history, and the entries
// reclaim deleted locally after their segments were dropped) from segment
// index blobs. Which segment holds queue
// offset x of a queue is found by binary search over the segments: every
// directory carries each known queue's next offset at the end of its
// segment, which grows with the segment, so each probe reads one directory
// and a lookup costs O(log #segments) blob reads, cached.
type coldIdx struct {
	src      ColdIndex
	ra       ColdReadAhead // src, when it takes hints; else nil
	maxBytes int64

	hintMu sync.Mutex
	hinted map[coldKey]bool // the segments and queues hinted (block -2); cleared past maxHinted

	segMu sync.Mutex
	// limit: only segments below this base are listed: the local log's
	// start (every entry served cold points below it). It rises with
	// DropSegment; the list is taken again when it rose past listedAt.
	limit    int64
	listedAt int64   // the limit the list was taken at
	segs     []int64 // nil until listed
	listed   bool

	mu    sync.Mutex
	lru   list.List // of *coldItem, most recent first
	items map[coldKey]*list.Element
	bytes int64
}

type coldKey struct {
	base  int64
	topic string
	id    int32
	block int64 // -1: the directory
}

type coldItem struct {
	key   coldKey
	dir   *SegmentIndex
	block []byte
	size  int64
}

func newColdIdx(src ColdIndex, maxBytes int64) *coldIdx {
	ra, _ := src.(ColdReadAhead)
	return &coldIdx{src: src, ra: ra, maxBytes: maxBytes, items: map[coldKey]*list.Element{}, hinted: map[coldKey]bool{}}
}

func (c *coldIdx) get(k coldKey) *coldItem {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.items[k]; el != nil {
		c.lru.MoveToFront(el)
		return el.Value.(*coldItem)
	}
	return nil
}

func (c *coldIdx) put(it *coldItem) {
	if it.size > c.maxBytes/4 {
		return // too big to keep
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.items[it.key]; el != nil {
		c.lru.MoveToFront(el)
		return
	}
	c.items[it.key] = c.lru.PushFront(it)
	c.bytes += it.size
	for c.bytes > c.maxBytes {
		el := c.lru.Back()
		old := el.Value.(*coldItem)
		c.lru.Remove(el)
		delete(c.items, old.key)
		c.bytes -= old.size
	}
}

// segments returns the bases of the indexed segments that may hold entries
// at or above floor (a segment lies below floor when the next one starts at
// or below it), listing them once.
func (c *coldIdx) segments(ctx context.Context, floor int64) ([]int64, error) {
	c.segMu.Lock()
	defer c.segMu.Unlock()
	if !c.listed || c.listedAt < c.limit {
		bases, err := c.src.Segments(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: list segment indexes: %w", ErrColdRead, err)
		}
		bases = slices.Clone(bases)
		slices.Sort(bases)
		bases = slices.Compact(bases)
		i, _ := slices.BinarySearch(bases, c.limit)
		c.segs, c.listed, c.listedAt = bases[:i:i], true, c.limit
	}
	t := c.segs
	for len(t) > 1 && t[1] <= floor {
		t = t[1:]
	}
	c.segs = t
	return t, nil
}

// setLimit sets the base below which segments are listed. A lower limit
// trims the list; a higher one has it taken again at the next lookup (the
// segments dropped since were uploaded with their index first).
func (c *coldIdx) setLimit(limit int64) {
	c.segMu.Lock()
	defer c.segMu.Unlock()
	c.limit = limit
	if c.listed && limit <= c.listedAt {
		i, _ := slices.BinarySearch(c.segs, limit)
		c.segs, c.listedAt = c.segs[:i:i], limit
	}
}

// raiseLimit is setLimit for a limit that only rises (the local log's
// start after a drop).
func (c *coldIdx) raiseLimit(limit int64) {
	c.segMu.Lock()
	defer c.segMu.Unlock()
	c.limit = max(c.limit, limit)
}

// want names the queue offset a directory is read for: the block holding
// it is cached from the same blob read.
type want struct {
	topic string
	id    int32
	x     int64
}

// dir returns the directory of segment base, reading its blob on a miss.
func (c *coldIdx) dir(ctx context.Context, base int64, w *want) (*SegmentIndex, error) {
	if it := c.get(coldKey{base: base, block: -1}); it != nil {
		return it.dir, nil
	}
	x, err := c.read(ctx, base, w)
	if err != nil {
		return nil, err
	}
	return x, nil
}

// readBlob fetches the index blob of segment base and decodes its header
// and directory.
func (c *coldIdx) readBlob(ctx context.Context, base int64) ([]byte, *SegmentIndex, error) {
	b, err := c.src.ReadIndex(ctx, base)
	if err != nil {
		err = coldIndexErr(base, err)
		if errors.Is(err, ErrNotFound) {
			err = &goneError{base: base, err: err}
		}
		return nil, nil, err
	}
	x, err := DecodeSegmentIndexDirectory(b)
	if err != nil {
		return nil, nil, coldIndexErr(base, err)
	}
	return b, x, nil
}

// coldIndexErr is err, met reading the index blob of segment base: an
// ErrColdRead.
func coldIndexErr(base int64, err error) error {
	return fmt.Errorf("%w: segment index %d: %w", ErrColdRead, base, err)
}

// read fetches and verifies the blob of segment base, caches its directory
// and, for w, the block holding w.x when this segment holds it.
func (c *coldIdx) read(ctx context.Context, base int64, w *want) (*SegmentIndex, error) {
	b, x, err := c.readBlob(ctx, base)
	if err != nil {
		return nil, err
	}
	if x.Base != base {
		return nil, coldIndexErr(base, corruptf("blob is for segment %d", x.Base))
	}
	if want := int64(SegmentIndexHeaderSize) + x.dirLen + x.nEntries*cqEntrySize; int64(len(b)) != want {
		return nil, coldIndexErr(base, corruptf("%d bytes, want %d", len(b), want))
	}
	size := int64(64)
	for _, q := range x.Queues {
		size += int64(len(q.Topic)) + 48
	}
	c.put(&coldItem{key: coldKey{base: base, block: -1}, dir: x, size: size})
	if w != nil {
		if i, ok := x.Find(w.topic, w.id); ok {
			q := x.Queues[i]
			if w.x >= q.FirstOffset && w.x < q.End() {
				// The segment a reader wants (not a probe of the search).
				if _, err := c.cacheBlocks(b, x, q, (w.x-q.FirstOffset)/coldBlockEntries); err != nil {
					return nil, err
				}
			}
		}
	}
	return x, nil
}

// cacheBlocks verifies q's entries in blob b, caches them and returns
// block k, and with them, from the same read, the rest of the blob's
// entries: every queue's when the blob is at most an eighth of the cache.
// The queues of a topic replaying together each need their entries of the
// same segment: one blob read serves them all, instead of one read of the
// whole blob per queue and block.
func (c *coldIdx) cacheBlocks(b []byte, x *SegmentIndex, q SegmentIndexQueue, k int64) ([]byte, error) {
	blk, ok := c.cacheRun(b, x, q, k)
	if !ok {
		return nil, coldIndexErr(x.Base, corruptf("entries of %s/%d: CRC mismatch", q.Topic, q.QueueID))
	}
	if int64(len(b)) <= c.maxBytes/8 {
		for _, o := range x.Queues {
			if o != q {
				c.cacheRun(b, x, o, -1) // a bad run is reported when it is asked for
			}
		}
	}
	return blk, nil
}

// cacheRun verifies o's entries in blob b by their CRC and caches every
// block of them; it returns block k (nil for k < 0), and false when the
// entries are out of the blob or fail their CRC.
func (c *coldIdx) cacheRun(b []byte, x *SegmentIndex, o SegmentIndexQueue, k int64) ([]byte, bool) {
	if o.EntryPos < 0 || o.EntryPos+o.Count*cqEntrySize > int64(len(b)) {
		return nil, false
	}
	run := b[o.EntryPos : o.EntryPos+o.Count*cqEntrySize]
	if crc32.ChecksumIEEE(run) != o.crc {
		return nil, false
	}
	var want []byte
	for j := int64(0); j*coldBlockEntries < o.Count; j++ {
		lo, hi := j*coldBlockEntries, min((j+1)*coldBlockEntries, o.Count)
		part := slices.Clone(run[lo*cqEntrySize : hi*cqEntrySize])
		c.put(&coldItem{key: coldKey{base: x.Base, topic: o.Topic, id: o.QueueID, block: j}, block: part, size: int64(len(part)) + 64})
		if j == k {
			want = part
		}
	}
	return want, true
}

// block returns block k of queue q's entries in segment base.
func (c *coldIdx) block(ctx context.Context, base int64, q SegmentIndexQueue, k int64) ([]byte, error) {
	if it := c.get(coldKey{base: base, topic: q.Topic, id: q.QueueID, block: k}); it != nil {
		return it.block, nil
	}
	b, x, err := c.readBlob(ctx, base)
	if err != nil {
		return nil, err
	}
	i, ok := x.Find(q.Topic, q.QueueID)
	if !ok || x.Base != base || x.Queues[i] != q || q.EntryPos+q.Count*cqEntrySize > int64(len(b)) {
		return nil, coldIndexErr(base, corruptf("blob changed under the cache"))
	}
	return c.cacheBlocks(b, x, q, k)
}

// forget drops segment base from the list: its blob is gone (expired).
func (c *coldIdx) forget(base int64) {
	c.segMu.Lock()
	defer c.segMu.Unlock()
	if i, ok := slices.BinarySearch(c.segs, base); ok {
		c.segs = slices.Delete(slices.Clone(c.segs), i, i+1)
	}
}

// locate finds the segment holding queue offset x of topic/id: the first
// segment whose directory says the queue's next offset at its end is
// above x. ok is false when no indexed segment holds it. A segment whose
// blob is gone is forgotten and the search runs again: the queue's entries
// in it have expired, so the directories left still order every offset a
// reader may ask for.
//
// gap: x lies before the queue's first entry in that segment, and the
// segment listed before it does not end where it starts (or it is the
// first one listed and starts above floor): x may be the offset of a
// record in a segment the list lacks (uploaded, not listed yet: manifest
// deltas may list segment N+1 before N), so it is not available; the
// offsets before the queue's first entry there are not blanks. A lookup
// that finds a gap lists the segments again once (the list may have been
// taken before the missing segment was listed).
func (c *coldIdx) locate(ctx context.Context, floor int64, topic string, id int32, x int64) (base int64, q SegmentIndexQueue, ok, gap bool, err error) {
	relisted := false
	for {
		base, q, ok, gap, err = c.locateOnce(ctx, floor, topic, id, x)
		var gone *goneError
		switch {
		case errors.As(err, &gone):
			c.forget(gone.base)
		case err == nil && gap && !relisted:
			relisted = true
			c.relist()
		default:
			return base, q, ok, gap, err
		}
	}
}

// relist has the segments listed again at the next lookup.
func (c *coldIdx) relist() {
	c.segMu.Lock()
	defer c.segMu.Unlock()
	c.listed = false
}

// goneError: the blob of segment base is gone (ErrNotFound from ReadIndex).
type goneError struct {
	base int64
	err  error
}

func (e *goneError) Error() string { return e.err.Error() }
func (e *goneError) Unwrap() error { return e.err }

func (c *coldIdx) locateOnce(ctx context.Context, floor int64, topic string, id int32, x int64) (base int64, q SegmentIndexQueue, ok, gap bool, err error) {
	segs, err := c.segments(ctx, floor)
	if err != nil {
		return 0, q, false, false, err
	}
	w := &want{topic, id, x}
	lo, hi := 0, len(segs)
	for lo < hi {
		m := lo + (hi-lo)/2
		d, err := c.dir(ctx, segs[m], w)
		if err != nil {
			return 0, q, false, false, err
		}
		end := int64(0)
		if i, found := d.Find(topic, id); found {
			end = d.Queues[i].End()
		}
		if end > x {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == len(segs) {
		return 0, q, false, false, nil
	}
	d, err := c.dir(ctx, segs[lo], w)
	if err != nil {
		return 0, q, false, false, err
	}
	i, _ := d.Find(topic, id)
	q = d.Queues[i]
	if x >= q.FirstOffset {
		return segs[lo], q, true, false, nil
	}
	// Blanks only when the segment before this one is listed and ends
	// where this one starts: its directory then says the queue's next
	// offset at this segment's start, at or below x.
	if lo == 0 {
		return segs[lo], q, true, d.Base > floor, nil
	}
	p, err := c.dir(ctx, segs[lo-1], nil)
	if err != nil {
		return 0, q, false, false, err
	}
	return segs[lo], q, true, p.Base+p.Length != d.Base, nil
}

// entries copies up to n entries of topic/id from queue offset x into dst
// (all from one block of one segment: callers loop). Offsets in a gap
// before the segment's first entry come back blank when the segment
// before it is listed and adjacent. hole: no indexed segment holds x
// (next < 0), or x lies in a gap of the list (next: the queue's first
// offset after it).
func (c *coldIdx) entries(ctx context.Context, floor int64, topic string, id int32, dst []byte, x int64, n int) (got int, hole bool, next int64, err error) {
	return c.entriesOnly(ctx, floor, topic, id, dst, x, n, c.ra != nil)
}

// maxHinted bounds the hints remembered (coldIdx.hinted).
const maxHinted = 4096

// readAhead hints the queue's first record after segment base (at queue
// offset q.End()) to the reader (ColdReadAhead), once per segment and
// queue, when the read that ends at entry i of blk, the last block of q's
// entries there, leaves at most coldReadAheadBytes of them.
func (c *coldIdx) readAhead(floor int64, topic string, id int32, base int64, q SegmentIndexQueue, blk []byte, i int) {
	k := coldKey{base: base, topic: topic, id: id, block: -2}
	c.hintMu.Lock()
	done := c.hinted[k]
	c.hintMu.Unlock()
	if done {
		return // the common case: every later read of the queue here
	}
	rest := int64(0)
	for ; i < len(blk)/cqEntrySize; i++ {
		if rest += int64(binary.BigEndian.Uint32(blk[i*cqEntrySize+8:])); rest > coldReadAheadBytes {
			return // not yet
		}
	}
	c.hintMu.Lock()
	if c.hinted[k] {
		c.hintMu.Unlock()
		return
	}
	if len(c.hinted) >= maxHinted {
		clear(c.hinted)
	}
	c.hinted[k] = true
	c.hintMu.Unlock()
	x := q.End()
	ok := c.ra.PrefetchLog(func(ctx context.Context) (int64, bool, error) {
		var b [cqEntrySize]byte
		got, hole, _, err := c.entriesOnly(ctx, floor, topic, id, b[:], x, 1, false)
		if err != nil || hole || got == 0 {
			return 0, false, err
		}
		e := getEntry(b[:])
		if e.size <= 0 {
			return 0, false, nil // a blank
		}
		return e.phys, true, nil
	})
	if !ok {
		c.hintMu.Lock()
		delete(c.hinted, k) // dropped: a later read hints again
		c.hintMu.Unlock()
	}
}

// entriesOnly is entries; hint: a read near the end of the queue's
// entries in a segment hints the next one (readAhead).
func (c *coldIdx) entriesOnly(ctx context.Context, floor int64, topic string, id int32, dst []byte, x int64, n int, hint bool) (got int, hole bool, next int64, err error) {
	base, q, ok, gap, err := c.locate(ctx, floor, topic, id, x)
	if err != nil {
		return 0, false, 0, err
	}
	if !ok {
		return 0, true, -1, nil
	}
	if gap {
		return 0, true, q.FirstOffset, nil
	}
	if x < q.FirstOffset {
		got = int(min(int64(n), q.FirstOffset-x))
		clear(dst[:got*cqEntrySize])
		return got, false, 0, nil
	}
	rel := x - q.FirstOffset
	k := rel / coldBlockEntries
	blk, err := c.block(ctx, base, q, k)
	if err != nil {
		return 0, false, 0, err
	}
	from := rel - k*coldBlockEntries
	got = copy(dst[:n*cqEntrySize], blk[from*cqEntrySize:]) / cqEntrySize
	if hint && (k+1)*coldBlockEntries >= q.Count {
		c.readAhead(floor, topic, id, base, q, blk, int(from)+got)
	}
	return got, false, 0, nil
}
