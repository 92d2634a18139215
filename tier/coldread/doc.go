// Package coldread reads logical byte ranges of the commitlog (or any
// object series written by tier/upload) back from a bucket.
//
// A Reader holds a table of objects sorted by base offset (objects may
// differ in length). ReadAt finds the object holding an offset, reads its
// footer once (one small ranged GET of the tail, then kept), and fetches
// only the frames the range needs, one ranged GET per frame on demand:
//
//	ReadAt(off, p)
//	  -> object table (sort.Search on Base)
//	  -> footer (cached per object)
//	  -> frame cache (ristretto + scan window, decompressed frames) --hit--> copy
//	  -> fetches in flight (read-ahead runs and demand frames, singleflight)
//	  -> cold GET pool (semaphore) -> bucket.ReadAt
//	  -> segfile.DecodeFrame (checksum; ErrCorrupt is returned, never served)
//
// # Read-ahead
//
// Per object the Reader keeps the highest frame a read touched. A read
// that moves on into the next frame (or into frame 0 of the object a scan
// reached the end of) extends a streak; a read that jumps further ahead
// ends it; reads behind the highest frame change nothing, because the
// queues of a topic replaying together read the same frames in turn, each
// its own records, and look like one scan that sometimes steps back. From
// the second step on, the frames up to a depth past the read's end are kept
// fetched in the background: the depth is one frame, doubling with each
// step, up to Config.ReadAheadBytes (32 MiB; at most a quarter of the
// cache, so frames fetched ahead are not evicted before they are read; or
// Config.ReadAhead frames). Read-ahead continues into the next objects,
// never walks frames it already considered, and fetches runs of
// consecutive frames of one object with one ranged GET each (at most
// Config.RunBytes of input, 8 MiB): a replay makes a few large requests,
// not one per frame. A read spanning several frames fetches the others in
// parallel. Background fetches take a slot of the cold GET pool only if
// one is free, and at most MaxColdGets-1 of them, so they never queue
// ahead of demand reads, never start more than MaxColdGets goroutines, and
// leave a slot for a demand read.
//
// Objects with a layout (segfile.FlagLayout: each queue's records stored
// together) map a logical offset to its stream position first
// (Footer.Locate), and a read returns at most the bytes of one run.
// Read-ahead there follows each reader of the object on its own (a queue
// reading its group of frames) and stops at the end of the group, so
// replaying one queue fetches only that queue's frames (layout.go).
//
// # Read-ahead across objects
//
// Which group of the next object holds a queue's next records is not in
// the objects: it is in the segment's queue index, which the store's cold
// index reads. When a queue's read leaves at most 8 MiB of the queue's
// records in a segment, the cold index hints, once per segment and queue,
// the commitlog offset of the queue's first record after it
// (store.ColdReadAhead, implemented by broker/tiering with Prefetch).
// Prefetch follows the hint in the background: the object's footer and
// layout section, then the frames from that record's frame to the end of
// its group, at most a share of ReadAheadBytes among the object's streams,
// a quarter of it and RunBytes (one GET), and a stream at that frame that the
// queue's first read there joins and reads ahead from (hint.go). So the
// object boundary costs no demand GET: the next object's frames are
// fetched while the last of this one's are read. Bounds: at most eight
// hints are followed at once (a goroutine each; a hint finding them all
// busy is dropped and given again by a later read), each takes its GETs from
// the cold GET pool (footer and layout as demand reads, frames as
// read-ahead runs, waiting for a free read-ahead slot), ends within 10 s
// and with Close; an offset outside the object table fetches nothing;
// a hint's failed fetch is fetched again by the read that meets it.
//
// The frame cache (cache.go) has two parts, each bounded in bytes: a
// ristretto cache (a quarter of Config.CacheBytes) whose TinyLFU admission
// keeps frames read again and again through a one-pass scan, and a scan
// window (three quarters: three times the read-ahead depth), first in,
// first out, that admits every frame fetched: read-ahead frames are
// cached before anyone reads them, which TinyLFU refuses once the cache is
// full, so readers of the same scan a little behind would fetch them
// again. A frame read from the window is offered to ristretto.
//
// # Memory
//
// Decompressed frames in the cache (with the expanded layout sections of
// queue-major objects, 20 bytes a run, at most ~5 MiB each): at most
// Config.CacheBytes
// (STRATAMQ_CACHE_SIZE, default 256 MiB), its two parts together. Besides, per GET in flight (at
// most MaxColdGets): its compressed bytes and the frames being decoded from
// them, at most RunBytes of input for a read-ahead run (one frame, ≤
// segfile.MaxFrameSize, for a demand read); readers hold the frames they
// copy from until they return. Footers (48
// bytes per frame in memory) are kept up to a sixteenth of CacheBytes (at
// least 1 MiB), the least recently read going first, and a few words of
// scan state per object read (at most 4,096 objects, then forgotten). With the defaults a replay's cold-read
// memory is at most 256 MiB + 8 × (8 MiB compressed + 8 MiB decoded) = 384
// MiB, plus 16 MiB of footers, whatever the history's size or the number
// of readers.
package coldread
