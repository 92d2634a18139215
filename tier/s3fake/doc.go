// Package s3fake is an in-process S3 server for fast tests: an
// httptest.Server that speaks the subset of the S3 REST API the tier
// providers use, with fault hooks in the style of kfake's ControlKey.
//
// Supported, path-style only (http://127.0.0.1:PORT/bucket/key):
//
//	CreateBucket, HeadBucket, GetBucketLocation
//	PutObject (If-None-Match: *, If-Match), GetObject (Range), HeadObject, DeleteObject
//	ListObjectsV2 (prefix, start-after, continuation-token, max-keys; no delimiter)
//	CreateMultipartUpload, UploadPart, CompleteMultipartUpload (If-None-Match, If-Match), AbortMultipartUpload
//
// Request bodies in aws-chunked framing (minio-go's streaming signatures)
// are decoded, and a hex x-amz-content-sha256 is verified, so a client that
// frames or hashes wrongly fails here as it would on S3. Signatures are not
// verified; with Options.AccessKey set, a request must at least name that
// access key, or it gets 403 InvalidAccessKeyId.
//
// Fault hooks: Next(match, hook) intercepts the next request matching an
// HTTP method ("PUT") or an S3 operation name ("UploadPart"); the hook can
// answer itself (SlowDown, Status), delay (Delay), cut the response body
// short (Truncate), drop the connection (GoAway), or pass the request on.
package s3fake
