// Package body adapts the readers handed to tier.Bucket.Put for the
// providers: the S3 SDKs need seekable bodies to sign and retry, no
// provider may store fewer bytes than the caller promised, and a cancelled
// Put must stop consuming its reader.
package body
