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
// Commit never writes: ConsumerOffsets.SaveLoop, run by its owner, saves
// within a delay (the broker's is 100ms) of a change, one write for every
// change of that delay.
//
// # Checkpoints in the bucket
//
// The broker's metadata is also checkpointed to the bucket (issue 4), so a
// broker on a new machine resumes from the bucket alone. offsets does not
// import tier: it declares ObjectStore (Get with ETag, conditional Put,
// Delete, List), and the broker adapts its tier.Bucket, already under the
// broker's prefix <prefix>/<cluster>/<brokerName>/, to it
// (broker/durability/objectstore.go). NewMemStore is an in-memory ObjectStore
// for tests; offsets/offsetstest is the suite every store must pass.
//
// Objects, relative to the broker's prefix:
//
//	meta/checkpoint.json                       the latest checkpoint (the fencing point)
//	meta/checkpoint/<20-digit version>.json    copies of the last History (default 8) checkpoints
//	meta/lease.json                            the lease
//	meta/candidates/<instance>.json            a contender's candidacy while a lease lapses (Contest)
//	meta/replicas/<epoch>/<instance>.json      a slave follows a master epoch (PublishReplica; Contest.Cover)
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
// Two brokers must never write one prefix at once. Three mechanisms:
//
//  1. The lease (meta/lease.json): {"holder","instance","host","epoch",
//     "acquiredAt","renewedAt","expiresAt","ttlMillis","released","seq"}.
//     Every acquisition writes epoch = stored epoch + 1 (and above
//     AcquireOptions.MinEpoch, the epoch the data dir last wrote with): the
//     epoch is the fencing token of one run of one broker, and Identity
//     carries it. AcquireLease creates the lease if absent; takes it over,
//     with If-Match on the ETag it read, when it is released, unreadable, or
//     held by the caller's own instance (a restart on the same data dir);
//     and otherwise watches it: if its version changes the holder is alive
//     (ErrLeaseHeld, "… renewed the lease while this broker waited …"); if
//     it stays unchanged for a full TTL (the holder's recorded ttlMillis or
//     ours, the longer) on the contender's own monotonic clock
//     (AcquireOptions.Mono), it is taken over. Wall clocks are never
//     compared, so clock skew cannot let two brokers write at once.
//     Renew writes If-Match on our last ETag (seq grows with every write so
//     every write is a new version); a lease now held by another instance
//     or another epoch fails Renew with ErrFenced naming it, for good.
//     Check is the holder's self-fence, with no I/O: nil while the last
//     successful write began less than TTL − LeaseMargin (TTL/5) ago on the
//     monotonic clock, then ErrLeaseExpired until a Renew succeeds. A
//     contender takes over no sooner than TTL after it first saw the last
//     version, which is after that write began, so the holder has stopped
//     acknowledging by then. Release (clean shutdown) writes released=true,
//     If-Match, so a successor need not wait and an old holder can never
//     free a newer holder's lease. TTL: LeaseTTL(interval) = max(3 ×
//     STRATAMQ_CHECKPOINT_INTERVAL, 30 s); the broker renews it every TTL/5
//     on its own timer (broker/durability/keeper.go renew), apart from checkpoints.
//  2. The checkpoint itself: every Save is If-Match on the ETag of the
//     checkpoint last loaded or written (If-None-Match: * for the first), so
//     an older writer never overwrites a newer checkpoint even if the lease
//     failed. On a failed condition Save re-reads: written by another writer
//     (another instance, or our instance under another epoch; or deleted,
//     or replaced by an unreadable object) → ErrFenced, and that
//     Checkpointer never writes again; written by this very run (a write
//     whose response was lost) → adopt it and write above it. Load adopts
//     whatever is stored: that is how a new broker takes over, after it
//     holds the lease. The writer (with its epoch) is in every checkpoint.
//  3. The data dir's writer state (WriterState, <data dir>/writer.json):
//     {"format":1,"broker","instance","epoch"}. The instance id is chosen
//     once per data dir and kept; the epoch is the one the data dir last
//     wrote under. The broker compares it with the epoch of the bucket's
//     checkpoint and manifest to decide whether another broker wrote the
//     prefix since: never by comparing log lengths. bootId (the machine
//     boot the writer ran in) tells a restarted master whether a crash of
//     the process was all it suffered.
//
// # Who takes a lapsed lease (Contest)
//
// Fencing keeps two writers apart; it does not say which node should
// write next. A node's copy of the log may lack what another acknowledged
// (a lagging slave; a master whose page cache a power cut took). With
// AcquireOptions.Contest a takeover is a competition between copies:
//
//   - While the watched lease looks like it is lapsing (half the watch
//     gone, or at once with ContestNow) a contender publishes its
//     Candidacy every Period at meta/candidates/<instance>.json:
//     {"instance","host","epoch","end","seq","at"}: the epoch its log
//     agrees with and where its last record ends.
//
//   - Before the conditional write (Decide) it publishes once more, then
//     waits, republishing, until every other candidacy it can see was
//     published again (at most two Periods). A republished candidacy is
//     live and was written after the old holder stopped acknowledging
//     (the watch lasted a full TTL), so its end covers what its node holds
//     of everything acknowledged. One not republished is a node that is
//     gone or cut off from the bucket: ignored, and deleted by the winner.
//
//   - It writes the lease only if its own candidacy is the best live one
//     (Candidacy.Better: newest epoch, then longest end, then the lower
//     instance id), and keeps publishing while that write runs; otherwise
//     it fails with a *DeferredError (ErrLeaseHeld) naming the better one.
//     If the better one never takes the lease, the next round ignores it.
//
//   - With Cover, the takeover of a sync_master's lease also waits until
//     every slave that published a ReplicaRecord for that lease's epoch
//     (before its first acknowledgement counted) has a live candidacy of
//     the same instance or host; the best live copy then holds every
//     acknowledged record. Otherwise it fails with a *DeferredError
//     naming the Missing ones (UncleanAfter > 0 bounds the wait).
//
// A released lease is taken without a contest (its holder stopped cleanly,
// with everything uploaded). WatchOwn makes a restarted holder treat its
// own unreleased lease like another's: watched and contested.
//
// Use, in the broker:
//
//	ws, _ := offsets.ReadWriterState(fs, dataDir+"/writer.json") // nil: a new data dir
//	id := offsets.IdentityFor(brokerName, ws.Instance)            // or NewInstanceID()
//	lease, err := offsets.AcquireLease(ctx, store, id, ttl, offsets.AcquireOptions{MinEpoch: ws.Epoch}) // ErrLeaseHeld: refuse to start
//	cp, err := offsets.NewCheckpointer(store, lease.Identity(), offsets.CheckpointOptions{})
//	last, err := cp.Load(ctx) // nil, nil: a fresh prefix
//	// record lease.Identity() in writer.json once the local data is judged ours
//	// before every acknowledgement: lease.Check()
//	// every interval: lease.Renew(ctx), then cp.Save(ctx, sections); ErrFenced from either: stop writing
//	// on shutdown: cp.Save(ctx, sections), then lease.Release(ctx)
//
// What it must never do: import broker, store or tier.
package offsets
