package tiering

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/stratamq/stratamq/broker/compaction"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// defaultRetentionFloor is where the default rule puts the floor: the end
// of the oldest objects uploaded longer ago than STRATAMQ_RETENTION, not
// past the oldest undelivered scheduled message; -1 for none.
func (t *Tiering) defaultRetentionFloor(ctx context.Context, m *upload.Manifest, now time.Time) int64 {
	floor := int64(-1)
	if t.cfg.Retention <= 0 {
		return floor
	}
	pin := t.ret.PinnedFloor(ctx) // undelivered scheduled messages stay
	for _, o := range m.CommitLog() {
		if now.Sub(o.Created) < t.cfg.Retention || (pin >= 0 && o.End() > pin) {
			break
		}
		floor = o.End()
	}
	return floor
}

// queueSpan is one queue's records in a segment: offsets [first, end).
type queueSpan struct {
	topic      string
	queueID    int32
	first, end int64
}

// maxKeptSpans bounds what segmentBlocks keeps per segment: the first
// spans still unexpired. When they have all expired and the directory held
// more, it is read again.
const maxKeptSpans = 8

// blockReadsPerPass bounds the queue index directories one retention pass
// reads (one small ranged GET each, on a cold cache): a broker restored on
// a long history learns its segments over several passes, without a burst.
const blockReadsPerPass = 64

// segBlock is what keeps one commitlog segment: the spans of its queues
// whose min has not passed their records (at most maxKeptSpans; more says
// the directory held others not kept).
type segBlock struct {
	spans []queueSpan
	more  bool
}

// segmentBlocks caches, per commitlog segment of the manifest, the spans
// that still keep it. Minima only rise, so an expired span never comes
// back: the cache only shrinks until the segment is deleted (forget). A
// segment costs one directory read for its life, then O(kept spans) per
// pass.
type segmentBlocks struct {
	mu     sync.Mutex
	m      map[int64]*segBlock
	topics map[string]string // interned topic names
}

// live reports whether span s still keeps its records: its queue exists,
// its min is below the span's end and no compacted generation the
// manifest lists covers the span (points: the generations' points, read
// from the same manifest the caller deletes by).
func (t *Tiering) live(s queueSpan, points map[compaction.QueueKey]upload.Object) bool {
	st := t.st
	if st.MaxQueueOffset(s.topic, s.queueID) == 0 {
		return false // the topic was deleted
	}
	if g, ok := points[compaction.QueueKey{Topic: s.topic, QueueID: s.queueID}]; ok && s.end <= g.Base {
		return false // compacted: its generation holds what it keeps of the span
	}
	return st.MinQueueOffset(s.topic, s.queueID) < s.end
}

// generations returns the compacted generations of the current manifest
// (IndexObjects: the table the cold reads go by).
func (t *Tiering) generations(ctx context.Context) (map[compaction.QueueKey]upload.Object, error) {
	g, _, err := t.Generations(ctx)
	return g, err
}

// blockersOf returns the spans that keep the segment at base (all of them
// when all is set, else the cached ones: at most maxKeptSpans), reading
// its queue index directory when the cache does not answer and *reads > 0
// (which it decrements). known is false when it was not read. A segment
// whose queue index object cannot be read is kept (the error is returned).
func (t *Tiering) blockersOf(ctx context.Context, base int64, reads *int, all bool) (spans []queueSpan, known bool, err error) {
	points, err := t.generations(ctx)
	if err != nil {
		return nil, false, err
	}
	c := &t.blocks
	c.mu.Lock()
	b := c.m[base]
	if b != nil {
		kept := b.spans[:0]
		for _, s := range b.spans {
			if t.live(s, points) {
				kept = append(kept, s)
			}
		}
		b.spans = kept
		if len(kept) > 0 && !all || !b.more {
			out := slices.Clone(kept)
			c.mu.Unlock()
			return out, true, nil
		}
	}
	c.mu.Unlock()
	if *reads <= 0 {
		return nil, false, nil
	}
	*reads--
	x, err := t.readIndexDirectory(ctx, base)
	if err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.topics == nil {
		c.topics, c.m = map[string]string{}, map[int64]*segBlock{}
	}
	for _, q := range x.Queues {
		if q.Count == 0 {
			continue
		}
		topic, ok := c.topics[q.Topic]
		if !ok {
			topic = q.Topic
			c.topics[topic] = topic
		}
		if s := (queueSpan{topic: topic, queueID: q.QueueID, first: q.FirstOffset, end: q.FirstOffset + q.Count}); t.live(s, points) {
			spans = append(spans, s)
		}
	}
	nb := &segBlock{spans: slices.Clone(spans[:min(len(spans), maxKeptSpans)]), more: len(spans) > maxKeptSpans}
	c.m[base] = nb
	if !all {
		spans = slices.Clone(nb.spans)
	}
	return spans, true, nil
}

