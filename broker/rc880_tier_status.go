package broker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier/upload"
)

// TierStatus is STRATAMQ_TIER_STATUS's body (admin tierStatus): where the
// broker's log lives.
type TierStatus struct {
	Role string `json:"role"`
	// The log: [MinPhysOffset, MaxPhysOffset); the part from LocalFrom on
	// is on local disk, the rest in the bucket.
	MinPhysOffset int64 `json:"minPhysOffset"`
	MaxPhysOffset int64 `json:"maxPhysOffset"`
	LocalFrom     int64 `json:"localFrom"`
	FlushedTo     int64 `json:"flushedTo"`
	// Local segments (the active one included) and their bytes; of those,
	// the sealed ones not uploaded yet.
	LocalSegments int   `json:"localSegments"`
	LocalBytes    int64 `json:"localBytes"`
	Bucket        bool  `json:"bucket"`
	// The bucket's commitlog objects: count, log bytes, object bytes
	// (compressed, with the indexes stored in them, and index objects
	// of segments uploaded before that), and the upload of the oldest and
	// the newest.
	BucketSegments   int       `json:"bucketSegments"`
	BucketLogBytes   int64     `json:"bucketLogBytes"`
	BucketBytes      int64     `json:"bucketBytes"`
	OldestUploaded   time.Time `json:"oldestUploaded,omitzero"`
	NewestUploaded   time.Time `json:"newestUploaded,omitzero"`
	ExpiredRanges    int       `json:"expiredRanges"`
	PendingSegments  int64     `json:"pendingSegments"`
	UploadLagBytes   int64     `json:"uploadLagBytes"`
	UploadLagSeconds float64   `json:"uploadLagSeconds"`
	// OldestRetained is the store time (unix ms) of the oldest message a
	// consumer can still read, over every topic (0: none).
	OldestRetained int64 `json:"oldestRetained"`
}

// tierStatus handles STRATAMQ_TIER_STATUS (880006).
func (b *Broker) tierStatus(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	body, err := json.Marshal(b.TierStatus(ctx))
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}

// TierStatus reads where the broker's log lives now (admin tierStatus and
// the web console show it). A manifest that cannot be read leaves the
// bucket's figures zero.
func (b *Broker) TierStatus(ctx context.Context) TierStatus {
	st := TierStatus{Role: b.haRole(), MinPhysOffset: b.store.MinPhysOffset(), MaxPhysOffset: b.store.MaxPhysOffset(),
		LocalFrom: b.store.LocalMinPhysOffset(), FlushedTo: b.store.FlushedPhysOffset()}
	for _, s := range b.store.LocalSegments() {
		st.LocalSegments++
		st.LocalBytes += s.Length
	}
	if t := b.tier; t != nil {
		st.Bucket = true
		if m, err := t.IndexManifest(ctx); err == nil {
			for _, o := range m.CommitLog() {
				st.BucketSegments++
				st.BucketLogBytes += o.Length
				st.BucketBytes += o.Size
				if st.OldestUploaded.IsZero() || o.Created.Before(st.OldestUploaded) {
					st.OldestUploaded = o.Created
				}
				if o.Created.After(st.NewestUploaded) {
					st.NewestUploaded = o.Created
				}
			}
			// Indexes uploaded before sections are objects of their own;
			// since, they are inside the segment's (counted above).
			for _, k := range []upload.Kind{upload.KindQueueIndex, upload.KindKeyIndex} {
				for _, o := range m.Indexes(k) {
					if o.Off == 0 {
						st.BucketBytes += o.Size
					}
				}
			}
			st.ExpiredRanges = len(m.Expired)
		}
		if !t.ReadOnly() {
			us := t.Uploader().Stats()
			st.PendingSegments, st.UploadLagBytes, st.UploadLagSeconds = us.Pending, us.LagBytes, us.Lag.Seconds()
		}
	}
	for _, tc := range b.topicConfigs() {
		if ts := b.ret.OldestRetained(ctx, tc); ts > 0 && (st.OldestRetained == 0 || ts < st.OldestRetained) {
			st.OldestRetained = ts
		}
	}
	return st
}
