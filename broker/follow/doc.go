// Package follow is what a serving slave (STRATAMQ_ROLE=slave) keeps
// beside its HA stream, and the loop that keeps its metadata its master's.
//
// # What it owns
//
// Follower owns:
//
//   - the master's addresses the name servers reported in the answer to
//     the slave's REGISTER_BROKER (haServerAddr, masterAddr; Learned): with
//     no STRATAMQ_HA_MASTER the HA stream dials the first (NameServerHA),
//     and the sync polls the master at the address the HA hello reply
//     named, else the name server's (MasterAddr);
//   - consumer offsets committed to the slave (UPDATE_CONSUMER_OFFSET while
//     the master is away: Java clients commit to a slave only when the
//     name server lists no master; rocketmq-client-go never does) that the
//     master does not hold yet (Committed, Pending). Each sync pushes them
//     to the master first; until one is pushed, the master's offsets never
//     overwrite it (ApplyOffsets).
//
// # Goroutines
//
// Run, once, is the sync loop: every Config.Interval (STRATAMQ_HA_SYNC_INTERVAL)
// it pushes the pending offsets, then copies the master's topic configs
// (topics gone on the master go here too, with their queue data and
// offsets), subscription groups and consumer offsets (GET_ALL_TOPIC_CONFIG,
// GET_ALL_SUBSCRIPTIONGROUP_CONFIG, GET_ALL_CONSUMER_OFFSET: Sync); with a
// read-only bucket it reloads the master's manifest and lets local
// retention drop the local segments it covers (Retention); then it saves
// the pending offsets. It ends when its context ends or on Close, after a
// last save. Every other method may be called from any goroutine.
//
// # What it writes
//
// config/slavePendingOffsets.json (PendingOffsetsFile), atomically
// (offsets.WriteFileAtomic), when the pending set changed since the last
// save:
//
//	[{"group": "G", "topic": "T", "queueId": 0, "offset": 42}, ...]
//
// sorted by topic, group and queue. Through its dependencies it changes
// the broker's topic and group tables, its consumer offsets and its store
// (a topic the master deleted) as the master's are; nothing in the bucket.
//
// # What it must never do
//
// It must never import package broker or another broker feature package
// but consumers (the groups' wire decoding) and restore (which local
// segments a manifest covers), nor reach the broker except through the
// interfaces it declares (Master, Stream, Table, Offsets, Store, Bucket,
// Retention); never overwrite an offset committed here and not pushed yet;
// never drop a local segment the master's manifest does not cover with
// its queue index; and never write to the bucket.
package follow
