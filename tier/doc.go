// Package tier moves opaque objects between the broker and an object store.
//
// It owns one small interface, [Bucket], the errors every provider maps to
// ([ErrNotExist], [ErrPreconditionFailed], [ErrRange], [ErrInvalidKey],
// [ErrAccessDenied]), the single place that decides whether an error is
// worth retrying ([IsRetryable]), and decorators that wrap a Bucket
// ([WithPrefix]). [NewMem] is an in-memory Bucket for tests.
//
// Providers live in subpackages and import tier; tier never imports them:
//
//	tier/localfs   a directory on the local filesystem (the embedded default)
//	tier/s3        aws-sdk-go-v2 (AWS credential chain, custom endpoints)
//	tier/minio     minio-go/v7 (path-style, on-prem TLS with a custom CA)
//	tier/bucketurl the only package that imports providers: file://, s3://, minio:// URLs
//	tier/s3fake    an in-process S3 subset with fault hooks, for tests
//	tier/tiertest  the acceptance suite every provider passes, and a versitygw launcher
//
// What tier must never do: parse message bytes, know about topics, segments
// or offsets, or log credentials. Callers lay out keys; tier stores bytes.
//
// # Keys
//
// Keys are '/'-separated paths: non-empty, valid UTF-8, at most 1024 bytes,
// no leading or trailing '/', no empty, "." or ".." segments, no NUL. A key
// must not also be a directory prefix of another key ("a" and "a/b"): object
// stores allow it, a filesystem does not. [ValidateKey] checks the rules;
// every provider calls it and returns [ErrInvalidKey].
//
// # Consistency
//
// Providers assume read-after-write consistency (S3 has it since 2020):
// after Put returns, ReadAt, Stat and List see the new object.
//
// # Usage
//
//	b, err := bucketurl.Open(ctx, "s3://my-bucket/cluster-a?region=eu-west-1", bucketurl.Options{})
//	...
//	err = b.Put(ctx, "meta/manifest", bytes.NewReader(buf), int64(len(buf)))
//	attrs, err := b.Stat(ctx, "meta/manifest")
//	p := make([]byte, 4096)
//	err = b.ReadAt(ctx, "meta/manifest", p, 0) // ErrRange if the object is shorter than 4096
package tier
