// Package offsetstest holds the acceptance suite every offsets.ObjectStore
// must pass for checkpoints and the lease to fence: the in-memory store
// (offsets), a tier.Bucket through the broker's adapter (tier.NewMem, and a
// real S3 server, versitygw). Use it from a test:
//
//	func TestOffsetsCheckpointSuite(t *testing.T) {
//		offsetstest.RunCheckpointSuite(t, func(t *testing.T) offsets.ObjectStore {
//			return offsets.NewMemStore()
//		})
//	}
package offsetstest
