package consumers

import (
	"testing"

	"github.com/stratamq/stratamq/infra/importcheck"
)

// TestConsumersImportsNoBroker is a tripwire: consumers (and everything it
// imports) never imports the broker package, nor any broker feature
// package but the leaf configtable.
func TestConsumersImportsNoBroker(t *testing.T) { importcheck.NoBroker(t, "consumers", "configtable") }
