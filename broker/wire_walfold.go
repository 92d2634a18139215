package broker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/wal"
)

// Folding the WAL's tail on an empty disk (New). The WAL ships the whole
// log, but only up to its last committed object: a broker that also had
// local-durable topics may have acknowledged (and shown consumers)
// records past it, which are gone with its disk. Continuing the log at
// the WAL's end would hand their queue offsets and msgIds out again. So
// a broker on an empty disk whose WAL holds bytes past the segments, after
// an unclean stop whose checkpoint reserved offsets past the WAL's end,
// first makes that tail segments of the bucket (appended to a scratch
// store, sealed, uploaded and listed in the manifest under the lease, as
// the uploader always does), then drops the scratch copy and restores as
// after any unclean stop with nothing past the segments (restorePoint):
// the log and every queue resume past the checkpoint's reservations, every
// WAL record is read from the bucket at its own offset, and the WAL's
// writer claims past the gap ("the WAL's bytes start past e"). The WAL
// objects the new segments hold are trimmed as usual.
//
// The data dir stays empty (fresh) until the fold is done: a crash in the
// middle leaves only the scratch directory, removed at the next start,
// which folds what the bucket does not list yet.

// A broker whose every topic is bucket-durable hands out nothing past
// the WAL's end: its sends are answered, and its records shown to
// consumers (its internal topics' too: they have no attribute, so the
// default's durability), only once the WAL holds them, and the internal
// services' saved progress counts only what the bucket holds
// (durable_progress.go). Its checkpoints say so (CommitLog.BucketOnly),
// and a restore from them continues at the WAL's end, offsets unbroken.
// A change that makes a topic local-durable writes a checkpoint saying
// otherwise before it takes effect (checkpointLocalDurable).

// walFoldDir is the scratch store's directory under the data dir.
const walFoldDir = "walfold"

// walTailNeedsFold reports whether an empty-disk restore whose WAL holds
// bytes past the segments' end e (walRestorePoint's fromWAL) must fold
// them before serving: the bucket checkpoint's last writer stopped
// uncleanly and may have written past the WAL's end (its reservation
// reaches past it).
func (b *Broker) walTailNeedsFold(c *wal.Chain, e int64) bool {
	cl, haveCP := b.restoredCommitLog()
	if !haveCP || cl.Clean {
		// No checkpoint: its writer wrote nothing (writes wait for the
		// first one). Clean: nothing was written after it.
		return false
	}
	if cl.BucketOnly {
		// Its writer handed out nothing past the WAL's end.
		return false
	}
	// The store refuses writes past the reservation: when it does not
	// reach past the WAL's end, nothing was handed out past it.
	return max(cl.Reserved, cl.HWM) > c.End(e)
}

// foldWALTail appends the WAL's records past e to a scratch store opened
// with opts at r (walRestorePoint's), uploads it as sealed segments and
// waits until the manifest lists them, then removes the scratch store. It
// returns every queue the scratch store held records of, with its range
// (foldedQueues). The scratch store is b.store meanwhile (the uploader
// reads it), nil after: New sets it through use, as it is New's to set.
func (b *Broker) foldWALTail(opts store.Options, r *store.Restore, c *wal.Chain, e int64, use func(*store.Store)) (held map[string]map[int32]store.QueueRange, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), walRecoverTimeout)
	defer cancel()
	// The fold's bucket writes are fenced by the lease, which Run does not
	// renew yet.
	if err := b.dur.Lease().Renew(ctx); err != nil {
		return nil, fmt.Errorf("broker: fold the WAL's tail: renew the lease: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	rctx, stopRenew := context.WithCancel(ctx)
	defer stopRenew()
	wg.Go(func() { b.dur.KeepRenewed(rctx) })

	opts.Dir = filepath.Join(b.cfg.DataDir, walFoldDir)
	opts.Restore = r // New removed any earlier fold's scratch store
	st, err := store.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("broker: fold the WAL's tail: open a scratch store: %w", err)
	}
	use(st)
	open := true
	defer func() {
		if open {
			_ = st.Close()
		}
		use(nil)
	}()
	end, err := wal.Reconcile(ctx, b.scoped, walDir, c, min(e, st.MaxPhysOffset()), foldLocal{walLocal{b: b}})
	if err != nil {
		return nil, fmt.Errorf("broker: fold the WAL's tail: %w", err)
	}
	end = max(end, st.MaxPhysOffset())
	b.log.Info("folding the bucket WAL's tail into segments before serving: the lost broker may have handed out offsets past it",
		"segmentsEnd", e, "walEnd", end)

	up := b.tier.Uploader()
	uctx, stopUp := context.WithCancel(ctx)
	upDone := make(chan error, 1)
	go func() { upDone <- up.Run(uctx) }()
	derr := b.tier.Drain(ctx)
	stopUp()
	if err := <-upDone; err != nil && !errors.Is(err, context.Canceled) {
		derr = errors.Join(derr, err)
	}
	if got := uploadedEnd(nil, b.tier); got < end {
		return nil, fmt.Errorf("broker: fold the WAL's tail: the manifest lists the log up to %d, not its end %d: %w", got, end, derr)
	}
	held = foldedQueues(st)
	open = false
	if err := st.Close(); err != nil {
		return nil, fmt.Errorf("broker: fold the WAL's tail: close the scratch store: %w", err)
	}
	if err := b.fs.RemoveAll(opts.Dir); err != nil {
		return nil, fmt.Errorf("broker: fold the WAL's tail: remove the scratch store: %w", err)
	}
	return held, nil
}

