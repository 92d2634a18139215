package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/infra/sysmon"
)

// configRows parses the rows of a configuration table in a markdown file:
// "| `STRATAMQ_NAME` | default | meaning |", by name (without STRATAMQ_).
func configRows(t *testing.T, path string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(path)
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
	return table
}

// TestReadmeConfigurationTable: the configuration reference
// (docs/configuration.md) lists every setting of the config struct, and no
// other, and gives each fixed default as the struct does; the README's
// table of essentials names only settings the binary reads, with the same
// defaults.
func TestReadmeConfigurationTable(t *testing.T) {
	const ref = "docs/configuration.md"
	table := configRows(t, "../../"+ref)
	settings := allSettings()
	byEnv := map[string]setting{}
	for _, s := range settings {
		byEnv[s.Env] = s
		cell, ok := table[s.Env]
		if !ok {
			t.Errorf("STRATAMQ_%s is not in %s's configuration table", s.Env, ref)
			continue
		}
		if s.Default != "" && !strings.Contains(cell, "`"+s.Default+"`") {
			t.Errorf("STRATAMQ_%s: %s gives the default %q, the config struct `%s`", s.Env, ref, strings.TrimSpace(cell), s.Default)
		}
	}
	// Read from the environment before any flag is parsed: the re-exec
	// that keeps Go's system monitor awake (infra/sysmon).
	envOnly := map[string]bool{strings.TrimPrefix(sysmon.Env, "STRATAMQ_"): true}
	for env := range table {
		if _, ok := byEnv[env]; !ok && !envOnly[env] {
			t.Errorf("%s's configuration table lists STRATAMQ_%s, which no command reads", ref, env)
		}
	}

	essentials := configRows(t, "../../README.md")
	if len(essentials) == 0 {
		t.Fatal("the README has no table of configuration essentials")
	}
	for env, cell := range essentials {
		s, ok := byEnv[env]
		if !ok {
			t.Errorf("the README's configuration essentials list STRATAMQ_%s, which no command reads", env)
			continue
		}
		if strings.TrimSpace(cell) != strings.TrimSpace(table[env]) {
			t.Errorf("STRATAMQ_%s: the README gives the default %q, %s %q", env, strings.TrimSpace(cell), ref, strings.TrimSpace(table[env]))
		}
		if s.Default != "" && !strings.Contains(cell, "`"+s.Default+"`") {
			t.Errorf("STRATAMQ_%s: the README gives the default %q, the config struct `%s`", env, strings.TrimSpace(cell), s.Default)
		}
	}
}

// TestReadmeClientExample: the README shows examples/quickstart/main.go as
// it is, and that program builds (the README's client example compiles,
// and shows a consumer).
func TestReadmeClientExample(t *testing.T) {
	t.Parallel()
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

// userDocs are the README and the reference in docs/ (the file names,
// relative to the repository root).
func userDocs(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, d := range docs {
		out = append(out, "docs/"+filepath.Base(d))
	}
	return out
}

// headingAnchors are the anchors GitHub gives a markdown file's headings:
// lower case, punctuation dropped, spaces as hyphens, "-1", "-2", ... for
// repeats. Headings inside code blocks are not headings.
func headingAnchors(md string) map[string]bool {
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	anchors := map[string]bool{}
	seen := map[string]int{}
	code := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			code = !code
			continue
		}
		if code || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		a := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconvItoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

func strconvItoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return strconvItoa(n/10) + digits[n%10:n%10+1]
}

// TestReadmeLinks: every relative link of the README and of docs/*.md
// names a file of the repository, and every #anchor a heading of the file
// it points into, so a section moved between them is never a dead link.
func TestReadmeLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		raw, err := os.ReadFile("../../" + file)
		if err != nil {
			t.Fatal(err)
		}
		anchors[file] = headingAnchors(string(raw))
		return anchors[file]
	}
	for _, doc := range userDocs(t) {
		raw, err := os.ReadFile("../../" + doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			if file == "" {
				file = doc
			} else {
				file = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(doc), file)))
			}
			if _, err := os.Stat("../../" + file); err != nil {
				t.Errorf("%s links to %s: no such file", doc, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !anchorsOf(file)[anchor] {
				t.Errorf("%s links to %s: %s has no heading #%s", doc, target, file, anchor)
			}
		}
	}
}

// TestReadmeIsAFrontPage: the README stays a front page (at most ~300
// lines) that links every page of the reference in docs/, its test
// command is the one CI runs (`make test`), and neither it nor the
// reference speaks of work-tracker issues.
func TestReadmeIsAFrontPage(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	if n := strings.Count(readme, "\n"); n > 300 {
		t.Errorf("the README has %d lines: keep it a front page (at most ~300) and move the reference to docs/", n)
	}
	for _, doc := range userDocs(t) {
		if doc == "README.md" || doc == "docs/contracts.md" {
			continue // contracts.md is for contributors, linked from the README's contributor section
		}
		if !strings.Contains(readme, "]("+doc+")") {
			t.Errorf("the README does not link %s", doc)
		}
	}
	if !strings.Contains(readme, "```sh\nmake test\n```") {
		t.Error("the README's test command is not `make test`")
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(ci)), "\n")
	if last := lines[len(lines)-1]; last != "make test" {
		t.Errorf(".ci/run ends with %q, not the README's test command `make test`", last)
	}
	tracker := regexp.MustCompile(`(?i)\bissues? [0-9]+`)
	for _, doc := range userDocs(t) {
		raw, err := os.ReadFile("../../" + doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			if m := tracker.FindString(line); m != "" {
				t.Errorf("%s:%d names %q: the docs speak to users, not of the work tracker", doc, i+1, m)
			}
		}
	}
}
