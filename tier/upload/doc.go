// Package upload moves sealed segments from local disk to a tier.Bucket.
//
// The store implements [SegmentSource]; the [Uploader] asks it for sealed,
// not-yet-uploaded segments, encodes each with tier/segfile (zstd frames,
// footer frame table, per-frame checksum) and stores it under a key derived
// from the segment and the lease epoch Config.Fence returned (KeyAt):
//
//	<prefix>/commitlog/00000000000104857600.7.seg          commitlog, by base offset and epoch, its indexes inside
//	<prefix>/commitlog/00000000000104857600.seg            the same without an epoch (no Fence, or an older bucket)
//	<prefix>/commitlog/00000000000104857600.idx            its queue index, before sections (read, not written)
//	<prefix>/commitlog/00000000000104857600.kix            its key index, before sections (read, not written)
//	<prefix>/meta/manifest/log/<20-digit seq>              a manifest delta
//	<prefix>/meta/manifest/snap/<20-digit seq>             a manifest snapshot (root)
//	<prefix>/meta/manifest/shard/<20-digit seq>-<6-digit>  a snapshot shard
//	<prefix>/meta/manifest.json                            the manifest before issue 12 (migrated, then deleted)
//
// Consumequeue segments (KindConsumeQueue) are not uploaded: every entry
// is in the queue index object of the segment holding its record. A
// source that still lists them gets one warning and they stay pending.
//
// # One object per segment
//
// With Config.Sections (the broker sets both kinds) a commitlog segment's
// queue index (store.WriteSegmentIndex) and key index (the store's key
// index file, 64 KiB frames) are segfile sections of its object, after
// its frames and layout section: one PUT and one manifest entry per
// segment, where there were three of each. The Uploader opens each index
// from the Source (Segment{Kind: k, Base: the segment's, Length: -1}) only
// once the segment's frames are encoded, so one index at a time is held.
// The manifest entry records where each section is (Object.Sections:
// kind, offset, size, logical length), so a reader reaches an index with
// the same requests as a separate object (its footer, then its frames,
// by ranged GETs shifted by the offset) and without reading the
// segment's footer; Manifest.Indexes presents either format as one
// Object per segment (Off set for a section). Indexes of segments whose
// object was uploaded before sections stay objects of their own: they are
// read as before, trimmed with their segment, and a Source may still
// list one (its segment's object listed without it), which is then paired
// as before (PairQueueIndex, PairKeyIndex).
//
//	commitlog/<base>.seg:
//	+-----------------+--------+------------------------+----------------------+--------+---------+
//	| frames (layout) | layout | queue index section    | key index section    | footer | trailer |
//	|                 | section| (frames, footer,       | (64 KiB frames,      | + 2    |         |
//	|                 |        |  trailer: an object)   |  footer, trailer)    | entries|         |
//	+-----------------+--------+------------------------+----------------------+--------+---------+
//	                           ^ Sections[0].Off         ^ Sections[1].Off
//
// Because the key and the bytes depend only on the segment and the epoch,
// an upload can be repeated at any time within an epoch (a retry, a crash
// before the manifest was written) and stores the same object again; and
// no two lease holders ever write the same key, so a deposed holder's PUT
// that lands late cannot replace an object a newer holder listed. A key
// with an epoch is stored in the manifest entry (flag 0x01: formats 1 and
// 2 carry it, so no format change; older readers read it too).
//
// # Continuing the uploaded log
//
// A commitlog segment is compared with the manifest by range, not by key:
// the listed commitlog objects and expired ranges are the log as uploaded,
// whoever uploaded it. A segment they hold whole is marked uploaded
// without a PUT (its bytes are the bucket's: a promoted slave received
// them over HA). Of one they hold in part, only the first part they lack
// is uploaded, as an object whose base is where that part starts
// (Segment.Skip and End: the Source opens that part of its local segment,
// and the indexes of its records alone); the segment is marked once the
// manifest holds all of it. So a broker that took over continues the log
// exactly where the manifest ends although its segment boundaries differ
// from the old master's (a master seals by age, a slave never does), and
// the manifest never lists overlapping objects.
//
// # Order of effects
//
//  1. Put the object (retried with backoff until it succeeds).
//  2. Commit a manifest delta listing the object (a conditional create at
//     the next sequence number, merged and retried on a conflict). A
//     manifest never lists an object that is not complete in the bucket.
//     With Config.ManifestDelay the committer holds finished uploads for
//     up to that long after the first, while another upload runs or
//     Config.MoreSoon expects another segment in time, and lists them all
//     in one delta (Flush cuts the wait short). A crash while it holds
//     them leaves objects no manifest lists: their segments are not marked,
//     so they stay local and the next run puts them again under the same
//     keys and lists them (an orphan of a lost disk stays unlisted and
//     unread; a later upload of that base in the same epoch overwrites it).
//     Commitlog objects are listed in log order: a finished upload waits
//     (Stats.Held) while a sealed segment below it is missing from the
//     manifest, so the listed log never has a hole below its end, which
//     is where a restore on an empty disk starts (a bucket-durable
//     topic's records in a hole would live only in WAL objects past no
//     restore's start).
//  3. SegmentSource.MarkUploaded. Only now may the store drop the local
//     copy. A crash before this step leaves the segment pending; on the
//     next scan it is found in the manifest and marked without a new PUT
//     (so does a MarkUploaded that returned an error).
//
// # Manifest format
//
// The manifest (type Manifest in memory) is stored as an append-only log
// of deltas plus compacted snapshots, the pattern of table formats on
// object storage, so that a commit costs O(objects it adds) and a start a
// bounded number of requests, whatever the history:
//
//   - A commit writes one delta at sequence number N+1, where N is the
//     last it knows, with PutIf(IfAbsent): of two writers at most one wins
//     N+1; the loser rereads (snapshot and deltas) and builds its delta
//     again at the next free number. Manifest.Version is the sequence
//     number of the last delta applied. A won create is confirmed by
//     listing the snapshot roots (snap/, one or two keys): a writer
//     further behind than one snapshot interval finds its next number
//     collected and free again, and a delta there, at or below the newest
//     root, is one no reader applies; it rereads and commits again (a
//     failed list counts the same way).
//   - Every Config.SnapshotEvery deltas (64) the writer of the delta
//     writes a snapshot as of its sequence number S: the shards whose
//     objects changed since the last snapshot (shards cover base-offset
//     ranges; an unchanged shard is reused, named by the old snapshot), then
//     the root snap/S with IfAbsent. A shard holds at most 2 x 8192 objects
//     (a rewritten shard past that is split at base boundaries), so a
//     snapshot writes O(1) shards and a root of one entry per shard.
//   - After the root is written the writer collects: older roots, shards
//     the root does not reference (named below S), deltas at or below
//     S - SnapshotEvery (one interval is kept, so a writer slightly behind
//     finds its number taken rather than deleted and free again), and a
//     migrated manifest.json. Every delete asks Config.Fence.
//   - A reader Lists <prefix>/meta/manifest (one request: a listing holds
//     the live roots, shards and deltas, bounded by the collection), reads
//     the newest root, its shards and the deltas after S in parallel, and
//     applies the deltas in order. The deltas after S must follow without
//     a gap; a root, shard or delta that vanished in between (collected by
//     a newer snapshot) makes it start over, at most 8 times. A root that
//     lags (a crash between a delta and the next snapshot) costs only the
//     extra deltas: there is no separate pointer to keep up to date.
//   - Epochs: each delta and root records the lease epoch Config.Fence
//     returned. A delta with an older epoch than the manifest already holds
//     (written by a deposed holder) is ignored by every reader (its number
//     is consumed), and an Uploader whose fence returns an epoch older than
//     the manifest's writes nothing (fence refuses, as for a lapsed lease).
//
// Delta (log/<seq>), uncompressed (1|2: the format version, below); varint and uvarint are
// encoding/binary's, times are Unix nanoseconds (MinInt64: zero time):
//
//	+------+-----+----------+-------------+----------------+
//	| SMQD | 1|2 | seq uvar | epoch uvar  | updated varint |
//	+------+-----+----------+-------------+----------------+
//	| put: count uvar, objects...  | del: count uvar, objects...          |
//	| expired added: count, (from varint, to varint)... | expired removed |
//	| CRC-32C (Castagnoli) of all the above, 4 bytes little endian        |
//
// Object, in a delta or shard (base and created delta-coded against the
// previous object of the same list; ~10-20 bytes for a derived key):
//
//	+-------+------------------------------+-----------------+------------------+
//	| flags | kind byte (or string if 0x02)| [topic str 0x04]| [queueId var 0x08]|
//	+-------+------------------------------+-----------------+------------------+
//	| base-prev varint | length varint | size varint | frames varint |
//	| [created-prev varint unless 0x10] | [key str if 0x01]                |
//	| [sections if 0x20: count uvar, (kind byte, off varint, size varint,  |
//	|   length varint)...]                                                 |
//
// flags: 0x01 the key is stored (else derived: Key(prefix, kind, base)),
// 0x02 kind as a string, 0x04 topic, 0x08 queue id, 0x10 zero Created,
// 0x20 sections (Object.Sections; kind 3 queue index, 4 key index). A
// string is a uvarint length and its bytes.
//
// Versions: a delta, root or shard holding an object with sections is
// written as format version 2 (the byte after the magic); one without is
// version 1, byte for byte as before sections, so buckets that never
// held sections stay readable by older binaries. This build reads both
// and refuses flag 0x20 in version 1; older builds refuse version 2 (a
// bucket written with sections is not readable by a binary from before
// them).
//
// Root (snap/<seq>), uncompressed:
//
//	| SMQR | 1|2 | seq uvar | epoch uvar | updated varint |
//	| expired: count uvar, (from varint, to varint)...  |
//	| shards: count uvar, (lo varint, objects uvar, name str)... | CRC-32C |
//
// Shard i covers bases [lo_i, lo_i+1) (the first from MinInt64, the last
// to MaxInt64); name is relative to meta/manifest/. Shard (shard/...):
// zstd (with its checksum) of
//
//	| SMQS | 1|2 | seq uvar | lo varint | count uvar | objects... | CRC-32C |
//
// with the objects in Manifest order (kind, topic, queue, base, key).
//
// # Migration
//
// A bucket with only a format-0 meta/manifest.json is read as that file
// (streamed, any size: the 256 MiB cap is gone) by every reader. The first
// Uploader that may write (at Run if Config.Fence allows, else before its
// first commit) writes it as the snapshot at its Version, without its
// consumequeue objects, then deletes those objects and manifest.json (each
// under the fence). Readers prefer the new format as soon as a root or
// delta exists; a reader that lists before the snapshot and reads after
// the delete starts over.
//
// # Fencing
//
// Config.Fence, if set, is asked before every bucket write the Uploader
// issues: each object PUT attempt, each manifest delta, shard, root and
// collection delete, and each delete of DeleteObjects. While it returns an
// error, or an epoch older than the manifest holds, nothing is written:
// uploads and
// the committer back off and ask again (logged once when the answer
// changes), Trim and DeleteObjects return the error. The epoch Fence
// returns is stored in every delta and root written under it
// (Manifest.Epoch), so a reader can tell which lease holder wrote it, and
// in the keys of the objects it uploads.
//
// Config.ValidFor (the lease's remaining validity) bounds every one of
// those writes: its context ends when the lease may lapse, so a holder
// never has a write in progress once a successor may hold the lease. A
// request the server received before that may still be applied after it.
// Such a late write changes nothing a newer holder's readers see: an
// object PUT goes to a key of the old epoch (no listed object of the new
// one); a delta lands either before the new holder's claim (Claim, and
// ClaimManifest before a broker decides where its log continues: an empty
// delta under the new epoch, written before anything is uploaded or
// acknowledged), and is then part of the log the new holder reads and
// continues, or after it, and is then ignored by every reader (an older
// epoch than the manifest holds); a snapshot root or shard of the old
// holder has its own sequence numbers and describes the log as of them; a
// delete by retention removes only objects a committed delta had already
// unlisted (DeleteObjects runs after Trim's commit, which a deposed holder
// gets only while its lease is valid). What remains is clock drift: the
// margin between a holder's validity and a successor's takeover (a fifth
// of the TTL, offsets.LeaseMargin) must exceed how far the two monotonic
// clocks drift apart in one TTL.
//
// # Memory
//
// Nothing is kept per pending segment beyond its Segment and, once tried,
// a parked deadline. A worker holds one segment: it opens it, encodes it
// frame by frame (segfile, bounded by the frame size and the shared zstd
// encoders) into a spool and closes the source before the first PUT, so a
// segment the source builds on demand (Length -1, e.g. a queue index) is
// released while the object is retried. With Config.SpoolDir the spool is
// a temporary file, streamed to Put as an io.ReaderAt (providers read the
// parts of a multipart upload from it, without buffering the object), and
// removed when the upload succeeds, is parked, or Run stops; New removes
// those a crashed process left. Without SpoolDir the encoded object is held
// in memory while it is retried (tests and tools).
//
// # Errors
//
// A slow, throttling or missing bucket delays tiering and never drops a
// segment. Errors tier.IsRetryable accepts (and per-attempt timeouts) are
// retried with jittered exponential backoff, without limit; other
// errors are retried Config.MaxHardAttempts times, then the segment is
// parked for Config.MaxBackoff and tried again on a later scan.
//
// # Goroutines
//
// Run starts Config.Concurrency upload workers and one manifest committer,
// and returns only after all of them have exited.
package upload
