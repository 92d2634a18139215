package retention

import (
	"testing"

	"github.com/stratamq/stratamq/infra/importcheck"
)

// TestRetentionImportsNoBroker is a tripwire: retention (and everything it
// imports) never imports the broker package, nor any broker feature
// package (tiering and the schedule service are reached through the
// interfaces it declares: Index, Pins).
// It may import package compaction (which topics are compacted), which
// imports none of them.
func TestRetentionImportsNoBroker(t *testing.T) { importcheck.NoBroker(t, "retention", "compaction") }
