package failover

import (
	"testing"

	"github.com/stratamq/stratamq/infra/importcheck"
)

// TestFailoverImportsNoBroker is a tripwire: failover (and everything it
// imports) never imports the broker package nor any broker feature
// package but durability (the checkpoint's commitlog section).
func TestFailoverImportsNoBroker(t *testing.T) { importcheck.NoBroker(t, "failover", "durability") }