// forgetBlocks drops the cached spans of segments the manifest no longer
// lists (deleted).
func (t *Tiering) forgetBlocks(m *upload.Manifest) {
	listed := map[int64]bool{}
	for _, o := range m.CommitLog() {
		listed[o.Base] = true
	}
	t.blocks.mu.Lock()
	defer t.blocks.mu.Unlock()
	for base := range t.blocks.m {
		if !listed[base] {
			delete(t.blocks.m, base)
		}
	}
}

// readIndexDirectory reads the header and directory of the segment's
// queue index object (the frames that hold them, usually the first), never
// its entries.
func (t *Tiering) readIndexDirectory(ctx context.Context, base int64) (*store.SegmentIndex, error) {
	head, err := t.queueIndexAt(ctx, base, 0, store.SegmentIndexHeaderSize)
	if err != nil {
		return nil, err
	}
	if len(head) < store.SegmentIndexHeaderSize {
		return store.DecodeSegmentIndexDirectory(head) // reports it
	}
	dir, err := t.queueIndexAt(ctx, base, store.SegmentIndexHeaderSize, int64(binary.BigEndian.Uint32(head[28:])))
	if err != nil {
		return nil, err
	}
	return store.DecodeSegmentIndexDirectory(append(head, dir...))
}

// expiredSegments is THE deletion decision of per-topic retention. A
// commitlog segment (with everything stored with it: its queue and key
// index objects, its local files) may go once every record in it has
// expired under its own topic's retention, that is, once every queue with
// a record in it has its min past them. It returns
//
//   - floor: the end of the longest prefix of the manifest's commitlog
//     objects that have expired, not past the schedule pin (-1: none); the
//     store's floor moves there;
//   - middle: the bases of expired objects after that prefix, which go
//     from the middle of the log (Uploader.Expire records the gap), except
//     the newest object (it records how far the log was uploaded) and any
//     segment still on local disk (the local log stays one run; local
//     retention drops it first, oldest first).
//
// A segment whose queue index object cannot be read is kept.
func (t *Tiering) expiredSegments(ctx context.Context, m *upload.Manifest) (floor int64, middle []int64, err error) {
	floor = -1
	pin := t.ret.PinnedFloor(ctx)
	local := map[int64]bool{}
	for _, s := range t.st.LocalSegments() {
		local[s.Base] = true
	}
	reads := blockReadsPerPass
	cl := m.CommitLog()
	prefix := true
	for i, o := range cl {
		if prefix && pin >= 0 && o.End() > pin {
			prefix = false
		}
		spans, known, err := t.blockersOf(ctx, o.Base, &reads, false)
		if errors.Is(err, tier.ErrNotExist) {
			prefix = false // no queue index object: kept
			continue
		}
		if err != nil {
			return floor, middle, err
		}
		expired := known && len(spans) == 0
		switch {
		case expired && prefix:
			floor = o.End()
		case expired && !local[o.Base] && i < len(cl)-1:
			prefix = false
			middle = append(middle, o.Base)
		default:
			prefix = false
		}
	}
	return floor, middle, nil
}

// Holds is what the bucket's commitlog objects hold, for the per-topic
// retention report: every object listed, and per topic the objects kept
// only because of it (its records are the only unexpired ones there).
type Holds struct {
	Segments int
	Bytes    int64
	// Held: topic → objects and their log bytes kept only for it.
	Held map[string]Held
}

// Held is the objects one topic alone keeps in the bucket.
type Held struct {
	Segments int
	Bytes    int64
}

// BucketHolds reads the directory of every commitlog object's queue index
// that the retention cache cannot answer for (one bucket read each).
func (t *Tiering) BucketHolds(ctx context.Context) (Holds, error) {
	h := Holds{Held: map[string]Held{}}
	m, err := t.IndexManifest(ctx)
	if err != nil {
		return h, err
	}
	for _, o := range m.CommitLog() {
		h.Segments++
		h.Bytes += o.Length
		reads := 1
		spans, known, err := t.blockersOf(ctx, o.Base, &reads, true)
		if err != nil || !known || len(spans) == 0 {
			continue
		}
		one := true
		for _, s := range spans {
			one = one && s.topic == spans[0].topic
		}
		if one {
			c := h.Held[spans[0].topic]
			h.Held[spans[0].topic] = Held{Segments: c.Segments + 1, Bytes: c.Bytes + o.Length}
		}
	}
	return h, nil
}
