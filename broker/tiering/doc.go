// Package tiering moves a broker's commitlog between its local disk and
// the bucket (the broker's prefix, <cluster>/<brokerName>/). One Tiering
// per broker generation; package broker builds it (wire_tiering.go) over
// adapters of the interfaces declared in deps.go and never reaches into it
// otherwise.
//
// # What it owns
//
//   - The uploader (tier/upload) and what it is fed: Tiering is its
//     upload.SegmentSource (source.go). Sealed lists the sealed local
//     segments not uploaded yet; Open hands one over (its bytes, in queue
//     order when Config.Layout is "queue", with its queue index built then
//     and its key index as sections of the same object; a part of one for a
//     broker that took the log over); MarkUploaded tells the cold reader
//     first and only then counts the segment as uploaded.
//   - Which local segments count as uploaded (with their queue and key
//     indexes), and so which local retention (EnforceLocalRetention,
//     Config.LocalRetention) may drop: the oldest uploaded prefix, never a
//     segment that is not in the bucket.
//   - The cold reader (tier/coldread) over the manifest's commitlog
//     objects, which the store reads dropped ranges through (Cold), and the
//     store's cold indexes over the manifest (coldindex.go: store.ColdIndex,
//     store.ColdKeyIndex; one table per manifest, IndexObjects).
//   - Bucket retention (retention.go, EnforceBucketRetention): the default
//     rule (objects uploaded longer ago than Config.Retention, not past
//     Retention.PinnedFloor) and, when a topic overrides it, the one
//     deletion decision (expiredSegments: a segment goes once every queue
//     with a record in it has its min past them), with a per-segment cache
//     of what still keeps it. The per-topic policy (which topic keeps what,
//     raising queue minima) is the broker's: Retention.ExpireTopics.
//   - A slave's read-only view (Config.ReadOnly): the cold reader and cold
//     indexes over its master's manifest, reloaded by ReloadManifest;
//     MarkCovered lets local retention drop what that manifest covers.
//
// # Goroutines
//
// Run (never on a read-only Tiering) runs the uploader's goroutines and a
// one-second housekeeping loop (seal the active segment past
// Config.SegmentMaxAge, local retention, bucket retention) until its
// context ends, and waits for them. Drain (graceful shutdown) seals the
// active segment and waits until everything is uploaded. Close closes the
// cold reader (its cache runs goroutines); New starts nothing.
//
// # What it writes
//
// In the bucket, through the uploader only (formats: tier/upload and
// tier/segfile doc.go): commitlog/<base>[.<epoch>].seg objects (queue and
// key index as sections; Config.OwnIndexObjects: objects of their own, the
// format before sections), manifest deltas and snapshots, and deletes of
// expired objects. Every bucket write is fenced (Owner.Fence) and bounded
// by the lease (Owner.ValidFor). On local disk: <data dir>/spool, emptied
// at New, holding the uploader's encoded objects and queue index blobs
// being uploaded (queueindex-*.tmp, removed when the uploader closes them);
// and it drops local segments through Store.DropSegment.
//
// # What it must never do
//
//   - import package broker, or call into it but through Store, Owner and
//     Retention;
//   - count a segment as uploaded before the cold reader knows its object,
//     or drop a local segment that is not uploaded with its indexes;
//   - write to the bucket once Owner.Fenced (another broker owns the
//     prefix), or, read-only, write to it at all;
//   - keep anything per pending segment in memory: a queue index is built
//     only when the uploader opens it, one at a time.
package tiering
