package tiering

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

// Run owns the uploader and the housekeeping loop (seal by age, local and
// bucket retention, every second) until ctx ends; never on a read-only
// Tiering.
func (t *Tiering) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := t.uploader.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.log.Error("uploader stopped", "err", err)
		}
	})
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case now := <-tick.C:
			t.sealIfOld(now)
			if err := t.EnforceLocalRetention(); err != nil {
				t.log.Warn("local retention", "err", err)
			}
			if h := t.Hooks.Clock; h != nil {
				now = h(now)
			}
			if err := t.EnforceBucketRetention(ctx, now); err != nil && ctx.Err() == nil {
				t.log.Warn("bucket retention", "err", err)
			}
		}
	}
}

// moreSoon implements upload.Config.MoreSoon: whether the active segment
// is expected to seal within d, by age (SegmentMaxAge) or by size at the
// rate it grew since the last call (since it was created, on the first
// call for it). A producer that stops makes the rate 0, so finished
// uploads are listed at the next ask, not after the whole delay.
func (t *Tiering) moreSoon(d time.Duration) bool {
	var act *store.SegmentInfo
	for _, s := range t.st.LocalSegments() {
		if !s.Sealed {
			act = &s
		}
	}
	if act == nil || act.Created.IsZero() {
		return false
	}
	now := time.Now()
	if act.Length > 0 && now.Add(d).Sub(act.Created) >= t.cfg.SegmentMaxAge {
		return true
	}
	t.growMu.Lock()
	prev := t.grow
	t.grow = growth{base: act.Base, length: act.Length, at: now}
	t.growMu.Unlock()
	var rate float64 // bytes a second
	if el := now.Sub(prev.at); prev.base == act.Base && !prev.at.IsZero() && el > 0 {
		rate = float64(act.Length-prev.length) / el.Seconds()
	} else if el := now.Sub(act.Created); el > 0 {
		rate = float64(act.Length) / el.Seconds()
	}
	if rate <= 0 {
		return false
	}
	return float64(int64(t.cfg.SegmentSize)-act.Length)/rate <= d.Seconds()
}

// growth is the active segment's length when moreSoon last looked.
type growth struct {
	base, length int64
	at           time.Time
}

// sealIfOld seals a non-empty active segment older than SegmentMaxAge.
func (t *Tiering) sealIfOld(now time.Time) {
	for _, s := range t.st.LocalSegments() {
		if s.Sealed || s.Length == 0 || s.Created.IsZero() || now.Sub(s.Created) < t.cfg.SegmentMaxAge {
			continue
		}
		if err := t.st.SealActive(); err != nil {
			t.log.Warn("seal by age failed", "err", err)
			return
		}
		t.log.Debug("active segment sealed by age", "base", s.Base, "bytes", s.Length)
		t.uploader.Notify()
		return
	}
}

// EnforceBucketRetention deletes whole commitlog objects past retention:
// raise the store's floor, trim the manifest, drop any local copy, delete
// the objects. Without a per-topic override, objects uploaded longer ago
// than STRATAMQ_RETENTION go, oldest first; with one, queue minima move
// first by each topic's retention and an object goes once all of its
// records have expired, from the front of the log (the floor moves) or
// from its middle (retention.go: expireTopics, expiredSegments).
func (t *Tiering) EnforceBucketRetention(ctx context.Context, now time.Time) error {
	overrides := t.ret.HasOverride()
	if t.cfg.Retention <= 0 && !overrides {
		return nil
	}
	if _, err := t.owner.Fence(); err != nil {
		return nil // the prefix's new owner enforces retention
	}
	m := t.uploader.Manifest()
	if m == nil {
		return nil
	}
	floor := t.defaultRetentionFloor(ctx, m, now)
	var middle []int64
	if overrides {
		if err := t.ret.ExpireTopics(ctx, now, floor); err != nil {
			t.log.Warn("per-topic retention", "err", err) // deletion follows the minima as they are
		}
		var err error
		if floor, middle, err = t.expiredSegments(ctx, m); err != nil {
			return err
		}
	}
	var removed []upload.Object
	if floor >= 0 {
		// The manifest still lists the objects below floor (even when an
		// earlier pass raised the store's floor and then failed to trim).
		if floor > t.st.MinPhysOffset() {
			if err := t.st.SetMinPhysOffset(floor); err != nil {
				return err
			}
		}
		r, err := t.uploader.Trim(ctx, floor)
		if err != nil {
			return err
		}
		removed = r
	}
	if len(middle) > 0 {
		r, err := t.uploader.Expire(ctx, middle)
		if err != nil {
			return err
		}
		removed = append(removed, r...)
	}
	if len(removed) == 0 {
		return nil
	}
	if err := t.syncCold(); err != nil {
		return err
	}
	t.forgetBlocks(t.uploader.Manifest())
	var errs []error
	segs := t.st.SealedSegments()
	sort.Slice(segs, func(i, j int) bool { return segs[i].Base < segs[j].Base })
	for _, s := range segs {
		if s.Base+s.Length > floor {
			break
		}
		if err := t.st.DropSegment(s.Base); err != nil {
			errs = append(errs, err)
			break
		}
		t.mu.Lock()
		delete(t.mu.uploaded, s.Base)
		delete(t.mu.uploadedIdx, s.Base)
		delete(t.mu.uploadedKix, s.Base)
		t.mu.Unlock()
	}
	// Fenced like every other bucket write: a broker that lost the prefix
	// deletes nothing.
	if err := t.uploader.DeleteObjects(ctx, removed); err != nil {
		errs = append(errs, err)
	}
	t.log.Info("bucket retention", "floor", floor, "expiredFromTheMiddle", len(middle), "objectsDeleted", len(removed))
	return errors.Join(errs...)
}

// Drain seals the active segment and waits until every sealed segment is
// uploaded or ctx ends (graceful shutdown).
func (t *Tiering) Drain(ctx context.Context) error {
	if err := t.st.SealActive(); err != nil {
		return fmt.Errorf("seal active segment: %w", err)
	}
	t.uploader.Notify()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := t.owner.Fence(); errors.Is(err, offsets.ErrFenced) {
			return fmt.Errorf("not uploading: %w", err) // another broker owns the prefix
		}
		pending, _ := t.Sealed(ctx)
		if len(pending) == 0 {
			return nil
		}
		t.uploader.Flush()
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d sealed segment(s) not uploaded before the shutdown deadline; they stay on local disk and upload at the next start", len(pending))
		case <-tick.C:
		}
	}
}

// PendingRange is the part of the log not in the bucket: from the first
// local segment holding records that is not uploaded to the end of the log.
func (t *Tiering) PendingRange() (from, to int64) {
	end := t.st.MaxPhysOffset()
	r := struct{ From, To int64 }{From: end, To: end}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.st.LocalSegments() {
		if _, up := t.mu.uploaded[s.Base]; !up && s.Length > 0 && s.Base < r.From {
			r.From = s.Base
		}
	}
	return r.From, r.To
}

// Close stops the cold reader (its cache runs goroutines); after Run
// returned, or when it never ran.
func (t *Tiering) Close() error { return t.cold.Close() }
