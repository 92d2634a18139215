package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// Per-topic retention (issue 11 item 7).
//
// A topic's attribute retention.time (RocketMQ 5 topic attributes: the
// UPDATE_AND_CREATE_TOPIC header's "attributes", "+retention.time=1m",
// "-retention.time" to remove) overrides STRATAMQ_RETENTION for it, shorter
// or longer: a Go duration ("90s", "720h"), a number of milliseconds, "0"
// (the broker default) or "-1"/"forever".
//
// Expiry is logical: every second the tiering loop raises each queue's min
// (store.RaiseQueueMins, durable; the checkpoint's per-queue Min carries it
// to a restore) past the messages it no longer keeps:
//
//   - a topic with an override past its messages stored longer ago than it;
//   - a topic on the default (while some topic has an override) past the
//     records of the objects the default rule would have deleted
//     (uploaded longer ago than STRATAMQ_RETENTION, up to the schedule pin):
//     the same min the floor gives it without overrides.
//
// Consumers behind a min get PULL_OFFSET_MOVED with it. A commitlog object
// (segment) is deleted from the bucket, and locally, only once every queue
// with a record in it has its min past them (expiredSegments, from the
// directory of the segment's queue index object): a segment holding a
// record of a long-retention topic stays, every other topic's records there
// hidden below their mins. The segments after it go as soon as they have
// expired, from the middle of the log: the manifest records the gap
// (Manifest.Expired), nobody reads there (every queue's min is past it),
// and the store's cold index skips it. Without any override the default
// rule alone applies, as before.

// RetentionAttribute is the topic attribute that overrides
// STRATAMQ_RETENTION for one topic.
const RetentionAttribute = "retention.time"

// RetentionForever is a retention that never expires.
const RetentionForever time.Duration = -1

// ParseRetention parses a retention.time value: "" or "0" (the broker
// default: 0), "-1"/"forever" (RetentionForever), a number of
// milliseconds, or a Go duration with an optional "d" (days) suffix.
func ParseRetention(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	switch strings.ToLower(v) {
	case "", "0":
		return 0, nil
	case "-1", "forever", "infinite":
		return RetentionForever, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("%s=%q: a negative retention other than -1 (forever)", RetentionAttribute, v)
		}
		return time.Duration(n) * time.Millisecond, nil
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(v, "d"); ok {
		var n float64
		if n, err = strconv.ParseFloat(days, 64); err == nil {
			d = time.Duration(n * float64(24*time.Hour))
		}
	} else {
		d, err = time.ParseDuration(v)
	}
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration (90s, 720h, 30d), milliseconds, 0 (the broker default) or -1 (forever)", RetentionAttribute, v)
	}
	return d, nil
}

// applyAttributes applies RocketMQ 5's attribute modifications ("+k=v,-k2")
// to cur (not changed) and returns the new map; a retention.time value is
// checked.
func applyAttributes(cur map[string]string, mods string) (map[string]string, error) {
	out := make(map[string]string, len(cur))
	for k, v := range cur {
		out[k] = v
	}
	for _, m := range strings.Split(mods, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		switch m[0] {
		case '+':
			k, v, ok := strings.Cut(m[1:], "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("attribute %q: want +key=value", m)
			}
			if k == RetentionAttribute {
				if _, err := ParseRetention(v); err != nil {
					return nil, err
				}
			}
			out[k] = v
		case '-':
			if strings.Contains(m, "=") || len(m) == 1 {
				return nil, fmt.Errorf("attribute %q: want -key", m)
			}
			delete(out, m[1:])
		default:
			return nil, fmt.Errorf("attribute %q: want +key=value or -key", m)
		}
	}
	return out, nil
}

// topicRetention is topic's retention: its override (override true; may be
// RetentionForever), else STRATAMQ_RETENTION (0: unlimited). System topics
// never take an override.
func (b *Broker) topicRetention(tc remoting.TopicConfig) (d time.Duration, override bool) {
	if v, ok := tc.Attributes[RetentionAttribute]; ok && !remoting.IsSystemTopic(tc.TopicName) {
		if d, err := ParseRetention(v); err == nil && d != 0 {
			return d, true
		}
	}
	return b.cfg.Retention, false
}

// topicConfigs is every topic, sorted by name.
func (b *Broker) topicConfigs() []remoting.TopicConfig {
	w := b.topics.Wrapper()
	out := make([]remoting.TopicConfig, 0, len(w.TopicConfigTable))
	for _, tc := range w.TopicConfigTable {
		out = append(out, tc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TopicName < out[j].TopicName })
	return out
}

