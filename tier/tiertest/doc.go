// Package tiertest holds the acceptance suite every tier.Bucket provider
// passes, and a launcher for a real S3 server (versitygw) on loopback.
//
// It is imported only by tests; it lives in a non-_test file so that every
// provider package can run the same suite:
//
//	func TestTierSuite(t *testing.T) {
//		tiertest.RunBucketSuite(t, func(t *testing.T) tier.Bucket { ... fresh, empty bucket ... })
//	}
//
// The suite is the contract: every sentence of the tier.Bucket doc comments
// that can be observed has a subtest here. RunPrefixedBucketSuite runs it
// behind tier.WithPrefix. The S3 providers share their runs against
// tier/s3fake and versitygw, RunS3ProviderTests: they pass a NewS3Bucket
// that builds their Bucket for an endpoint, credentials and a bucket name.
package tiertest
