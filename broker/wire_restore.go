package broker

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/broker/restore"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

// The start-up decision over the local data and the bucket (package
// restore): what a broker keeps of its data dir, what it sets aside, and
// where its store opens. This file wires it: New calls checkLocalData,
// restoreMetadata, restorePoint or replicaRestorePoint and afterRestore
// in that order (broker.go); wire_failover.go reads the data dir through
// storeIsFresh, setAside, commitLogOf and
// readReplicaCheckpoint. The judge holds no state and runs no goroutine.

// judge is the restore judge over this broker's data dir.
func (b *Broker) judge() *restore.Judge {
	return restore.New(restore.Config{DataDir: b.cfg.DataDir, BrokerName: b.cfg.BrokerName, AcceptLoss: b.cfg.AcceptLoss,
		Failover: b.cfg.HAFailover, MaxMessageSize: int(b.cfg.MaxMessageSize)}, restore.Deps{FS: b.fs, Logger: b.log})
}

// storeIsFresh reports whether the data dir holds no commitlog: a new
// machine, or a wiped disk.
func (b *Broker) storeIsFresh() bool { return b.judge().Fresh() }

// restoreMetadata writes topics, subscription groups and consumer offsets
// from the bucket's checkpoint cp into the config directory when the data
// dir is fresh, so the managers load them as if they had always been local.
func (b *Broker) restoreMetadata(configDir string, cp *offsets.Checkpoint) error {
	return b.judge().Metadata(configDir, cp, map[string]string{
		sectionTopics:             topicsFile,
		sectionSubscriptionGroups: subscriptionGroupFile,
		sectionConsumerOffsets:    offsets.ConsumerOffsetsFile,
		sectionAuth:               authFile, // auth2.go
	})
}

// restoredCommitLog decodes the checkpoint's commitlog section.
func (b *Broker) restoredCommitLog() (durability.CommitLog, bool) {
	if b.dur == nil {
		return durability.CommitLog{}, false
	}
	return b.commitLogOf(b.dur.Loaded())
}

// commitLogOf decodes cp's commitlog section.
func (b *Broker) commitLogOf(cp *offsets.Checkpoint) (durability.CommitLog, bool) {
	return b.judge().CommitLogOf(cp)
}

// restorePoint is where a master's store on a fresh disk starts
// (restore.Judge.Point): past everything the bucket's history may have
// handed out. Nil when the bucket holds nothing.
func (b *Broker) restorePoint() (*store.Restore, error) {
	cl, haveCP := b.restoredCommitLog()
	in := restore.Bucket{CommitLog: cl, HaveCP: haveCP, QueueCounts: b.topics.QueueCounts}
	if b.dur != nil && b.dur.Loaded() != nil {
		in.Writer = b.dur.Loaded().Writer
	}
	in.ObjectsEnd = b.bucketObjectsEnd(nil) // wire_wal.go
	return b.judge().Point(in)
}

// readReplicaCheckpoint is a slave's read-only look at the master's bucket
// checkpoint (no lease, no Load that would adopt it for writing): nil, with
// a warning, when it is missing or unreadable.
func (b *Broker) readReplicaCheckpoint() *offsets.Checkpoint {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp, err := offsets.ReadCheckpoint(ctx, newCheckpointStore(b.scoped))
	if err != nil {
		b.log.Warn("slave: the master's bucket checkpoint is not readable; starting without its floor and queue minima", "err", err)
		return nil
	}
	return cp
}

// replicaRestorePoint is a slave's store restore (restore.Judge.
// ReplicaPoint) from the manifest tiering read at start and the master's
// checkpoint cp (nil when unreadable).
func (b *Broker) replicaRestorePoint(cp *offsets.Checkpoint) (*store.Restore, error) {
	m := b.tier.AtStart()
	if m == nil {
		return b.judge().ReplicaPoint(nil, b.restartAt, durability.CommitLog{})
	}
	cl, _ := b.commitLogOf(cp)
	return b.judge().ReplicaPoint(m, b.restartAt, cl)
}

// afterRestore moves consumer offsets that point past a queue's restored
// maximum back to it (restore.Judge.ClampOffsets).
func (b *Broker) afterRestore(*store.Restore) {
	b.judge().ClampOffsets(b.offsets, b.store.MaxQueueOffset)
}

// resumeUnseenQueues numbers, in a promoted slave's copy of the log, every
// queue from at least where the bucket's history may have handed its
// offsets out (restore.FreshPoint's queues: the checkpoint's ends, past
// their reservations after an unclean stop), as a master restored on an
// empty disk does, whether or not this copy holds records of the queue
// (store.ResumeQueues: a hole up to there). A slave restored at its
// master's restore gap learns only the queues written since; without this,
// its first write to another one would reuse offsets from 0. And every
// copy must number a queue the same way: a copy that continued a queue
// from its own records while an earlier promoted copy had jumped it (and
// uploaded the jump in its segment index) would hand out offsets the
// bucket's history already gave, and a slave restored from the bucket
// could not follow it (the delayed-message queues were lost that way).
func (b *Broker) resumeUnseenQueues() error {
	cl, haveCP := b.restoredCommitLog()
	if !haveCP {
		return nil
	}
	r := restore.FreshPoint(restore.Bucket{CommitLog: cl, HaveCP: true, QueueCounts: b.topics.QueueCounts})
	if r == nil || len(r.Queues) == 0 {
		return nil
	}
	n, err := b.store.ResumeQueues(r.Queues)
	if err != nil {
		return fmt.Errorf("broker: promoted copy: start the queues it holds no record of past the bucket checkpoint's reservations: %w", err)
	}
	if n > 0 {
		b.log.Info("promoted: queues resume where the bucket checkpoint says their offsets may have reached",
			"queues", n, "clean", cl.Clean)
	}
	return nil
}

// checkLocalData decides, before the store opens, whether a non-empty data
// dir's log may be served, and sets it aside or refuses to start when not
// (restore.Judge.CheckLocal). It returns the bucket manifest it read (nil
// when the data dir is fresh) for newTiering, and whether a promoted
// slave's copy is kept (New's promotedReplica).
func (b *Broker) checkLocalData() (m *upload.Manifest, promoted bool, err error) {
	if b.storeIsFresh() {
		return nil, false, nil
	}
	d := b.dur
	cl, haveCP := b.restoredCommitLog()
	if m, err = b.loadManifest(); err != nil {
		return nil, false, fmt.Errorf("broker: read the bucket manifest to check the local data dir against it: %w", err)
	}
	walHeld, walEnds, err := b.walHolds(b.walHeld(m))
	if err != nil {
		return nil, false, err
	}
	promoted, err = b.judge().CheckLocal(restore.Local{Self: d.ID(), Prev: d.Prev(), Loaded: d.Loaded(), CommitLog: cl, HaveCP: haveCP, Manifest: m, WAL: walHeld, WALEnds: walEnds,
		BucketOnly: b.bucketOnlyOf(filepath.Join(b.cfg.DataDir, "config"))}) // wire_wal.go
	return m, promoted, err
}

// setAside renames store/ and config/ out of the way (store.stale-<unix>),
// so the broker restores from the bucket.
func (b *Broker) setAside(why string) error { return b.judge().SetAside(why) }

// loadManifest reads the bucket's manifest (bounded in time).
func (b *Broker) loadManifest() (*upload.Manifest, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.readManifest(ctx, b.scoped) // wire_tiering.go: the lease holder claims it first
}
