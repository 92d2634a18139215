package broker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stratamq/stratamq/broker/tiering"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
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

// expireTopics raises queue minima by each topic's retention (see above);
// defFloor is where the default rule puts the floor (Tiering: the end of
// the objects uploaded longer ago than STRATAMQ_RETENTION; -1: none).
func (b *Broker) expireTopics(ctx context.Context, now time.Time, defFloor int64) error {
	st := b.store
	var raise []store.QueueMin
	var errs []error
	for _, tc := range b.topicConfigs() {
		d, override := b.topicRetention(tc)
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
	raise = append(raise, b.expireInternal()...)
	if len(raise) > 0 {
		if err := st.RaiseQueueMins(raise); err != nil {
			errs = append(errs, err)
		} else {
			b.log.Debug("per-topic retention raised queue minima", "queues", len(raise))
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
func (b *Broker) expireInternal() []store.QueueMin {
	var out []store.QueueMin
	for k, v := range b.savedProgress() { // wire_durability.go
		if v > b.store.MinQueueOffset(k.topic, k.queue) {
			out = append(out, store.QueueMin{Topic: k.topic, QueueID: k.queue, Min: v})
		}
	}
	return out
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
// each: Tiering.BucketHolds): HeldBytes counts the objects whose every unexpired record is of
// one topic.
func (b *Broker) topicRetentionReport(ctx context.Context) (*TopicRetentionReport, error) {
	r := &TopicRetentionReport{DefaultRetentionMillis: b.cfg.Retention.Milliseconds()}
	var held map[string]tiering.Held
	if t := b.tier; t != nil {
		h, err := t.BucketHolds(ctx)
		if err != nil {
			return nil, err
		}
		r.BucketSegments, r.BucketBytes, held = h.Segments, h.Bytes, h.Held
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
		s.HeldSegments, s.HeldBytes = h.Segments, h.Bytes
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
