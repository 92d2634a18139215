package follow

import (
	"testing"

	"github.com/stratamq/stratamq/infra/importcheck"
)

// TestFollowImportsNoBroker is a tripwire: follow (and everything it
// imports) never imports the broker package, nor any broker feature
// package but consumers and restore (and what they import: configtable,
// durability).
func TestFollowImportsNoBroker(t *testing.T) {
	importcheck.NoBroker(t, "follow", "consumers", "configtable", "restore", "durability")
}
