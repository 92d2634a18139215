package schedule

import (
	"testing"

	"github.com/stratamq/stratamq/infra/importcheck"
)

// TestScheduleImportsNoBroker is a tripwire: schedule (and everything it
// imports) never imports the broker package, nor any broker feature
// package but the leaves progress and msgprop.
func TestScheduleImportsNoBroker(t *testing.T) {
	importcheck.NoBroker(t, "schedule", "progress", "msgprop")
}
