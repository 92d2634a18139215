// Package s3proto holds what the two S3 providers, tier/s3 (aws-sdk-go-v2)
// and tier/minio (minio-go), do the same way once their SDK has answered:
// mapping an S3 error to the tier sentinels, checking a condition before a
// multipart upload, checking and reading the response to a ranged GET, and
// the part-size and concurrency defaults. The SDK calls themselves, which
// only look alike, stay in each provider.
package s3proto
