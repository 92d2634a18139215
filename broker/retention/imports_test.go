package retention

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRetentionImportsNoBroker is a tripwire: retention (and everything it
// imports) never imports the broker package, nor any broker feature
// package (tiering and the schedule service are reached through the
// interfaces it declares: Index, Pins).
func TestRetentionImportsNoBroker(t *testing.T) {
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
		if p == mod || strings.HasPrefix(p, mod+"/") && p != mod+"/retention" {
			t.Errorf("retention depends on %s", p)
		}
	}
}
