package statecheck

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestCheckFixture: the uses in testdata/fixture, and what the rule
// makes of them: other.go's read of owned state, its address-taking
// write and its selection into status are refused; owner.go and
// status.go touch only their own; wiring is read freely; the rule's own
// mistakes are reported.
func TestCheckFixture(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	p, err := Load("testdata/fixture")
	if err != nil {
		t.Fatal(err)
	}
	if p.Decl["T"] != "t.go" || p.Decl["status"] != "status.go" {
		t.Fatalf("declaring files: %v", p.Decl)
	}
	r := Rule{Type: "T", Constructor: "New", Lifecycle: []string{"t.go"},
		Owners:   map[string]string{"count": "owner.go", "stop": "owner.go", "st": "status.go", "m": "owner.go"},
		Settings: []string{"settings"}}
	rep := Check(p, r)
	var got []string
	for _, v := range rep.Violations {
		got = append(got, v.File+" "+v.Field+" "+strings.Fields(v.Why)[0])
	}
	want := []string{"other.go stop reads", "other.go count writes", "other.go st reads"}
	if !slices.Equal(got, want) {
		t.Errorf("violations %q, want %q", got, want)
	}
	if len(rep.Problems) != 0 {
		t.Errorf("problems %q, want none", rep.Problems)
	}
	if w := rep.State; len(w) != 4 || !slices.Equal(w["count"], []string{"other.go", "owner.go"}) || !slices.Equal(w["st"], []string{"status.go"}) {
		t.Errorf("state fields %v", w)
	}

	// An allowed use passes; the rule's mistakes are named.
	r.Allow = []Allowed{{File: "other.go", Field: "stop", Reason: "test"}, {File: "nowhere.go", Field: "count", Reason: "stale"}}
	r.Owners = map[string]string{"count": "owner.go", "st": "status.go", "m": "owner.go", "cfg": "t.go"}
	rep = Check(p, r)
	if len(rep.Allowed) != 1 || rep.Allowed[0].Field != "stop" {
		t.Errorf("allowed %v, want other.go's read of stop", rep.Allowed)
	}
	wantP := []string{
		"T.cfg has an owner but is written only by New: it is wiring, drop the entry",
		"T.stop is written after New (in owner.go): name its owner file",
		"allowed count in nowhere.go is not needed any more: drop the entry",
	}
	if !slices.Equal(rep.Problems, wantP) {
		t.Errorf("problems %q,\nwant %q", rep.Problems, wantP)
	}
}