// hasRetentionOverride reports whether some topic overrides the retention.
func (b *Broker) hasRetentionOverride() bool {
	for _, tc := range b.topicConfigs() {
		if _, ok := b.topicRetention(tc); ok {
			return true
		}
	}
	return false
}

// defaultRetentionFloor is where the default rule puts the floor: the end
// of the oldest objects uploaded longer ago than STRATAMQ_RETENTION, not
// past the oldest undelivered scheduled message; -1 for none.
func (t *tiering) defaultRetentionFloor(ctx context.Context, m *upload.Manifest, now time.Time) int64 {
	floor := int64(-1)
	if t.b.cfg.Retention <= 0 {
		return floor
	}
	pin := t.b.sched.PinnedFloor(ctx) // undelivered scheduled messages stay
	for _, o := range m.CommitLog() {
		if now.Sub(o.Created) < t.b.cfg.Retention || (pin >= 0 && o.End() > pin) {
			break
		}
		floor = o.End()
	}
	return floor
}

// expireTopics raises queue minima by each topic's retention (see above);
// defFloor is defaultRetentionFloor's answer.
func (t *tiering) expireTopics(ctx context.Context, now time.Time, defFloor int64) error {
	st := t.b.store
	var raise []store.QueueMin
	var errs []error
	for _, tc := range t.b.topicConfigs() {
		d, override := t.b.topicRetention(tc)
		if override && d < 0 || !override && defFloor <= st.MinPhysOffset() {
			continue
		}
		cutoff := now.Add(-d).UnixMilli()
		for q := range queueCount(tc) {
			mn, mx := st.MinQueueOffset(tc.TopicName, q), st.MaxQueueOffset(tc.TopicName, q)
			if mn >= mx {
				continue
			}
			var to int64
			var err error
			if override {
				if ts, err := st.EarliestStoreTimeContext(ctx, tc.TopicName, q); err == nil && ts >= cutoff {
					continue // the oldest is kept: nothing to do (one record read)
				}
				to, err = st.QueueOffsetAtTime(ctx, tc.TopicName, q, cutoff)
			} else {
				to, err = st.QueueOffsetAtPhys(ctx, tc.TopicName, q, defFloor)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("expire %s/%d: %w", tc.TopicName, q, err))
				continue
			}
			if to > mn {
				raise = append(raise, store.QueueMin{Topic: tc.TopicName, QueueID: q, Min: to})
			}
		}
	}
	raise = append(raise, t.expireInternal()...)
	if len(raise) > 0 {
		if err := st.RaiseQueueMins(raise); err != nil {
			errs = append(errs, err)
		} else {
			t.b.log.Debug("per-topic retention raised queue minima", "queues", len(raise))
		}
	}
	return errors.Join(errs...)
}

