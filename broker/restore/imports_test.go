package restore

import (
	"testing"

	"github.com/stratamq/stratamq/infra/importcheck"
)

// TestRestoreImportsNoBroker is a tripwire: restore (and everything it
// imports) never imports the broker package, nor any broker feature
// package but durability (the checkpoint's commitlog section it reads).
func TestRestoreImportsNoBroker(t *testing.T) { importcheck.NoBroker(t, "restore", "durability") }
