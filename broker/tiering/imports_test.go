package tiering

import (
	"testing"

	"github.com/stratamq/stratamq/infra/importcheck"
)

// TestTieringImportsNoBroker is a tripwire: tiering (and everything it
// imports) never imports the broker package, nor any broker feature
// package.
// It may import package compaction (the manifest kind of a generation and
// the queue key its points are listed by), which imports none of them.
func TestTieringImportsNoBroker(t *testing.T) { importcheck.NoBroker(t, "tiering", "compaction") }
