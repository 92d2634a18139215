// Package body adapts the readers handed to tier.Bucket.Put for the S3
// SDKs, which need seekable bodies to sign and retry, and must never
// upload fewer bytes than the caller promised.
package body
