// Package compaction keeps compacted topics (cleanup.policy=COMPACTION) in
// the bucket: the latest record of every key, for ever, and nothing the
// newer records of a key have replaced.
//
// # What it owns
//
//   - Generations: per compacted queue, one object in the bucket holding
//     the records it keeps below a point P (every queue offset below P is
//     covered: a record not in the generation was replaced, or expired),
//     listed in the manifest (kind "compacted", the queue's topic and id,
//     Base = P) with the usual fencing. Records keep their bytes, queue
//     offsets, commitlog offsets and msgIds: queue offsets below P become
//     sparse, as in RocketMQ's and Kafka's compacted topics.
//   - The Reader, which serves every read below a queue's point from its
//     generation: pulls and POP (Get: NextBeginOffset is the next kept
//     offset, so a consumer never pulls an empty stretch), the queue's min
//     (Min), lookups by msgId (ReadRecord) and by key (QueryByKey), and by
//     time (OffsetAtTime).
//   - The Compactor, one goroutine under the lease (a master): every
//     Config.Interval it rebuilds the generation of each compacted queue
//     with at least Config.MinOffsets uploaded offsets past its point, and
//     at least as many as its generation keeps (a round rewrites the whole
//     generation: this bounds the rewriting to about two records written
//     per new one), or Config.MaxDelay after the queue's last round. It
//     never runs on the send path and reads only what is uploaded.
//
// # The rule
//
// The key of a record is its whole KEYS property. A keyed record is kept
// while no later record of its queue has the same key; an empty body is a
// tombstone, kept until it was stored longer ago than
// Config.TombstoneRetention and then dropped with its key. A record
// without a key is kept while its topic's retention keeps it (its
// retention.time, else STRATAMQ_RETENTION; unlimited by default).
// Producers send one key to one queue (a queue selector by key), as
// RocketMQ's compaction requires: each queue is compacted on its own.
//
// # A round, and its order of effects
//
//  1. Read the records [old point, new point) through the store (local
//     segments or the bucket), spool them to a temporary file and note the
//     latest offset of each key among them. The new point is the queue's
//     next offset at the end of the newest uploaded commitlog object.
//  2. Write the new generation: the old generation's records no spooled
//     record replaces, then the spooled records that are their key's
//     latest, dropping expired tombstones and keyless records.
//  3. PUT it under compacted/<topic>/<queue>/<20-digit point>.<epoch>.cmp
//     (fenced, bounded by the lease's validity: a deposed holder's late
//     PUT lands under its own epoch's key, which no manifest lists).
//  4. One manifest delta lists it and unlists the old one
//     (upload.Uploader.Replace). Only now do reads below the new point go
//     to it, and only now may retention count the segments below it as
//     covered.
//  5. The old generation is deleted Config.Grace later (a slave between
//     manifest reloads may still read it; a reader that finds it gone
//     reads the listing again), if the manifest read from the bucket then
//     does not list it. A crash before step 4, or a listing that failed,
//     leaves an unlisted object: every Grace the compactor lists
//     compacted/ and dooms the objects the manifest does not list, which
//     go Grace later if still unlisted. A key is never deleted while the
//     manifest lists it (a delta that landed although its commit reported
//     an error; a later round at the same point and epoch).
//
// Step 4 is conditional: the delta is written only if the queue's listed
// generation is still the one the round merged, and only if the topic was
// not deleted during the round (DropTopic, which the broker's topic
// deletion calls, is serialized with it): a deleted topic's records never
// come back.
//
// A crash at any point leaves either the old generation listed (and the
// segments it needs, which retention keeps while their spans reach past
// the old point) or the new one, complete.
//
// # Format
//
// A generation is a segfile object (zstd frames of 256 KiB with their
// checksums, footer), whose logical stream is
//
//	records | entries | keys | trailer
//
//	records  the kept records, whole V1 records in queue order
//	entries  per record, 44 bytes big-endian: queue offset i64, commitlog
//	         offset i64, store time i64 (unix ms), tags code i64, position
//	         in the stream i64, size u32
//	keys     per distinct KEYS value (space-separated; a record's first 31)
//	         and UNIQ_KEY of each record, 12 bytes: FNV-1a 64 of the value
//	         u64, entry index u32; sorted by hash, then entry
//	trailer  64 bytes: "SMQCMP01", point i64, first kept offset i64 (the
//	         point when none), where the entries start i64, entries u32,
//	         keys u32, 16 zero bytes, CRC-32C of the entries, keys and the
//	         trailer's first 56 bytes u32, 4 zero bytes
//
// A reader reads the trailer and the tables (two ranged reads through the
// cold reader's frame cache), checks them against the manifest entry and
// the checksum, and keeps them decoded (in Go, 56 bytes per kept record and
// 16 per lookup value), at most MaxTableBytes (256 MiB) of tables per
// Reader: past that the least recently used tables are dropped and read
// again when next needed.
// Each record it returns is checked against its entry (queue and
// commitlog offset). Lookups by key compare the record's keys, so a hash
// collision never returns a wrong record.
//
// # What it must never do
//
//   - import package broker, or reach the broker but through Store, Topics,
//     Log and the bucket;
//   - claim an offset below a point it did not read (a round that cannot
//     read up to its point fails, and the old generation stays);
//   - write to the bucket without asking Fence first, or hold a write
//     past the lease's validity.
package compaction
