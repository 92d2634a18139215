package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeConfigurationTable: the README's configuration table lists
// every setting of the config struct, and no other, and gives each fixed
// default as the struct does (issue 13 item 6).
func TestReadmeConfigurationTable(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `STRATAMQ_([A-Z0-9_]+)` \\| ([^|]*) \\|")
	table := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			table[m[1]] = m[2]
		}
	}
	settings := allSettings()
	seen := map[string]bool{}
	for _, s := range settings {
		seen[s.Env] = true
		cell, ok := table[s.Env]
		if !ok {
			t.Errorf("STRATAMQ_%s is not in the README's configuration table", s.Env)
			continue
		}
		if s.Default != "" && !strings.Contains(cell, "`"+s.Default+"`") {
			t.Errorf("STRATAMQ_%s: the README gives the default %q, the config struct `%s`", s.Env, strings.TrimSpace(cell), s.Default)
		}
	}
	for env := range table {
		if !seen[env] {
			t.Errorf("the README's configuration table lists STRATAMQ_%s, which no command reads", env)
		}
	}
}

// TestReadmeClientExample: the README shows examples/quickstart/main.go as
// it is, and that program builds (issue 13 item 6: the README's client
// example compiles, and shows a consumer).
func TestReadmeClientExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../../examples/quickstart/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(src)+"```\n") {
		t.Fatal("the README's Go example is not examples/quickstart/main.go as it is")
	}
	for _, want := range []string{"NewProducer", "NewPushConsumer", "Subscribe"} {
		if !strings.Contains(string(src), want) {
			t.Errorf("the example lacks %s", want)
		}
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(t.TempDir(), "quickstart"), "./examples/quickstart")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/quickstart: %v\n%s", err, out)
	}
}
