// Package durability keeps the bucket lease and the bucket checkpoint of
// one broker: it fences the broker (one writer per bucket prefix) and
// makes the bucket the system of record of its metadata.
//
// What it owns (Keeper):
//   - the prefix's lease (offsets.Lease): taken at Open (waiting one TTL
//     for a live holder, or taking part in a failover contest the broker
//     hands it), renewed every fifth of its TTL, released at Final. Its
//     epoch is this run's; Writable refuses acknowledgements once another
//     broker took the prefix (fenced) or the lease may have lapsed
//     (monotonic clock, offsets.Lease.Check).
//   - the checkpoint (offsets.Checkpointer): written every checkpoint
//     interval, early when the log or a queue nears its reservation, when
//     a send needs a queue the last one does not list (AwaitCovered), when
//     a shutdown drain begins (MarkDraining) and at Final.
//   - the offset reservations: every checkpoint reserves headroom past the
//     log's end and each queue's (a few intervals at the rate they grew);
//     the store refuses writes past the reservation of the last checkpoint
//     written (store.Reservation), so a restore after an unclean loss
//     starts past every offset that may have been handed out.
//   - the writer identity file of the data dir (offsets.WriterStateFile:
//     instance, epoch, boot id), read at Open, written by RecordWriter.
//
// Formats it writes: the checkpoint's "commitlog" section (CommitLog: the
// durable end, the reservations, the retention floor, every queue's
// range, the clean and drain-failed marks, the epoch history and the
// store's tombstones). The other sections come from the Source (the
// broker's consumer offsets, topics, subscription groups and internal
// progress) and are written as given. Objects in the bucket (the lease,
// the checkpoint and its history, replica records) are laid out by
// package offsets; NewObjectStore adapts a tier.Bucket to its object
// store, LeaseBound bounds every write but the lease's by the lease.
//
// Goroutines: Run (the checkpoint loop) and, inside it, the renewal loop;
// both end when Run's context ends. Run returns once both have.
//
// It must never import the broker (or any broker feature package), write a
// checkpoint once fenced or after Final, or hold the lease's lock across a
// checkpoint's bucket writes (a slow checkpoint must not delay a renewal).
// It reads the broker only through Source, Store and Failover.
package durability
