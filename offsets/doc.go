// Package offsets owns the broker's small, durable metadata files: consumer
// offsets (ConsumerOffsets, RocketMQ's ConsumerOffsetManager), the atomic
// JSON file writer the topic and subscription-group managers persist with,
// and the checkpoints and lease in the bucket (Checkpointer, Lease).
//
// Files are JSON compatible with RocketMQ's config files:
//
//	config/consumerOffset.json   {"offsetTable":{"topic@group":{"0":12,"1":30}}}
//
// RocketMQ (fastjson) writes integer map keys unquoted ({0:12}); Load accepts
// both forms, Save writes standard JSON, which RocketMQ also reads.
//
// Every write goes temp file (a unique name per write) → fsync → rename →
// fsync of the directory (WriteFileAtomic; a directory it creates is made
// durable too), through infra/vfs, so a crash leaves either the old or the
// new file, never a torn one, and the store's crash tests apply here too.
// Saves of one file are serialized (ConsumerOffsets.Save holds a mutex
// across encode and write), and Open removes temp files a crash left.
//
// # Checkpoints in the bucket
//
// The broker's metadata is also checkpointed to the bucket (issue 4), so a
// broker on a new machine resumes from the bucket alone. offsets does not
// import tier: it declares ObjectStore (Get with ETag, conditional Put,
// Delete, List), and the broker adapts its tier.Bucket, already under the
// broker's prefix <prefix>/<cluster>/<brokerName>/, to it
// (broker/checkpoint_bucket.go). NewMemStore is an in-memory ObjectStore
// for tests; offsets/offsetstest is the suite every store must pass.
//
// Objects, relative to the broker's prefix:
//
//	meta/checkpoint.json                       the latest checkpoint (the fencing point)
//	meta/checkpoint/<20-digit version>.json    copies of the last History (default 8) checkpoints
//	meta/lease.json                            the lease
//
// A checkpoint is one JSON object, written whole by one Put, so a reader sees
// all of a checkpoint or none of it:
//
//	{"format":1,"version":42,
//	 "writer":{"broker":"broker-a","instance":"3f2a9c01d4e5b6a7","host":"ip-10-0-0-7"},
//	 "time":"2026-03-01T12:00:00.123Z",
//	 "sectionsCrc32c":3735928559,
//	 "sections":{"commitlog":{…},"consumerOffsets":{"offsetTable":{…}},"delayOffsets":{…},
//	             "subscriptionGroups":{…},"topics":{…}}}
//
// Sections are opaque JSON values chosen by the broker (the names above, each
// in the RocketMQ file format of the same data); sectionsCrc32c is CRC-32C
// (Castagnoli) of the exact bytes of "sections" as stored. version is 1 for
// the first checkpoint on a prefix and previous+1 after that, whoever writes.
// format is 1; a reader refuses a newer format rather than fall back past it.
//
// Save writes meta/checkpoint.json first, then its history copy (if absent),
// then deletes copies older than the last History. A reader
// (ReadCheckpoint, Checkpointer.Load) takes the latest; if it is missing or
// damaged (bad JSON, bad checksum), the newest valid history copy. A Save
// after such a fallback writes above every version seen, conditionally over
// the damaged object.
//
// # Fencing
//
// Two brokers must never write one prefix at once. Two mechanisms:
//
//  1. The lease (meta/lease.json): {"holder","instance","host","acquiredAt",
//     "renewedAt","expiresAt","released"}. AcquireLease creates it if absent;
//     if it exists, is not released, is held by another instance and is
//     unexpired by the contender's clock, it fails with ErrLeaseHeld
//     ("broker-a instance 3f2a… on host X holds the lease until T; another
//     broker is running on this prefix"); if expired, released or
//     unreadable, it takes it over with If-Match on the ETag it read, so of
//     two contenders one wins and the other, re-reading, gets ErrLeaseHeld.
//     Renew writes If-Match on our last ETag; if another instance has
//     written, Renew fails with ErrFenced naming it, for good. Release (clean
//     shutdown) writes released=true, If-Match, so a successor need not wait
//     and an old holder can never free a newer holder's lease. TTL:
//     LeaseTTL(interval) = max(3 × STRATAMQ_CHECKPOINT_INTERVAL, 30 s); renew
//     with every checkpoint. The TTL must exceed the clock skew between
//     machines, and a holder whose Renew has not succeeded by ExpiresAt must
//     stop writing.
//  2. The checkpoint itself: every Save is If-Match on the ETag of the
//     checkpoint last loaded or written (If-None-Match: * for the first), so
//     an older writer never overwrites a newer checkpoint even if the lease
//     failed (clock skew, a paused process). On a failed condition Save
//     re-reads: written by another instance (or deleted, or replaced by an
//     unreadable object) → ErrFenced, and that Checkpointer never writes
//     again; written by our own instance (a write whose response was lost)
//     → adopt it and write above it. Load adopts whatever is stored: that
//     is how a new broker takes over, after it holds the lease.
//
// Instances are told apart by Identity.Instance, a random id chosen per
// process (NewIdentity); Broker and Host are for the error messages.
//
// Use, in the broker:
//
//	id, err := offsets.NewIdentity(brokerName)
//	lease, err := offsets.AcquireLease(ctx, store, id, offsets.LeaseTTL(interval), nil) // ErrLeaseHeld: refuse to start
//	cp, err := offsets.NewCheckpointer(store, id, offsets.CheckpointOptions{})
//	last, err := cp.Load(ctx) // nil, nil: a fresh prefix
//	// every interval: lease.Renew(ctx), then cp.Save(ctx, sections); ErrFenced from either: stop writing
//	// on shutdown: cp.Save(ctx, sections), then lease.Release(ctx)
//
// What it must never do: import broker, store or tier.
package offsets
