// Package restore is the start-up judgement of a broker over its data dir
// and its bucket: what it keeps of the local data, what it sets aside, and
// where its store opens (store.Restore). It runs before the store opens,
// once per start; the broker wires it (broker/wire_restore.go) and carries
// nothing of it past New.
//
// # What it decides
//
// Judge.CheckLocal (a non-empty data dir; Decide is its rule, which reads
// and writes nothing): the local log is served when this data dir wrote
// the prefix last, that is when the epoch it recorded (writer.json) is at
// least the bucket's (the checkpoint's writer, or the manifest's when
// newer). A promoted slave's copy is served when it reaches the end of
// what the bucket holds (KeepPromoted). Otherwise the local data is set
// aside, but only when the bucket holds all of it (LackingRange: every
// segment uploaded whole; BucketGap for a promoted copy: every byte at or
// above the retention floor listed or expired); if the local log holds
// offsets the bucket lacks, or lost offsets it had checkpointed as
// durable, the start is refused naming the range, unless
// STRATAMQ_ACCEPT_LOSS is set. Lengths are never compared to guess who
// wrote last (an async log is legitimately shorter after a power loss),
// and segment sizes count only up to the log's last valid record
// (LocalSegments, store.LogEnd), never the file size.
//
// Judge.Point (a master on a fresh data dir): the log starts past every
// offset the bucket's history may have handed out: the checkpoint's
// reservation (not after a clean stop), its high-water mark and the end of
// every uploaded object, never below the bucket's end; queues resume past
// their reservations after an unclean stop. A checkpoint naming a drain
// that did not finish is refused unless STRATAMQ_ACCEPT_LOSS is set.
// Judge.Metadata writes the checkpoint's topics, groups and offsets into
// the config directory of a fresh data dir; Judge.ClampOffsets moves
// consumer offsets past a restored queue's end back to it.
//
// Judge.ReplicaPoint (a slave): the log starts at U = ReplicaStart, the end
// of the contiguous prefix of commitlog objects listed with their queue
// index (ranges retention deleted from the middle count as present), or
// where the master's log starts when that is past U; ReplicaCovered is
// the local segments inside that prefix, which a slave may drop.
//
// # What it writes
//
// SetAside renames <data dir>/store and <data dir>/config to
// store.stale-<unix seconds> and config.stale-<unix seconds> (with -<n>
// after them when a copy set aside in the same second holds the name);
// nothing is ever deleted. Metadata writes config/topics.json,
// config/subscriptionGroup.json and config/consumerOffset.json (the names
// the broker passes) atomically, from the checkpoint's sections as they
// are. No object in the bucket.
//
// # Goroutines
//
// None: every function runs on the caller's goroutine, and Judge holds no
// state between calls.
//
// # What it must never do
//
// It must never import package broker or another broker feature package
// (durability's formats are the only one it reads); never delete local
// data; never set aside a byte the bucket does not hold without
// STRATAMQ_ACCEPT_LOSS; never judge which copy wrote last by its length;
// and never start a master's log below the end of what the bucket holds.
package restore
