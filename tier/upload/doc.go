// Package upload moves sealed segments from local disk to a tier.Bucket.
//
// The store implements [SegmentSource]; the [Uploader] asks it for sealed,
// not-yet-uploaded segments, encodes each with tier/segfile (zstd frames,
// footer frame table, per-frame checksum) and stores it under a key derived
// from the segment alone:
//
//	<prefix>/commitlog/00000000000104857600.seg            commitlog, by base offset
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
//     next scan it is found in the manifest and marked without a new PUT.
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
