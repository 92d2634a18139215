package txn

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTxnImportsNoBroker is a tripwire: txn (and everything it imports)
// never imports the broker package, nor any other broker feature package
// but the leaf msgprop.
func TestTxnImportsNoBroker(t *testing.T) {
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
		if p == mod || strings.HasPrefix(p, mod+"/") && p != mod+"/txn" && p != mod+"/msgprop" {
			t.Errorf("txn depends on %s", p)
		}
	}
}
