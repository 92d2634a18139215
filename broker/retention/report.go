package retention

import (
	"context"

	"github.com/stratamq/stratamq/remoting"
)

// TopicStatus is one topic in STRATAMQ_TOPIC_RETENTION's answer.
type TopicStatus struct {
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

// Report is STRATAMQ_TOPIC_RETENTION's body.
type Report struct {
	DefaultRetentionMillis int64         `json:"defaultRetentionMillis"`
	BucketSegments         int           `json:"bucketSegments"`
	BucketBytes            int64         `json:"bucketBytes"`
	Topics                 []TopicStatus `json:"topics"`
}

// Report is each topic's retention, its oldest retained message and the
// bucket objects kept only because of it (Holds: one bucket read per
// object the retention cache cannot answer for). Without a bucket it lists
// the topics alone.
func (s *Service) Report(ctx context.Context) (*Report, error) {
	r := &Report{DefaultRetentionMillis: s.cfg.Default.Milliseconds()}
	var held map[string]Held
	if s.holds != nil {
		h, err := s.holds.BucketHolds(ctx)
		if err != nil {
			return nil, err
		}
		r.BucketSegments, r.BucketBytes, held = h.Segments, h.Bytes, h.Held
	}
	for _, tc := range s.topics.Configs() {
		d, override := s.Of(tc)
		ts := TopicStatus{Topic: tc.TopicName, Override: override, RetentionMillis: d.Milliseconds(), Retention: "default"}
		if override {
			ts.Retention = tc.Attributes[Attribute]
		}
		if d < 0 {
			ts.RetentionMillis = -1
		}
		ts.OldestRetained = s.OldestRetained(ctx, tc)
		h := held[tc.TopicName]
		ts.HeldSegments, ts.HeldBytes = h.Segments, h.Bytes
		r.Topics = append(r.Topics, ts)
	}
	return r, nil
}

// OldestRetained is the store time (unix ms) of the oldest message of the
// topic a consumer can still read, over its queues (one record read each,
// in the bucket for a queue whose oldest message is there); 0 for none.
func (s *Service) OldestRetained(ctx context.Context, tc remoting.TopicConfig) int64 {
	var oldest int64
	for q := range queueCount(tc) {
		if s.st.MinQueueOffset(tc.TopicName, q) >= s.st.MaxQueueOffset(tc.TopicName, q) {
			continue
		}
		if ts, err := s.st.EarliestStoreTimeContext(ctx, tc.TopicName, q); err == nil && ts > 0 && (oldest == 0 || ts < oldest) {
			oldest = ts
		}
	}
	return oldest
}
