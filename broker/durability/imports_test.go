package durability

import (
	"testing"

	"github.com/stratamq/stratamq/infra/importcheck"
)

// TestDurabilityImportsNoBroker is a tripwire: durability (and everything
// it imports) never imports the broker package nor any broker feature
// package.
func TestDurabilityImportsNoBroker(t *testing.T) { importcheck.NoBroker(t, "durability") }
