// Package importcheck is a test helper: the import tripwire each feature
// package under broker/ runs, so that none of them ever depends on the
// broker package or on another feature package it does not name.
package importcheck

import (
	"os/exec"
	"strings"
	"testing"
)

// BrokerModule is the broker package's import path.
const BrokerModule = "github.com/stratamq/stratamq/broker"

// NoBroker fails t if the package in the current directory (self, a name
// under broker/), or anything it imports, depends on the broker package
// or on a package under it other than self and allowed. It skips without
// a go command to list the imports with.
func NoBroker(t testing.TB, self string, allowed ...string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the imports with")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	ok := map[string]bool{BrokerModule + "/" + self: true}
	for _, a := range allowed {
		ok[BrokerModule+"/"+a] = true
	}
	for _, p := range strings.Fields(string(out)) {
		if p == BrokerModule || strings.HasPrefix(p, BrokerModule+"/") && !ok[p] {
			t.Errorf("%s depends on %s", self, p)
		}
	}
}
