// Package failover is one broker generation's part in failover: the
// bucket's lease on the brokerName's prefix is the only arbiter; whoever
// holds it is the master, every other broker of the brokerName with
// STRATAMQ_HA_FAILOVER is its slave.
//
//   - A slave watches the lease (Run; offsets.AcquireLease: a lease
//     unchanged for a full TTL on the slave's monotonic clock, or
//     released, is taken with a conditional write and a higher epoch),
//     competing with the other slaves' copies of the log (NewContest:
//     the best live copy wins; a copy that ends before what the master
//     checkpointed waits for a better one). It then asks to continue as
//     master (RequestRoleChange with the lease taken); the broker's node
//     starts the next generation with it.
//   - A master that finds the lease taken by another instance is fenced
//     (package durability) and, with failover, continues as its slave.
//   - Each epoch's master records in the bucket checkpoint where its log
//     took over from the older epochs (durability.EpochStart.From). A
//     slave rejoining after writing under an older epoch cuts its log at
//     the lowest From of the newer epochs (CutFor; PrepareReplica): the
//     bytes past it were never replicated (never acknowledged by a
//     sync_master) and the new master wrote other records at those
//     offsets. The cut bytes are kept in <data>/diverged/ for operators.
//
// What it owns (Roles): the data dir's identity as a replica (its
// instance id), the lease holder a slave follows and the epoch its log
// agrees with (agreed: the hello's epoch and the candidacy's), the
// replica record a slave publishes before its acks count under an epoch
// (HelloAccepted), the role-change request of a generation (one wins),
// the hold-off of a demoted master and the admin promote/demote decisions
// (Promote, Demote, Demoting).
//
// Formats it writes: the data dir's writer identity file as a replica
// (offsets.WriterStateFile: instance, epoch, replica), the lease (when a
// slave takes it over), candidacies and replica records (laid out by
// package offsets). It cuts the local log only before the store opens,
// through DataDir.
//
// Goroutines: Run, the lease watch of a failover slave; it ends when its
// context ends or once it asked for a role change. Nothing else runs on
// its own.
//
// It must never import the broker (or a broker feature package other
// than durability, whose checkpoint format it reads), take the lease
// while a better live copy of the log competes, publish an agreed epoch
// before the master accepted the hello or the bucket listed the epoch's
// start, or cut the log while the store is open. It reads the broker
// only through Log, DataDir, Checkpoints, Host and Peer.
package failover
