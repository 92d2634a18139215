package schedule

import "testing"

// TestMayRouteCoversEveryScheduleProperty: the pre-check Route and the
// send path rely on never says no to a message Route would change.
func TestMayRouteCoversEveryScheduleProperty(t *testing.T) {
	for _, k := range []string{propDelay, PropTimerDeliverMs, PropTimerDelaySec, PropTimerDelayMs} {
		props := "UNIQ_KEY\x01abc\x02" + k + "\x015\x02TAGS\x01t\x02"
		if !MayRoute(props) {
			t.Errorf("MayRoute(%q) = false", props)
		}
	}
	if MayRoute("UNIQ_KEY\x01abc\x02TAGS\x01t\x02KEYS\x01k\x02") {
		t.Error("MayRoute true for a plain message")
	}
}
