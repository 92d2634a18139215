package schedule

import (
	"os/exec"
	"strings"
	"testing"
)

// TestScheduleImportsNoBroker is a tripwire: schedule (and everything it
// imports) never imports the broker package, nor any broker feature
// package but the leaves progress and msgprop.
func TestScheduleImportsNoBroker(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the imports with")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/stratamq/stratamq/broker"
	for _, p := range strings.Fields(string(out)) {
		if p == mod || strings.HasPrefix(p, mod+"/") && p != mod+"/schedule" && p != mod+"/progress" && p != mod+"/msgprop" {
			t.Errorf("schedule depends on %s", p)
		}
	}
}
