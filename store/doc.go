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
// record, so a sealed segment's length is its file size (readers still skip
// a filler — TOTALSIZE=remaining bytes, MAGIC 0xCBD43194 — written by
// others). Global offsets are forever: message ids carry them.
//
// Zeroed tail (Options.ZeroAhead: default 8 MiB in FlushSync, off in
// FlushAsync; negative disables): the active segment's file may be longer
// than its records. A background goroutine keeps up to ZeroAhead bytes of
// zeros after the last record (never past SegmentSize-MaxMessageSize), one
// 256 KiB chunk per round, woken by the writer when at least a chunk (or
// half of ZeroAhead) is missing. Records then overwrite cached pages of
// allocated blocks: the pwrite does not grow the file or allocate a page
// per 4 KiB on the writer's goroutine. In FlushSync the zeros are also
// fdatasynced, so the next group commit's fdatasync commits no new size
// or extents (on ext4 on virtio that halves its latency); zeros cost as
// much disk bandwidth as the records there, so the filler idles while the
// average commitlog fdatasync covers more than 128 KiB (large group
// commits), where that saving is small. In FlushAsync the zeros are not
// synced: the flusher writes out those still dirty and not yet
// overwritten, at most ZeroAhead per FlushInterval. A writer that catches
// up writes on past the zeros; it never waits for them. The filler writes
// under mu, only after the last record, and holds clSyncMu across its write
// and fdatasync, so a group commit's fdatasync never writes zeros out. Before
// a segment is sealed (roll, SealActive, Close) its file is cut to its
// records and fdatasynced, before the next segment is created: only the last
// segment can have a zero tail after a crash, and recovery cuts it as the
// clean end of the log (logged at info). Readers, LocalSegments and
// SealedSegments always use the records' length. The filler never eats into
// MinFreeBytes; ENOSPC while filling cuts its zeros back and pauses it for a
// second (not sticky); its fdatasync failing for space is a commitlog
// fdatasync failure (see Flush policy: it could be the lost writeback of
// records); any other error of its write, cut or fdatasync is sticky. Bytes
// of a Put that land in zeros need no free space (checkSpaceLocked).
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
// A topic must be one plain path element (names.go: not empty, "." or "..",
// no '/', '\' or NUL); anything else is ErrInvalidTopic from Put and
// DeleteTopic. A record read back from the log with such a topic (recovery,
// AppendRaw) stays in the commitlog without a consumequeue entry, and
// recovery neither opens nor removes a directory under consumequeue/ whose
// name is not a valid topic.
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
// starts past 0). A queue's entries below its coldEnd are not local: they
// come from the cold index (see Reclaim, and Restore for a queue restored
// from the tier, whose first file starts at its coldEnd). Entries are built by dispatch — one code path for Put,
// AppendRaw (replication) and recovery — and are visible to Get as soon as
// the writer has written the record; new entries are kept in memory and
// written to their files by the flush service.
//
// Consumequeue files are opened lazily, on first read, write, sync or cut
// (recovery only lists and stats them, and opens a queue's first file to
// find its min), and closed when idle: an LRU of at most
// Options.MaxOpenQueueFiles (default 1024) descriptors; a file in use (a
// pread, the flusher's write) is never closed under its user, so the bound
// may be exceeded briefly by the files in use. A file removed meanwhile is
// closed by its last user and never reopened by path, so a read never uses
// a closed descriptor or a newer file of the same name.
//
// A truncation (dispatch replacing entries, recovery's trim) changes only
// memory: the files past the new end leave the queue's file list and the
// flusher removes or cuts them on its next round, before it writes there.
// Readers plan a read under the queue's lock (which file ranges; pending
// entries are copied), pread without it, and plan again when a truncation
// or DeleteTopic happened meanwhile (a per-queue generation).
//
// A Put that would create a topic past Options.MaxTopics, or a queue past
// MaxQueuesPerTopic in its topic, fails with ErrQueueLimit before anything
// is written (admitQueue); queues that exist are never refused.
//
// Get scans at most max(800, MaxMsgs) entries (RocketMQ's 16,000 bytes of
// consumequeue per pull) and returns at most MaxGetMsgs (1024) records:
// with a filter that matches nothing, NextBeginOffset moves past the
// scanned entries, so each pull costs a bounded read and makes progress.
// GetRequest.Match (SQL92 filters) is asked of each record's properties:
// such a Get reads the records the tags Filter passes in rounds and keeps
// those Match takes, within the same limits (getmatch.go).
// GetRequest.MaxPhys (a sync_master's bound: what a slave holds) ends the
// queue, for that Get, at the first record that ends past it; a queue's
// records are in log order, so VisibleMaxQueueOffset finds that point by
// galloping back from the tail and bisecting.
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
//     Close returns it. Running out of space or quota (ENOSPC, EDQUOT) is
//     never sticky (diskfull.go): it puts the store in a disk-full state,
//     logged once when it starts and once when it ends, in which Put
//     returns ErrDiskFull with a remark naming the free space and the
//     reserve. Put refuses so while free space is below MinFreeBytes
//     (default 5% of the volume, at most 256 MiB), after its own write
//     (cut off the file) or segment roll failed for space, and while flush
//     work that failed for space is owed: a consumequeue write, create,
//     directory or sync, a directory sync, the checkpoint or restore-state
//     write, a commitlog or zero-filler fdatasync. The failed work is
//     remembered (files and directories not yet synced, the checkpoint
//     owed) and redone by every later flush round; the first round that
//     does all of it ends the refusal, and the state ends once a write
//     succeeds or a round finds room above the reserve. Recovery, out of
//     space at Open, opens the store disk full. A Put bigger than a segment
//     may have stored its first records when a later roll fails for
//     space: they are whole records, the Put fails, and a retry stores
//     them again (at least once).
//   - fdatasync failing for space on the commitlog ("fsyncgate"): Linux may
//     mark the pages of a failed writeback clean (or drop them), so a later
//     fdatasync that succeeds proves nothing about them. The store never
//     trusts one: after such a failure (of the group commit, the flusher,
//     the zero-filler or a seal), flushed stays where it was and writes are
//     refused; the next sync first re-writes [flushed, target) from the
//     segment files (dirtying the pages again), fdatasyncs, and then
//     verifies that the range reads back as whole valid records (magic,
//     sizes, PHYSICALOFFSET, body CRC) ending exactly at target before
//     flushed moves and FlushSync Puts are acknowledged (meanwhile they
//     get ErrFlushTimeout: written, maybe durable later). Records whose
//     bytes the kernel dropped fail that check: a sticky ErrCorrupt, never
//     a false acknowledgement of durability (in FlushAsync those records
//     were acknowledged: the loss is the kernel's, and is reported). The
//     check cannot see a dropped page that lies wholly inside one record's
//     topic or properties (no CRC covers them); the uploader reads sealed
//     segments without waiting for the rewrite. A
//     consumequeue fdatasync failing for space is repaired from the
//     commitlog instead: every entry of the records after the last
//     checkpoint is written again at its place before the files are synced
//     and the next checkpoint names them. A seal's fdatasync and the group
//     commit's are ordered (trimSyncing) so that an error reported to one
//     of two concurrent callers is seen.
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
// Every reader of commitlog bytes (Get, ReadRecord, ReadLog — the raw log
// for replication, never past MaxPhysOffset —, the store-time lookups
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
// before deleting the objects. Consumequeue files wholly below the min go
// (see Reclaim) when the store has a tier.
//
// RaiseQueueMins (queuemin.go) raises single queues' mins above the floor
// (the broker's per-topic retention): durable in <Dir>/queuemins
// ("SMQQMN01" n:u32 n × (topicLen:u16 topic id:i32 min:i64) crc32:u32,
// temp + fsync + rename), re-applied at Open after the floor, dropped for a
// deleted topic. QueueOffsetAtTime and QueueOffsetAtPhys are the lower
// bounds (first record stored at or after a time, at or above a commitlog
// offset) it is given.
//
// Recovery accepts a commitlog whose first segment starts above 0 (or that
// holds only the active segment, or nothing while the checkpoint says the
// log reached some offset: the log continues there, offsets are never
// reused). Consumequeue entries below the first local segment are valid; a
// rebuild starts at the first local segment and keeps the entries a queue
// still has (entries of dropped records that were lost cannot be rebuilt
// locally). A queue's missing files below its coldEnd are not a loss:
// recovery neither rebuilds nor trims below it.
//
// # Reclaim: local consumequeue files of dropped segments
//
// With a tier (Options.Cold and Options.ColdIndex), local consumequeue
// data does not grow with history (reclaim.go). After every DropSegment
// (and after SetMinPhysOffset, RaiseQueueMins, at Open, and in a flush
// round when an earlier reclaim failed) each queue's files are examined
// oldest first: a file wholly written whose entries all point below
// LocalMinPhysOffset (every record in a dropped segment: the broker drops
// a segment only once it is uploaded with its queue index and its key
// index, so the cold index holds every one of those entries), or
// that lies wholly below the queue's min, is reclaimed, up to the first
// file that is not. The queue's coldEnd rises to the end of the last
// reclaimed file: entries below it are read through the cold index, above
// it from the local files, exactly as for a restored queue (below). The
// check costs no I/O for files the flusher wrote (it remembers the end of
// each file's last entry); a file listed at Open is read backwards once.
// A partly filled last file can go too (an idle queue): the next entry
// starts a file named by coldEnd.
//
// Order, for kill -9 at any point: in memory, under the queue's lock,
// coldEnd rises, the queue's generation moves (a reader that planned to
// read a reclaimed file plans again, and goes cold) and the files leave
// the queue's file list; then <Dir>/restored, the cold state (below),
// with every queue's coldEnd and min, is written (temp + fsync + rename +
// dir fsync); only then are the files closed (at their last reader's
// release) and removed, their directories synced by the next flush round.
// A crash before the state is durable leaves the files and the old
// coldEnd; after it, Open takes every file wholly below a queue's coldEnd
// off the queue and removes it (the state's min and coldEnd stand, the
// local files above serve the rest). A state write that fails is owed:
// the flusher writes it (out of space: the disk-full rules) before any
// file goes. Without a tier nothing is reclaimed and no state is written.
//
// At steady state a queue keeps locally the entries of the local
// retention plus at most one file (CQEntriesPerFile entries, the file
// still being filled when its oldest entries' segments were dropped), so
// local consumequeue bytes and descriptors depend on local retention and
// the number of queues, not on history (BenchmarkReclaimSteadyState).
//
// # Segment index blobs
//
// BuildSegmentIndex(base) turns a sealed local segment into a blob the
// broker uploads next to it: the consumequeue entries of every record in
// the segment (found with the recovery scanner), grouped per queue, plus
// one zero-count directory entry for every other queue the store knows,
// carrying that queue's next offset at the end of the segment. The blob is
// deterministic for a segment (sorted directory; an entry's tags code comes
// from the local consumequeue when it holds the entry, else TagsCode; a
// topic deleted meanwhile drops out). All integers big-endian:
//
//	header, SegmentIndexHeaderSize = 40 bytes
//	 0  "SMQSIX01"
//	 8  i64  segment base
//	16  i64  segment length (bytes)
//	24  u32  N, directory entries
//	28  u32  D, directory bytes
//	32  u32  E, entries
//	36  u32  CRC32-IEEE of bytes [0,36) followed by the directory
//	directory, D bytes: N entries sorted by topic (bytes), then queue id
//	    u8 topicLen, topic, i32 queueId,
//	    i64 firstOffset  queue offset of its first entry; with count 0: the
//	                     queue's next offset at the end of the segment
//	    u32 count        entries (gaps in the queue are blank entries)
//	    u32 firstEntry   index of its first entry in the entry section
//	    u32 crc          CRC32-IEEE of its count*20 entry bytes
//	entries, E*20 bytes at 40+D: per directory entry, in directory order,
//	    its entries in queue order, in the consumequeue layout above
//
// A queue's entries sit at 40+D+20*firstEntry, so a reader with ranged
// reads can fetch the header, then the directory, then one queue's
// entries. DecodeSegmentIndex verifies a whole blob;
// DecodeSegmentIndexDirectory only the header and directory (a prefix of
// 40+D bytes is enough).
//
// WriteSegmentIndex(base, f) builds the blob into f (io.ReaderAt and
// io.WriterAt: the broker gives a file in the uploader's spool dir), in
// memory bounded by the number of queues plus fixed buffers (1 MiB to read
// the log, 256 KiB of entry write buffers, 128 KiB to read entries back),
// not by the segment: pass 1 scans the segment's records and keeps, per
// queue, only its run [first, end) (a record at queue offset q ends the run
// at q+1; one below first restarts it there), which lays out the
// directory; pass 2 scans again and writes every entry, and the blank
// entries of gaps, at its place (later writes to an offset replace
// earlier ones, as dispatch does; nothing relies on f being zeroed); then
// each queue's entries are read back in chunks to take the local
// consumequeue's tags codes and to compute the queue's CRC, and the
// header and directory are written last. BuildSegmentIndex does the same
// in memory and returns the bytes.
//
// # Key index
//
// Query by key (QueryByKey: RocketMQ's QUERY_MESSAGE): for every
// dispatched record (Put and AppendRaw alike; not prepared or rolled-back
// transaction records) the writer adds, while it holds mu, one entry per
// non-empty space-separated value of its KEYS property and one for its
// UNIQ_KEY: hash = keyHash(topic, key) (a 64-bit multiply-xorshift over
// the topic, '#' and the key, eight bytes at a time, folded to 32 bits;
// part of the format), its commitlog offset and
// its store time. The active segment's entries live in memory (24 bytes
// each, in 4096-entry chunks readers scan without a lock); a segment also
// seals once they reach SegmentSize bytes, so that memory is bounded by
// the segment size. When a segment seals, the key index goroutine sorts
// its entries and writes <Dir>/keyindex/<20-digit base>.kix (temp + fsync
// + rename + dir fsync); until then queries scan the entries in memory. A
// sealed segment without a valid file (a crash, a file from before this
// index, a header that does not match the segment's length after
// recovery) is rebuilt from its records by the same goroutine after Open;
// a query or OpenKeyIndex of it waits for that. Files of segments that are
// no longer local are removed at Open; DropSegment removes the segment's
// file. Write failures are logged, retried every 3 s with the entries kept
// in memory, and reported by Close.
//
// The file (big-endian), also what the broker uploads with its segment (a
// section of the segment's object; an object of its own, commitlog/<base>.kix,
// in buckets written before sections), read back by ranged reads through
// Options.ColdKeys:
//
//	 0       8               16              24              32              40      44      48      52     56
//	+-------+---------------+---------------+---------------+---------------+-------+-------+-------+------+
//	|"SMQKIX01"             | segment base  | segment length| first store ts| last store ts | N     | F     | CRC   | 0    |
//	+-------+---------------+---------------+---------------+---------------+-------+-------+-------+------+
//	header, KeyIndexHeaderSize = 56 bytes: N entries, F fanout bits
//	(2^F buckets, about 32 entries each, F <= 24), CRC32-IEEE of bytes [0,48)
//
//	56: fanout, (2^F + 1) slots of 8 bytes: slot b = u32 index of the first
//	    entry of bucket b, u32 CRC32-IEEE of bucket b's entry bytes; the last
//	    slot holds N (its CRC is 0)
//	56 + (2^F+1)*8: N entries of 20 bytes, sorted by hash, then offset:
//	    u32 hash | i64 commitlog offset | i64 store time (unix ms)
//
// A key's bucket is the top F bits of its hash. A lookup reads the header,
// the two slots of its bucket and the bucket's entries (checked against the
// slot's CRC; a bucket of more than 3276 entries, one hot key, is
// binary-searched entry by entry and read backwards in chunks of 1024
// instead, unchecked): three small ranged reads, which cold lookups serve
// from the tier's frame cache after the first.
//
// QueryByKey walks segments newest first (the active one, the local ones,
// then the tier's below the first local segment, as ColdKeys lists them),
// skips a segment whose store-time range misses [Begin, End] or that lies
// below the retention floor (a tier segment whose KeyIndexRef.StoredBy is
// before Begin without reading anything), and reads each candidate record (entries of a
// bucket newest first) to compare its topic and keys, so hash collisions
// never reach the result. It stops at MaxNum matches (or MaxBytes) and
// returns them in commitlog order. A tier failure is ErrColdRead.
//
// # Restore on an empty disk, cold queue index
//
// With Options.Restore and a commitlog directory holding no segment, Open
// restores instead of recovering: the new log starts at
// Restore.CommitLogStart (its first, empty segment is named by it: offsets
// are never reused), the floor is Restore.Floor, and every queue gets
// min = the checkpoint's Min and max = the larger of the checkpoint's Max
// and what the index blobs of the segments from the one holding
// Restore.IndexedFrom on say (only the newest few of those are read: the
// zero-count directory entries make the newest blob alone enough). Queues
// the checkpoint did not know start at 0. Leftover consumequeues and
// checkpoint are removed. The decision is kept in <Dir>/restored
// (temp + fsync + rename):
//
//	"SMQRST02" logStart:i64 floor:i64 n:u32
//	n × (topicLen:u16 topic id:i32 min:i64 coldEnd:i64)
//	m:u32 m × (topicLen:u16 topic id:i32 next:i64) crc32:u32
//
// (the m rows are the tombstones of deleted queues, below; "SMQRST01"
// files, written before them, end after the n rows and are still read)
// written before the first segment, whose durable name marks the restore
// done (a crash before it restores again). Every later Open reads it; a
// damaged file fails Open. SetMinPhysOffset, RaiseQueueMins and
// DeleteTopic rewrite it (mins advanced, deleted topics gone) before the
// checkpoint. The same file is the cold state of every store that
// reclaimed consumequeue files (see Reclaim): a row per queue with a cold
// range (coldEnd > 0: restored, or reclaimed), logStart 0 when the store
// was never restored; reclaim rewrites it whenever a coldEnd rises, and
// Open applies it to every queue it names.
//
// A queue's entries below its coldEnd (the max a restored queue was
// restored with, raised by every reclaim) are read through
// Options.ColdIndex by Get, QueueEntry, EarliestStoreTime, OffsetByTime,
// QueueOffsetAtTime/AtPhys, VisibleMaxQueueOffset and SetMinPhysOffset;
// the records then through Options.Cold as for any dropped segment. Each
// read goes cold or local by the coldEnd it sees when it plans. Nothing is
// read at Open. The segment holding queue offset x is the first indexed
// segment (below the local log's start, listed once and again when a drop
// raised that start; above the floor) whose directory says the queue's
// next offset at its end is above x: a binary search, one directory per
// probe, so a cold lookup costs O(log #segments) blob reads.
// Directories and 4096-entry blocks of one queue's entries are cached in an
// LRU bounded by ColdIndexCacheBytes; the probe that lands in the right
// segment caches the block it needs. A cold Get reads block after block,
// then on into the local consumequeue, with the limits of a local Get, so
// its result is the one the original store gave. ReadRecord of a cold
// record near the tier's end reads its size first (the restored log
// starts past the tier, so [tier end, log start) does not exist). No indexed
// segment for x (blobs never uploaded): OffsetFoundNull with
// NextBeginOffset = coldEnd. Offsets before a queue's first entry in a
// segment are blanks only when the segment listed before it ends where it
// starts (or it is the first listed and holds the floor): after a gap in
// the list (a segment uploaded but not listed yet, as when manifest deltas
// list segment N+1 before N, or never listed) they may be records of the
// missing segment, so a read there is OffsetFoundNull with
// NextBeginOffset = the queue's first offset after the gap (at most
// coldEnd), never a record of another offset; the lookup lists the
// segments again once first, so a segment listed since is found. Local consumequeue files of such a queue
// start at coldEnd: the first file is named by coldEnd*20 and ends at the
// next multiple of CQEntriesPerFile (it is never listed by
// SealedQueueFiles).
//
// # Replica restore: continuing the master's log
//
// With Restore.Replica the store is a slave that continues the master's
// log byte for byte, fed by AppendRaw (the HA stream), instead of a
// restored master that continues it with new offsets. It starts at U =
// Restore.CommitLogStart, the end of the last uploaded segment (the base of
// the first one not in the bucket), exactly: its first, empty segment is
// named by U, a leftover checkpoint never raises it, and nothing of [0, U)
// is downloaded: it is served through Options.Cold and Options.ColdIndex as
// for any restore. Every queue's next offset (its coldEnd) is what the
// master's consumequeue held at U: the End of its entry in the directory of
// the index blob of the segment ending at U, the one blob read at Open
// (every queue the master knew is in that directory, zero-count entries
// carrying the next offset of queues without a record in the segment).
// The checkpoint's Max is never used (the checkpoint is later than U);
// Restore.Queues gives only each queue's Min. A queue created after U is
// unknown until its first streamed record. U > 0 without Cold and
// ColdIndex, without a blob below U, or with a newest blob below U that
// does not end at U (missing blob, U inside a segment) fails Open. The
// restored state (<Dir>/restored, format unchanged: logStart = U, each
// queue's coldEnd) is all a restart needs; recovery does the rest as for
// any store.
//
// AppendRaw(U, …) of the master's records then writes them verbatim and
// dispatches each at its own QUEUEOFFSET: one equal to the queue's next
// offset appends, one ahead of it keeps the master's numbering (a queue
// with no entry yet simply starts there; one whose entries are all written
// to its files takes the gap as a hole, see Jumps; otherwise blank entries
// fill it),
// and one below a restored queue's coldEnd (the tier's offsets: the replica
// was restored at the wrong point) fails the whole call with
// ErrOffsetMismatch before anything is written. The first AppendRaw on an
// empty restored log must come at exactly U (the log ends there).
//
// # Jumps: a promoted copy numbering a queue past the bucket's history
//
// ResumeQueues numbers a queue from at least a given offset (a promoted
// slave: past what the bucket checkpoint says may have been handed out,
// whether or not this copy holds records of the queue). A queue with no
// local entry starts there cold, as a restore does. One with local entries
// below it keeps them and jumps: the log and every queue's entries are
// made durable first, then the queue's jump (the log's end at the time,
// and the offset) is recorded in <Dir>/restored (format 3, written only
// while some queue has a jump; format 2 otherwise). The offsets between
// its last entry and the jump are a hole: no entry, no bytes, a gap before
// a file that starts at the jump (a flush starts a file at the offset it
// writes whenever that offset is past the end of the last file), which a
// read is sent past in one step (OffsetFoundNull, NextBeginOffset = the
// jump), never blank entries to scan (a reservation's 65,536 offsets in
// every queue would be 1.3 MB of blanks each). Searches by time and by
// visibility judge a probe in a hole by the record after it.
//
// Open re-applies a jump (the queue ends at least there); recovery's trim
// of entries past the log's end stops at it as long as only entries at or
// after it go, while a log cut below it (CutLog: the copy follows a master
// that never had those records) drops it with the entries, and so does a
// replicated record numbered below it (dispatch: a slave follows its
// master's numbering); a dropped jump is removed from <Dir>/restored by
// the next flush. A segment index built for a segment ending at or past
// the jump's log position gives the queue's next offset as at least the
// jump (nextAt), so a slave restored there continues the same numbering.
// Followers fed a jumped master's records (AppendRaw) keep the same hole
// when nothing of the queue is pending, else fill it with blank entries.
//
// A replica whose disk lags the bucket (its log, after recovery, ends at
// L < U: it was down while the master uploaded [L, U)) skips the gap the
// same way: Open with Restore.Replica at U closes what recovery opened,
// removes every local commitlog segment (all of them lie below U, so in
// the tier), and opens again, which finds no segment and restores at U
// (the leftover consumequeues and checkpoint are removed by that restore).
// A crash in between leaves a log that still lags, or none, and the next
// Open does the same. A replica whose log reaches U (L >= U) keeps it and
// Restore is ignored, as always with a commitlog. A running replica that
// learns it is behind (the master no longer has [L, U) locally) closes the
// store and opens it again with the new restore point; there is no
// in-place skip.
//
// A queue's offsets grow with commitlog offsets across segments, across
// deletions too: DeleteTopic leaves a tombstone per queue (tombstone.go)
// with the offset the queue reached, kept in <Dir>/restored and in the
// bucket's checkpoint (Restore.Deleted), and a queue created again under
// the same name continues there. So no (topic, queue, offset) names two
// messages in the bucket's queue indexes, the cold index's search by
// offset never lands on a deleted incarnation's entry, and a restore
// drops the queues the tier still describes only below their tombstone.
//
// # Offset reservation
//
// SetReservation bounds the offsets the writer hands out (reservation.go):
// a write round refuses a request (ErrReserved, not sticky) whose records
// would end past Reservation.Log or give a queue an offset at or past its
// mark (Queues, else Default). The broker sets it from each bucket
// checkpoint it manages to write, so a broker restored on an empty disk
// after an unclean loss, which starts past those marks, never reuses an
// offset, even while checkpoints fail. A refused write waits up to
// Reservation.Wait for the next reservation (the checkpoint its refusal
// asked for through OnNear) and tries again; Reservation.Fail (the
// checkpoint failed) refuses it at once. Wanted tells the broker what
// refused writes needed, so the next reservation covers a request larger
// than the usual headroom. FlushedPhysOffset is the durable end of the
// log, what the checkpoint records as its high-water mark.
//
// # Lock order
//
//	dropMu -> flushMu -> mu (writer) -> qmu -> cqueue.mu
//	flushMu -> clSyncMu -> mu (the zero-filler only)
//
// diskFull.mu is a leaf (taken under mu, clSyncMu and flushMu).
//
// Puts reach mu through a commit queue (commitQueue.mu is a leaf, never
// held with mu): the first Put to arrive while no write is in progress
// leads; Puts arriving meanwhile queue, and the leader's next round encodes
// all of them, in queue order, into one buffer written with one pwrite and
// dispatched in one pass, then wakes each with its own result or error.
//
// mu is held across the commitlog write(2) but never across an fsync
// (except the directory sync that makes a new segment's name durable, and
// the fdatasync after cutting a zero tail before a seal).
// cqueue.mu is never held across I/O: readers (Get, QueueEntry,
// OffsetByTime, BuildSegmentIndex, SetMinPhysOffset's search) hold it only
// to plan a read, the flusher only to copy pending entries and to publish
// what it wrote, so the writer's dispatch, which takes each queue's lock
// under mu, never waits for a pread or a consumequeue write. The writer
// itself reads a stored entry only when a replicated or recovered record
// repeats a queue offset, without the queue's lock. fdCache.mu (open
// consumequeue files) is a leaf, never held across I/O.
// Cold index reads (ColdIndex) run under no store lock; its cache locks
// are leaves. keyIndex.mu is a leaf (taken under mu by the writer, never
// held across I/O); the active segment's key entries are written under
// mu and read without a lock. Readers (Get, ReadRecord) take no store-wide lock: the segment table is an
// atomically swapped immutable slice; DropSegment swaps a table without the
// segment, marks it dropped, and only then closes and removes its file.
package store
