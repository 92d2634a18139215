package txn

import (
	"testing"

	"github.com/stratamq/stratamq/infra/importcheck"
)

// TestTxnImportsNoBroker is a tripwire: txn (and everything it imports)
// never imports the broker package, nor any other broker feature package
// but the leaf msgprop.
func TestTxnImportsNoBroker(t *testing.T) { importcheck.NoBroker(t, "txn", "msgprop") }
