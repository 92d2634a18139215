package tier_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/tiertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The in-memory bucket runs first and on its own: it pins the contract
// without any I/O, so a failing subtest here is a suite bug or a tier bug.
func TestTierMemSuite(t *testing.T) {
	tiertest.RunBucketSuite(t, func(t *testing.T) tier.Bucket { return tier.NewMem() })
}

func TestTierMemPrefixedSuite(t *testing.T) {
	tiertest.RunPrefixedBucketSuite(t, "cluster/a/", func(t *testing.T) tier.Bucket { return tier.NewMem() })
}
