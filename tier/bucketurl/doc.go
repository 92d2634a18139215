// Package bucketurl opens a tier.Bucket from a URL (STRATAMQ_BUCKET). It is
// the only package that imports the providers:
//
//	file:///var/lib/stratamq/bucket                                  tier/localfs
//	s3://bucket/prefix?region=eu-west-1                               tier/s3 on AWS
//	s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1  tier/s3, custom endpoint, path-style
//	minio://host:9000/bucket/prefix?secure=false                     tier/minio
//	minio://host:9000/bucket?ca=/etc/stratamq/ca.pem                 tier/minio, TLS with a private CA
//
// Query parameters: s3 takes endpoint, region and path_style (default true
// with an endpoint, false on AWS); minio takes secure (default true), ca and
// region. Both take sse (AES256 for SSE-S3, aws:kms for SSE-KMS; s3 also
// aws:kms:dsse) and sse-kms-key-id: the server-side encryption every upload
// asks for. Unknown parameters are errors, so a typo does not silently fall
// back to a default. A non-empty prefix wraps the bucket in tier.WithPrefix.
//
// Credentials never come from the URL (one with user:password@ is
// refused, also when the secret makes it unparseable, without echoing
// either part): they come from Options, else from the environment and
// each SDK's chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN, shared config, web identity, IMDS). Log URLs with
// Redacted.
package bucketurl
