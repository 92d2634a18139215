// Package coldread reads logical byte ranges of the commitlog (or any
// object series written by tier/upload) back from a bucket.
//
// A Reader holds a table of objects sorted by base offset (objects may
// differ in length). ReadAt finds the object holding an offset, reads its
// footer once (one small ranged GET of the tail, then kept), and fetches
// only the frames the range needs, one ranged GET per frame:
//
//	ReadAt(off, p)
//	  -> object table (sort.Search on Base)
//	  -> footer (cached per object)
//	  -> frame cache (ristretto, cost = decompressed bytes) --hit--> copy
//	  -> recent fetches (read-ahead and in-flight frames, singleflight)
//	  -> cold GET pool (semaphore) -> bucket.ReadAt
//	  -> segfile.DecodeFrame (checksum; ErrCorrupt is returned, never served)
//
// # Memory
//
// Decompressed frames live in the ristretto cache, bounded by
// Config.CacheBytes, plus at most Config.ReadAheadBuffer recently fetched
// frames (mostly the same slices the cache holds; they cover read-ahead
// frames the cache's admission policy refuses), plus the frames of GETs in flight (at most
// Config.MaxColdGets). Footers are kept for every object read (32 bytes
// per frame).
//
// # Read-ahead
//
// A read that starts where the previous read of the same object ended is
// sequential; it triggers background fetches of the next Config.ReadAhead
// frames, continuing into the next object. A read spanning several frames
// fetches them in parallel. Background fetches take a slot of the cold GET
// pool only if one is free, so they never queue ahead of demand reads and
// never start more than MaxColdGets goroutines.
package coldread
