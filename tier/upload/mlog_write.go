package upload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// commit writes the delta build returns for the current manifest at the
// next sequence number (a conditional create: of two writers at most one
// wins it), then applies it, and writes a snapshot every
// Config.SnapshotEvery deltas. On a lost race it rereads the manifest and
// builds again. While Config.Fence refuses (or returns an epoch older than
// one the manifest holds) it waits if waitFence is set, else returns the
// refusal. An empty delta is not written, unless it claims the manifest
// (delta.claim) for a newer epoch than it holds.
func (u *Uploader) commit(ctx context.Context, waitFence bool, build func(cur *Manifest) *delta) error {
	u.writeMu.Lock()
	defer u.writeMu.Unlock()
	for attempt := 0; ; attempt++ {
		epoch, err := u.fence() // refuses an epoch older than the manifest's
		st := u.state()
		if err != nil {
			if !waitFence {
				return fmt.Errorf("upload: manifest write: %w", err)
			}
			if err := u.sleep(ctx, attempt); err != nil {
				return err
			}
			continue
		}
		if st.legacy {
			if err := u.migrate(ctx, epoch); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				u.stats.errors.Add(1)
				u.log.Warn("manifest migration failed", "attempt", attempt+1, "err", err)
				if err := u.sleep(ctx, attempt); err != nil {
					return err
				}
			}
			continue
		}
		d := build(st.m)
		if d.empty() && !(d.claim && epoch > st.m.Epoch) {
			return nil
		}
		d.Seq, d.Epoch, d.Updated = st.m.Version+1, epoch, u.cfg.Now().UTC()
		buf := encodeDelta(u.lay, d)
		key := u.lay.deltaKey(d.Seq)
		actx, cancel := u.bound(ctx, u.cfg.AttemptTimeout)
		_, err = u.cfg.Bucket.PutIf(actx, key, bytes.NewReader(buf), int64(len(buf)), tier.IfAbsent())
		cancel()
		if err == nil {
			err = u.checkSlot(ctx, d.Seq)
		}
		if err == nil {
			next := st.apply(d)
			u.setState(next)
			u.stats.manifests.Add(1)
			if next.m.Version-max(next.snapSeq, 0) >= int64(u.cfg.SnapshotEvery) {
				if err := u.snapshot(ctx, epoch); err != nil && ctx.Err() == nil {
					u.stats.errors.Add(1)
					u.log.Warn("manifest snapshot failed; the deltas stay and the next commit tries again", "err", err)
				}
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		u.stats.errors.Add(1)
		if errors.Is(err, tier.ErrPreconditionFailed) || errors.Is(err, errSlotCollected) {
			// Someone else wrote this sequence number, or our own earlier
			// attempt did without us hearing, or the number was taken and
			// collected long ago: reread and build again.
			u.log.Info("manifest changed underneath; merging", "key", key)
			st, err := readState(ctx, u.cfg.Bucket, u.lay)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				u.log.Warn("reread manifest failed", "err", err)
				if err := u.sleep(ctx, attempt); err != nil {
					return err
				}
				continue
			}
			u.setState(st)
			continue
		}
		u.log.Warn("manifest write failed", "key", key, "attempt", attempt+1, "err", err)
		if err := u.sleep(ctx, attempt); err != nil {
			return err
		}
	}
}

// Claim writes an empty manifest delta under the epoch Config.Fence
// returns, if the manifest holds an older one, and returns once the
// manifest holds that epoch (or ctx ends; while the fence refuses it
// waits). From then on every reader ignores a delta of an older epoch,
// so a deposed holder's commit that lands late (sent before its lease
// ran out, applied by the server after) changes nothing; one that landed
// before the claim is part of the log this Uploader continues. Run claims
// before its first scan; a broker that took over claims before it decides
// where its log continues (ClaimManifest) and before it acknowledges
// anything. Without Fence it does nothing.
func (u *Uploader) Claim(ctx context.Context) error {
	if u.cfg.Fence == nil {
		return nil
	}
	select {
	case <-u.loaded:
	case <-ctx.Done():
		return ctx.Err()
	}
	for attempt := 0; ; attempt++ {
		// Not waiting inside commit: it would hold writeMu, and Trim
		// returns the fence's refusal rather than wait for it.
		err := u.commit(ctx, false, func(*Manifest) *delta { return &delta{claim: true} })
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			// Canceled while refused: the refusal raced the cancel, and
			// the caller asked to stop.
			return ctx.Err()
		}
		if err := u.sleep(ctx, attempt); err != nil {
			return err
		}
	}
}