// foldLocal is the scratch store as wal.Reconcile sees it: it holds only
// what the chain gave it, so it never differs from it.
type foldLocal struct{ walLocal }

func (foldLocal) Cut(at int64) error {
	return fmt.Errorf("broker: the scratch store differs from the WAL at %d, which only wrote it", at)
}

// foldedQueues is every queue st holds records of: [its first offset, its
// end).
func foldedQueues(st *store.Store) map[string]map[int32]store.QueueRange {
	out := map[string]map[int32]store.QueueRange{}
	for topic, n := range st.QueueCounts() {
		for q := range n {
			if mx := st.MaxQueueOffset(topic, q); mx > 0 {
				if out[topic] == nil {
					out[topic] = map[int32]store.QueueRange{}
				}
				out[topic][q] = store.QueueRange{Min: st.MinQueueOffset(topic, q), Max: mx}
			}
		}
	}
	return out
}

// withFolded makes restorePoint's r serve the folded queues held: a
// queue's records in the bucket are read from its first held offset (a
// queue the checkpoint knew without records starts past its reservation
// in r, but the fold put its records in segments), and it resumes past
// both its reservation and its held end.
func withFolded(r *store.Restore, held map[string]map[int32]store.QueueRange) {
	if r == nil {
		return
	}
	if r.Queues == nil {
		r.Queues = map[string]map[int32]store.QueueRange{}
	}
	for topic, qs := range held {
		for q, h := range qs {
			if r.Queues[topic] == nil {
				r.Queues[topic] = map[int32]store.QueueRange{}
			}
			cur, ok := r.Queues[topic][q]
			if !ok {
				r.Queues[topic][q] = h
				continue
			}
			r.Queues[topic][q] = store.QueueRange{Min: min(cur.Min, h.Min), Max: max(cur.Max, h.Max)}
		}
	}
}

// walBucketOnly is the checkpoint's CommitLog.BucketOnly: this broker runs
// the WAL, STRATAMQ_DURABILITY is bucket and no topic says local (nor did
// one this run).
func (b *Broker) walBucketOnly() bool {
	if running, local := b.walMadeLocal(); !running || local || b.cfg.Durability != DurabilityBucket {
		return false
	}
	// Records answered under a local rule before (a topic made bucket-
	// durable or deleted since, another STRATAMQ_DURABILITY in an earlier
	// run, a promoted copy's log) must be in the WAL too.
	if d, _ := b.walDurable(); d < b.durHist.localUntil() {
		return false
	}
	for _, tc := range b.topics.Wrapper().TopicConfigTable {
		if tc.Attributes[DurabilityAttribute] == DurabilityLocal {
			return false
		}
	}
	return true
}

// checkpointLocalDurable is called before a topic's durability changes to
// next: when it makes a topic local-durable on a broker whose checkpoints
// say BucketOnly, a checkpoint that no longer says so must be in the
// bucket first (else a restore from an older one would continue at the
// WAL's end over offsets the topic's sends were given); the change is
// refused if it cannot be written.
func (b *Broker) checkpointLocalDurable(next string) error {
	if next != DurabilityLocal || b.dur == nil || !b.walBucketOnly() {
		return nil
	}
	b.markWALLocal()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.dur.Checkpoint(ctx); err != nil {
		return fmt.Errorf("broker: making a topic local-durable needs a bucket checkpoint first (a restore must not reuse its offsets): %w", err)
	}
	return nil
}
