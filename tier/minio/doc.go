// Package minio is a tier.Bucket on an S3-compatible server through
// minio-go/v7: path-style addressing, plain HTTP or TLS with a custom CA,
// as on-prem object stores need.
//
// Credentials come from Config, else from the environment (AWS_ACCESS_KEY_ID
// / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, then MINIO_ACCESS_KEY /
// MINIO_SECRET_KEY), the AWS shared credentials file, then IAM (IMDS, IRSA).
// They are never logged; Config.String redacts them.
//
// Objects up to PartSize are one PUT; larger ones are minio-go's multipart
// upload with PartSize parts. Conditional writes send If-None-Match: * or
// If-Match on the PUT, or on CompleteMultipartUpload.
package minio
