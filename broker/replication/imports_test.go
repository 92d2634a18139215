package replication

import (
	"testing"

	"github.com/stratamq/stratamq/infra/importcheck"
)

// TestReplicationImportsNoBroker is a tripwire: replication (and everything
// it imports) never imports the broker package nor any broker feature
// package.
func TestReplicationImportsNoBroker(t *testing.T) { importcheck.NoBroker(t, "replication") }
