package broker

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/infra/statecheck"
)

// brokerFields is who may touch the Broker struct's fields (the rule in
// words: infra/statecheck's package doc). A field New alone assigns is
// wiring: a setting or a collaborator any file reads and calls. A field
// written after New is state: its owner file below writes and reads it,
// broker.go and run.go (the lifecycle) may too, and every other file
// goes through a method the owner declares. Nobody but the file that
// declares a field's type selects into its fields (b.hastat.since),
// except the settings types.
var brokerFields = statecheck.Rule{
	Type:        "Broker",
	Constructor: "New",
	Lifecycle:   []string{"broker.go", "run.go"},
	Owners: map[string]string{
		"closing":        "run.go",                // Run and Close set it; stopping() reads it
		"closeErr":       "run.go",                // Close's result
		"registeredWith": "registrar.go",          // each registration round; Ready reads it
		"follow":         "wire_follow.go",        // a slave's follower, opened by Run's startHA; follower() reads it
		"hastat":         "ha_status.go",          // HAStatus's own state: since, the failover count
		"grpcPuts":       "grpc_put.go",           // the gRPC sends' rounds
		"recall":         "grpc_recall.go",        // recalled timer messages
		"wal":            "wire_wal.go",           // the bucket WAL's writer and which topics use it
		"durGen":         "durability_history.go", // the durability rule's generation, moved by framed changes
	},
	Settings: []string{"Config", "TLS", "GRPCDeps"},
	Allow:    []statecheck.Allowed{},
}

// TestBrokerFieldOwners: inside broker/, files do not reach into each
// other's state through the Broker struct (brokerFields).
func TestBrokerFieldOwners(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to type-check the package with")
	}
	for f, owner := range brokerFields.Owners {
		if strings.HasPrefix(owner, "rc") {
			t.Errorf("%s owns %s: a handler owns no state (it calls the owner's methods)", owner, f)
		}
	}
	p, err := statecheck.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	rep := statecheck.Check(p, brokerFields)
	for _, v := range rep.Violations {
		t.Errorf("%v", v)
	}
	for _, pr := range rep.Problems {
		t.Errorf("the rule: %s", pr)
	}
	t.Logf("%d uses of Broker fields, %d state fields, %d allowed exceptions", rep.Uses, len(rep.State), len(rep.Allowed))
}