// expireInternal returns the minima of the internal queues the broker
// consumes itself (the schedule and timer queues, the transaction half and
// op queues) raised to their progress in the last checkpoint written: a
// record below it is delivered or resolved, never read again, and a
// restore resumes from there at the earliest. Without it a segment holding
// one delivered delayed message or resolved half stayed in the bucket for
// ever (system topics keep the default retention, unlimited unless
// STRATAMQ_RETENTION is set). A slave (no checkpoint written) raises none.
func (t *tiering) expireInternal() []store.QueueMin {
	var out []store.QueueMin
	for k, v := range t.b.savedProgress() { // wire_durability.go
		if v > t.b.store.MinQueueOffset(k.topic, k.queue) {
			out = append(out, store.QueueMin{Topic: k.topic, QueueID: k.queue, Min: v})
		}
	}
	return out
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

// live reports whether span s still keeps its records: its queue exists
// and its min is below the span's end.
func (t *tiering) live(s queueSpan) bool {
	st := t.b.store
	if st.MaxQueueOffset(s.topic, s.queueID) == 0 {
		return false // the topic was deleted
	}
	return st.MinQueueOffset(s.topic, s.queueID) < s.end
}

// blockersOf returns the spans that keep the segment at base (all of them
// when all is set, else the cached ones: at most maxKeptSpans), reading
// its queue index directory when the cache does not answer and *reads > 0
// (which it decrements). known is false when it was not read. A segment
// whose queue index object cannot be read is kept (the error is returned).
func (t *tiering) blockersOf(ctx context.Context, base int64, reads *int, all bool) (spans []queueSpan, known bool, err error) {
	c := &t.blocks
	c.mu.Lock()
	b := c.m[base]
	if b != nil {
		kept := b.spans[:0]
		for _, s := range b.spans {
			if t.live(s) {
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
		if s := (queueSpan{topic: topic, queueID: q.QueueID, first: q.FirstOffset, end: q.FirstOffset + q.Count}); t.live(s) {
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
func (t *tiering) forgetBlocks(m *upload.Manifest) {
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
func (t *tiering) readIndexDirectory(ctx context.Context, base int64) (*store.SegmentIndex, error) {
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
func (t *tiering) expiredSegments(ctx context.Context, m *upload.Manifest) (floor int64, middle []int64, err error) {
	floor = -1
	pin := t.b.sched.PinnedFloor(ctx)
	local := map[int64]bool{}
	for _, s := range t.b.store.LocalSegments() {
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

// TopicRetentionStatus is one topic in STRATAMQ_TOPIC_RETENTION's answer.
type TopicRetentionStatus struct {
	Topic string `json:"topic"`
	// Retention: "default" (STRATAMQ_RETENTION), or the override.
	Retention string `json:"retention"`
	Override  bool   `json:"override"`
	// RetentionMillis: -1 forever, 0 unlimited (the default without
	// STRATAMQ_RETENTION).
	RetentionMillis int64 `json:"retentionMillis"`
	// OldestRetained is the store time (unix ms) of its oldest retained
	// message (0: none).
	OldestRetained int64 `json:"oldestRetained"`
	// HeldSegments and HeldBytes: bucket commitlog objects kept only
	// because of this topic (its records are the only unexpired ones).
	HeldSegments int   `json:"heldSegments"`
	HeldBytes    int64 `json:"heldBytes"`
}

// TopicRetentionReport is STRATAMQ_TOPIC_RETENTION's body.
type TopicRetentionReport struct {
	DefaultRetentionMillis int64                  `json:"defaultRetentionMillis"`
	BucketSegments         int                    `json:"bucketSegments"`
	BucketBytes            int64                  `json:"bucketBytes"`
	Topics                 []TopicRetentionStatus `json:"topics"`
}

// topicRetentionReport reads the directory of every commitlog object's
// queue index that the retention cache cannot answer for (one bucket read
// each): HeldBytes counts the objects whose every unexpired record is of
// one topic.
func (b *Broker) topicRetentionReport(ctx context.Context) (*TopicRetentionReport, error) {
	r := &TopicRetentionReport{DefaultRetentionMillis: b.cfg.Retention.Milliseconds()}
	held := map[string][2]int64{}
	if t := b.tier; t != nil {
		m, err := t.indexManifest(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range m.CommitLog() {
			r.BucketSegments++
			r.BucketBytes += o.Length
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
				h := held[spans[0].topic]
				held[spans[0].topic] = [2]int64{h[0] + 1, h[1] + o.Length}
			}
		}
	}
	for _, tc := range b.topicConfigs() {
		d, override := b.topicRetention(tc)
		s := TopicRetentionStatus{Topic: tc.TopicName, Override: override, RetentionMillis: d.Milliseconds(), Retention: "default"}
		if override {
			s.Retention = tc.Attributes[RetentionAttribute]
		}
		if d < 0 {
			s.RetentionMillis = -1
		}
		s.OldestRetained = b.oldestRetained(ctx, tc)
		h := held[tc.TopicName]
		s.HeldSegments, s.HeldBytes = int(h[0]), h[1]
		r.Topics = append(r.Topics, s)
	}
	return r, nil
}

// oldestRetained is the store time (unix ms) of the oldest message of the
// topic a consumer can still read, over its queues (one record read each,
// in the bucket for a queue whose oldest message is there); 0 for none.
func (b *Broker) oldestRetained(ctx context.Context, tc remoting.TopicConfig) int64 {
	var oldest int64
	for q := range queueCount(tc) {
		if b.store.MinQueueOffset(tc.TopicName, q) >= b.store.MaxQueueOffset(tc.TopicName, q) {
			continue
		}
		if ts, err := b.store.EarliestStoreTimeContext(ctx, tc.TopicName, q); err == nil && ts > 0 && (oldest == 0 || ts < oldest) {
			oldest = ts
		}
	}
	return oldest
}
