// Package upload moves sealed segments from local disk to a tier.Bucket.
//
// The store implements [SegmentSource]; the [Uploader] asks it for sealed,
// not-yet-uploaded segments, encodes each with tier/segfile (zstd frames,
// footer frame table, per-frame checksum) and stores it under a key derived
// from the segment alone:
//
//	<prefix>/commitlog/00000000000104857600.seg            commitlog, by base offset
//	<prefix>/commitlog/00000000000104857600.idx            its queue index (store.WriteSegmentIndex)
//	<prefix>/commitlog/00000000000104857600.kix            its key index (store's key index file; 64 KiB frames)
//	<prefix>/consumequeue/TopicA/3/00000000000000300000.cq consumequeue, by first index
//	<prefix>/meta/manifest.json                            the manifest
//
// Because the key and the bytes depend only on the segment, an upload can
// be repeated at any time (a retry, a crash before the manifest was
// written) and stores the same object again.
//
// # Order of effects
//
//  1. Put the object (retried with backoff until it succeeds).
//  2. Rewrite the manifest with the object in it (a conditional PutIf on
//     the ETag last seen, merged and retried on a conflict). A manifest
//     never lists an object that is not complete in the bucket.
//  3. SegmentSource.MarkUploaded. Only now may the store drop the local
//     copy. A crash before this step leaves the segment pending; on the
//     next scan it is found in the manifest and marked without a new PUT
//     (so does a MarkUploaded that returned an error).
//
// # Fencing
//
// Config.Fence, if set, is asked before every bucket write the Uploader
// issues: each object PUT attempt, each manifest write, and each delete of
// DeleteObjects. While it returns an error nothing is written: uploads and
// the committer back off and ask again (logged once when the answer
// changes), Trim and DeleteObjects return the error. The epoch Fence
// returns is stored in the manifest written under it (Manifest.Epoch), so
// a reader can tell which lease holder wrote it.
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
