// Package store is StrataMQ's local message store: one append-only
// commitlog shared by all topics, a consumequeue per topic/queue that indexes
// it, a flush service, and crash recovery. It imports only infra; it knows
// nothing about buckets: the tier package moves sealed segments, as opaque
// bytes, through SealedSegments, and serves the bytes of dropped segments
// back through the small ColdReader interface declared here (Options.Cold).
//
// # Commitlog
//
// The commitlog lives in <Dir>/commitlog/ as segments named by the 20-digit,
// zero-padded global offset of their first byte:
//
//	00000000000000000000   first segment, offsets [0, len0)
//	00000000000134217728   a segment that starts at 128 MiB (134217728)
//	00000000000134250000   a segment after one sealed early at 32,272 bytes
//
// Segments may differ in length: one is sealed when the next record does not
// fit in SegmentSize, by SealActive (age, shutdown; a no-op on an empty or
// absent active segment), and on every Open (new writes always start a new
// segment, so a sealed segment never grows). LocalSegments lists them all
// (SegmentInfo: Base, Length, Path, Sealed, Created, First/LastStoreTime);
// SealedSegments lists the sealed, non-empty ones, for the uploader. The
// store therefore locates an offset with a sorted segment table, never with
// offset/SegmentSize. A record never spans segments; instead of an 8-byte
// filler the writer simply starts the next segment at the end of the last
// record, so a segment's length is its file size (readers still skip a
// filler — TOTALSIZE=remaining bytes, MAGIC 0xCBD43194 — written by others).
// Global offsets are forever: message ids carry them.
//
// Each record is RocketMQ's MESSAGE_VERSION_V1 stored message, byte for byte
// what a PULL_MESSAGE body carries (big-endian; IPv4 hosts shown, an IPv6
// host takes 16+4 bytes and sets SysFlag 0x10 born / 0x20 store):
//
//	 0       4       8       12      16      20              28
//	+-------+-------+-------+-------+-------+---------------+---------------+
//	| TOTAL | MAGIC |BODYCRC|QUEUEID| FLAG  | QUEUEOFFSET   | PHYSICALOFFSET|
//	| SIZE  |DAA320A7       |       |       | (int64)       | (int64)       |
//	+-------+-------+-------+-------+-------+---------------+---------------+
//	 36      40              48              56              64
//	+-------+---------------+-------+-------+---------------+-------+-------+
//	|SYSFLAG| BORNTIMESTAMP | BORNHOST      | STORETIMESTAMP| STOREHOST     |
//	|       | (ms)          | ip4   | port  | (ms)          | ip4   | port  |
//	+-------+---------------+-------+-------+---------------+-------+-------+
//	 72      76              84      88         88+n  89+n      89+n+t  91+n+t
//	+-------+---------------+-------+----------+-----+--------+-------+-------+
//	|RECONS.| PREPARED TX   |BODYLEN| BODY (n) |TOPIC| TOPIC  |PROPLEN| PROPS |
//	| TIMES | OFFSET        |       |          |LEN 1B| (t ≤127)| int16 | (p)   |
//	+-------+---------------+-------+----------+-----+--------+-------+-------+
//
//	TOTALSIZE = 91 + n + t + p; BODYCRC = CRC32-IEEE(body) & 0x7fffffff.
//
// The broker fills everything except QUEUEOFFSET, PHYSICALOFFSET,
// STORETIMESTAMP, STOREHOST and BODYCRC, which Put assigns. Limits: topic ≤
// 127 bytes, properties ≤ 32767 bytes, whole record ≤ MaxMessageSize
// (ErrMessageTooLarge). Transaction prepared/rollback records (SysFlag type
// 0x4/0xC) get QUEUEOFFSET 0 and no consumequeue entry.
//
// # Consumequeue
//
// <Dir>/consumequeue/<topic>/<queueId>/<20-digit start byte offset>, files of
// CQEntriesPerFile (300,000) entries of 20 bytes; queue offset n lives at
// byte n*20 of the queue, so file names are 00000000000000000000,
// 00000000000006000000, …:
//
//	0               8       12              20
//	+---------------+-------+---------------+
//	| commitlog off | size  | tags code     |
//	| (int64)       |(int32)| (int64)       |
//	+---------------+-------+---------------+
//
// An entry with size 0 is blank (before the first entry of a queue that
// starts past 0). Entries are built by dispatch — one code path for Put,
// AppendRaw (replication) and recovery — and are visible to Get as soon as
// the writer has written the record; new entries are kept in memory and
// written to their files by the flush service.
//
// # Flush policy
//
//   - FlushAsync (default): Put returns once the record is written (page
//     cache). Every FlushInterval (500 ms) the flusher fdatasyncs the
//     commitlog, writes and syncs consumequeue entries, and writes the
//     checkpoint. A process crash loses nothing; a machine crash loses at
//     most the last interval.
//   - FlushSync: group commit. Put waits until one fdatasync started after
//     its write completes; a single goroutine runs the fdatasyncs, so every
//     writer queued behind one shares it. ErrFlushTimeout after
//     SyncFlushTimeout. Consumequeues and the checkpoint follow the interval,
//     as in async mode (recovery rebuilds them from the commitlog).
//   - A write or flush error is sticky: later Puts fail with it (wrapped),
//     Close returns it. ENOSPC is the exception: the partial write is cut off
//     and Put returns ErrDiskFull; later Puts succeed once space is freed.
//     Put also refuses with ErrDiskFull while free space is below
//     MinFreeBytes.
//   - A new file's name is made durable by syncing its directory before the
//     checkpoint (or, for a commitlog segment, before the first record goes
//     in it).
//
// # Recovery
//
// <Dir>/checkpoint (temp + fsync + rename + dir fsync) records the commitlog
// offset up to which the commitlog and every consumequeue are durable, the
// retention floor (SetMinPhysOffset) and each queue's max offset at that
// point. <Dir>/abort exists while the store is open. Open scans the commitlog from the checkpoint offset (from the
// start of the local log when the checkpoint is missing or a consumequeue is
// shorter than the checkpoint says — a lost or truncated consumequeue is
// rebuilt), verifies each record (magic, size bounds, field lengths,
// PHYSICALOFFSET, body CRC), dispatches it, truncates everything after the
// last valid record (the rest of that segment and any later segment), and
// truncates consumequeue entries that point past the end. Queue offsets
// continue from the recovered consumequeues.
//
// A checkpoint that fails its CRC is ignored (full rescan of the local log;
// the retention floor is then 0 until SetMinPhysOffset is called again).
//
// # Tiered segments: cold fallback, drop, floor
//
// The logical log is always gap-free, [0, MaxPhysOffset). Its bytes live in
// three ranges:
//
//	[0, MinPhysOffset)                       gone (retention floor)
//	[MinPhysOffset, LocalMinPhysOffset)      cold: Options.Cold (the bucket)
//	[LocalMinPhysOffset, MaxPhysOffset)      local segments (LocalSegments)
//
// DropSegment(base) deletes the file of the oldest local segment once it is
// uploaded (sealed only; never the active one; refused without Options.Cold
// and out of order, so the local segments stay one contiguous suffix of the
// log). Before the file goes, the segment, every consumequeue entry of its
// records and a checkpoint past its end are made durable, so recovery never
// needs a dropped file. Dropping the last sealed segment while nothing is
// active first starts an empty active segment at the end of the log; its
// file name keeps the end across restarts (a clean Close keeps it).
//
// Every reader of commitlog bytes (Get, ReadRecord, the store-time lookups
// behind EarliestStoreTime and OffsetByTime) goes through one function: a
// range below the first local segment is read with Options.Cold.ReadAt and
// the request's context; a range crossing the cold/local boundary is split
// into a cold and a local read into the same buffer, so Get's records stay
// slices of one buffer, byte-identical to what was written. Get checks each
// record it returns (TOTALSIZE, magic, PHYSICALOFFSET against the
// consumequeue entry), so a wrong cold tier is ErrCorrupt, never garbage. A
// cold failure is ErrColdRead wrapping the reader's error (io.EOF past the
// end of the tier also matches ErrNotFound). A reader racing a drop (its
// file closed under it) retries cold. Without Options.Cold, offsets below
// the local log are ErrNotFound (Get: MESSAGE_WAS_REMOVING).
//
// SetMinPhysOffset(off) raises the retention floor (never lowers it): bytes
// below off are gone for good. Each queue's min offset advances to its first
// entry with commitlog offset >= off (binary search of the consumequeue), so
// Get below it is OFFSET_TOO_SMALL with NextBeginOffset = the new min (the
// broker's PULL_OFFSET_MOVED). The floor is in the checkpoint, durable when
// SetMinPhysOffset returns, and re-applied to every queue on Open; call it
// before deleting the objects. Consumequeue files below the min are kept.
//
// Recovery accepts a commitlog whose first segment starts above 0 (or that
// holds only the active segment, or nothing while the checkpoint says the
// log reached some offset: the log continues there, offsets are never
// reused). Consumequeue entries below the first local segment are valid; a
// rebuild starts at the first local segment and keeps the entries a queue
// still has (entries of dropped records that were lost cannot be rebuilt
// locally).
//
// # Lock order
//
//	dropMu -> flushMu -> mu (writer) -> qmu -> cqueue.mu
//	flushMu -> clSyncMu
//
// mu is held across the commitlog write(2) but never across an fsync
// (except the directory sync that makes a new segment's name durable);
// cqueue.mu is held across consumequeue preads and writes, never fsync.
// Readers (Get, ReadRecord) take no store-wide lock: the segment table is an
// atomically swapped immutable slice; DropSegment swaps a table without the
// segment, marks it dropped, and only then closes and removes its file.
package store
