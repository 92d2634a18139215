package retention

import (
	"testing"
	"time"
)

func TestParseRetention(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "0": 0, "-1": Forever, "forever": Forever,
		"60000": time.Minute, "1m": time.Minute, "720h": 720 * time.Hour, "30d": 30 * 24 * time.Hour} {
		if got, err := Parse(v); err != nil || got != want {
			t.Errorf("Parse(%q) = %v %v, want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"-2", "-1m", "soon", "1x"} {
		if _, err := Parse(v); err == nil {
			t.Errorf("Parse(%q) accepted", v)
		}
	}
	got, err := ApplyAttributes(map[string]string{"a": "1", "b": "2"}, "+retention.time=1m, -a,+c=3")
	if err != nil || len(got) != 3 || got["b"] != "2" || got["c"] != "3" || got[Attribute] != "1m" {
		t.Fatalf("ApplyAttributes: %v %v", got, err)
	}
	for _, bad := range []string{"+retention.time=soon", "x=1", "+=1", "-k=v"} {
		if _, err := ApplyAttributes(nil, bad); err == nil {
			t.Errorf("ApplyAttributes(%q) accepted", bad)
		}
	}
}