// ClaimManifest is Uploader.Claim for a broker that is about to read the
// manifest under key (ManifestKey of the prefix) to decide where its log
// continues, before its Uploader runs: it writes an empty delta under
// epoch if the manifest holds an older one (retrying a lost race until
// ctx ends) and returns the manifest as of that delta, which later
// deltas of older epochs cannot change. A manifest holding a newer epoch
// is an error matching errStaleEpoch. Epoch 0 only reads.
func ClaimManifest(ctx context.Context, b tier.Bucket, key string, epoch int64) (*Manifest, error) {
	l := layoutOf(key)
	for attempt := 0; ; attempt++ {
		st, err := readState(ctx, b, l)
		if err != nil {
			return nil, err
		}
		switch {
		case st.m.Epoch > epoch:
			return nil, fmt.Errorf("%w (epoch %d, manifest epoch %d)", errStaleEpoch, epoch, st.m.Epoch)
		case st.m.Epoch == epoch || epoch == 0 || st.legacy:
			// A legacy manifest.json has no epochs: the Uploader migrates it
			// (its snapshot records the epoch) before its first write.
			return st.m, nil
		}
		d := &delta{Seq: st.m.Version + 1, Epoch: epoch, Updated: time.Now().UTC()}
		buf := encodeDelta(l, d)
		_, err = b.PutIf(ctx, l.deltaKey(d.Seq), bytes.NewReader(buf), int64(len(buf)), tier.IfAbsent())
		if err == nil {
			continue // read again: confirms the slot counts (not below a snapshot) and returns the state
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, tier.ErrPreconditionFailed) && attempt >= 8 {
			return nil, fmt.Errorf("upload: claim manifest for epoch %d: %w", epoch, err)
		}
		t := time.NewTimer(time.Duration(attempt+1) * 50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// errSlotCollected: a delta was written at a sequence number a snapshot
// already covers (see checkSlot).
var errSlotCollected = errors.New("upload: manifest delta written below the newest snapshot")

// checkSlot confirms a delta just written at seq counts: no snapshot at
// seq or later exists. A writer further behind than SnapshotEvery finds
// its next sequence number free again once another writer's snapshot
// collected the delta that held it; its conditional create then succeeds,
// but readers start at the newest snapshot and never apply it, so the
// objects it lists would be acknowledged and lost. A snapshot is written
// before the deltas it replaces are deleted, and removed only once a newer
// one exists, so a collected slot always has a snapshot at or above it by
// the time it is free. The check lists the snapshot roots only (one or two
// keys). Anything it cannot confirm (a failed list) counts as a lost
// race: the caller rereads and commits again, which at worst lists the
// same objects twice.
func (u *Uploader) checkSlot(ctx context.Context, seq int64) error {
	actx, cancel := context.WithTimeout(ctx, u.cfg.AttemptTimeout)
	defer cancel()
	newest := int64(-1)
	err := u.cfg.Bucket.List(actx, u.lay.dir+"snap/", func(key string, _ int64) error {
		if kind, s := u.lay.parse(key); kind == "snap" {
			newest = max(newest, s)
		}
		return nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("%w (cannot tell: listing the snapshots failed: %w)", errSlotCollected, err)
	case newest >= seq:
		u.log.Warn("manifest delta written at a sequence number a snapshot covers (this writer was behind); rereading",
			"seq", seq, "snapshot", newest)
		return errSlotCollected
	}
	return nil
}

// put writes one manifest object under the fence.
func (u *Uploader) put(ctx context.Context, key string, buf []byte, cond *tier.Cond) error {
	if _, err := u.fence(); err != nil {
		return err
	}
	actx, cancel := u.bound(ctx, u.cfg.AttemptTimeout)
	defer cancel()
	if cond != nil {
		_, err := u.cfg.Bucket.PutIf(actx, key, bytes.NewReader(buf), int64(len(buf)), *cond)
		return err
	}
	return u.cfg.Bucket.Put(actx, key, bytes.NewReader(buf), int64(len(buf)))
}

// snapshot writes a snapshot of the current state (held under writeMu):
// the shards whose objects changed since the last one, then the root
// (IfAbsent), then collects what it replaced.
func (u *Uploader) snapshot(ctx context.Context, epoch int64) error {
	st := u.state()
	if err := u.writeSnapshot(ctx, st, epoch, false); err != nil {
		return err
	}
	u.collect(ctx)
	return nil
}

func (u *Uploader) writeSnapshot(ctx context.Context, st *mstate, epoch int64, all bool) error {
	seq := st.m.Version
	refs, write := planSnapshot(st, all)
	for i := range refs {
		if write[i] == nil {
			continue
		}
		refs[i].Name = u.lay.shardName(seq, i)
		buf := encodeShard(u.lay, seq, refs[i].Lo, write[i])
		if err := u.put(ctx, u.lay.dir+refs[i].Name, buf, nil); err != nil {
			return fmt.Errorf("write manifest shard: %w", err)
		}
	}
	r := &root{Seq: seq, Epoch: max(epoch, st.m.Epoch), Updated: u.cfg.Now().UTC(), Expired: st.m.Expired, Shards: refs}
	absent := tier.IfAbsent()
	if err := u.put(ctx, u.lay.rootKey(seq), encodeRoot(u.lay, r), &absent); err != nil {
		return fmt.Errorf("write manifest snapshot: %w", err)
	}
	next := *st
	m := *st.m
	m.Epoch = r.Epoch
	next.m = &m
	next.snapSeq, next.shards, next.dirty = seq, refs, map[int64]bool{}
	next.legacy, next.legacyCQ = false, nil
	u.setState(&next)
	return nil
}

// collect deletes (under the fence) what the newest snapshot replaced:
// older snapshots, shards it does not reference, deltas more than
// SnapshotEvery below it (the last interval stays, so a writer a little
// behind finds its sequence number taken rather than free again), a
// migrated manifest.json, and keys whose delete failed before. Failures
// are logged; the next snapshot tries again.
func (u *Uploader) collect(ctx context.Context) {
	st := u.state()
	ls, err := list(ctx, u.cfg.Bucket, u.lay)
	if err != nil {
		u.log.Warn("list manifest objects to collect", "err", err)
		return
	}
	live := map[string]bool{}
	for _, s := range st.shards {
		live[s.Name] = true
	}
	u.mu.Lock()
	gone := u.mu.orphans
	u.mu.orphans = nil
	u.mu.Unlock()
	for _, r := range ls.roots {
		if r < st.snapSeq {
			gone = append(gone, u.lay.rootKey(r))
		}
	}
	for name, seq := range ls.shardSeqs {
		if !live[name] && seq < st.snapSeq {
			gone = append(gone, u.lay.dir+name)
		}
	}
	for s := range ls.deltas {
		if s <= st.snapSeq-int64(u.cfg.SnapshotEvery) {
			gone = append(gone, u.lay.deltaKey(s))
		}
	}
	if ls.legacy && st.snapSeq >= 0 {
		gone = append(gone, u.lay.legacy)
	}
	slices.Sort(gone) // oldest deltas first
	u.deleteKeys(ctx, gone)
}

// deleteKeys deletes keys under the fence; those that fail are kept for
// the next collection.
func (u *Uploader) deleteKeys(ctx context.Context, keys []string) {
	var failed []string
	for i, k := range keys {
		if _, err := u.fence(); err != nil {
			failed = append(failed, keys[i:]...)
			break
		}
		dctx, cancel := u.bound(ctx, u.cfg.AttemptTimeout)
		err := u.cfg.Bucket.Delete(dctx, k)
		cancel()
		if err != nil {
			failed = append(failed, k)
		}
	}
	if len(failed) > 0 {
		u.log.Warn("manifest collection: deletes failed; retried after the next snapshot", "keys", len(failed))
		u.mu.Lock()
		u.mu.orphans = append(u.mu.orphans, failed...)
		u.mu.Unlock()
	}
}

// migrate turns a legacy manifest.json (held under writeMu) into the first
// snapshot, at its version, then deletes the consumequeue objects it
// listed and the manifest.json itself. Readers use the snapshot as soon as
// it exists.
func (u *Uploader) migrate(ctx context.Context, epoch int64) error {
	st := u.state()
	if !st.legacy {
		return nil
	}
	start := time.Now()
	cq := st.legacyCQ
	if err := u.writeSnapshot(ctx, st, epoch, true); err != nil {
		if errors.Is(err, tier.ErrPreconditionFailed) {
			// Another writer migrated first: read what it wrote.
			nst, rerr := readState(ctx, u.cfg.Bucket, u.lay)
			if rerr != nil {
				return rerr
			}
			u.setState(nst)
			return nil
		}
		return err
	}
	keys := make([]string, 0, len(cq)+1)
	for _, o := range cq {
		keys = append(keys, o.Key)
	}
	keys = append(keys, u.lay.legacy)
	u.deleteKeys(ctx, keys)
	u.log.Info("manifest migrated from manifest.json to the delta log", "version", st.m.Version,
		"objects", len(st.m.Objects), "consumequeue_objects_deleted", len(cq), "took", time.Since(start))
	return nil
}
