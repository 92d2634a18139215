package tiering

import (
	"context"
	"log/slog"

	"github.com/stratamq/stratamq/tier/upload"
)

// NewSeedSource is the upload source of a Tiering (Open with its queue
// layout, queue index and key index) over st, for benchmarks that seed a
// bucket with a long history through their own uploader: no cold reader,
// no manifest read, no metrics. Its Sealed does not format names per
// segment and scan (the uploader scans whenever a worker is free), and
// MarkUploaded does not update a cold reader per segment (O(history) each,
// which made seeding through a broker take hours): a segment and its
// indexes (inside its object: upload.Config.Sections), once listed, are
// dropped from st by local retention, oldest first.
func NewSeedSource(cfg Config, st Store, log *slog.Logger) upload.SegmentSource {
	t := &Tiering{cfg: cfg, st: st, log: log, idxSem: make(chan struct{}, 1)}
	t.mu.uploaded = map[int64]upload.Object{}
	t.mu.uploadedIdx = map[int64]bool{}
	t.mu.uploadedKix = map[int64]bool{}
	return seedSource{t}
}

type seedSource struct{ *Tiering }

func (s seedSource) Sealed(context.Context) ([]upload.Segment, error) {
	segs := s.st.SealedSegments()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]upload.Segment, 0, len(segs))
	for _, sg := range segs {
		if _, ok := s.mu.uploaded[sg.Base]; !ok {
			out = append(out, upload.Segment{Kind: upload.KindCommitLog, Name: sg.Path, Base: sg.Base, Length: sg.Length, SealedAt: sg.Created})
		}
	}
	return out, nil
}

func (s seedSource) MarkUploaded(_ context.Context, seg upload.Segment, obj upload.Object) error {
	s.mu.Lock()
	s.mu.uploaded[seg.Base] = obj
	s.mu.uploadedIdx[seg.Base], s.mu.uploadedKix[seg.Base] = true, true
	s.mu.Unlock()
	return s.EnforceLocalRetention()
}
