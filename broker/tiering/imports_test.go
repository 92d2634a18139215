package tiering

import (
	"testing"

	"github.com/stratamq/stratamq/infra/importcheck"
)

// TestTieringImportsNoBroker is a tripwire: tiering (and everything it
// imports) never imports the broker package, nor any broker feature
// package.
func TestTieringImportsNoBroker(t *testing.T) { importcheck.NoBroker(t, "tiering") }
