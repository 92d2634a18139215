// Package nodetest runs the official RocketMQ 5 Node.js client
// (npm rocketmq-client-nodejs, pinned by this directory's
// package-lock.json) for the tests of the gRPC endpoint: the scripts here
// take a JSON plan as their argument and print one JSON event per line,
// the last one {"event":"done"}. It is test support only; .ci/run installs
// the client with npm ci here.
package nodetest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Dir is this directory: the scripts and node_modules.
var Dir = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}()

// Need skips t when node or the client is not installed.
func Need(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: .ci/run installs nodejs and runs npm ci in proxy/nodetest")
	}
	if _, err := os.Stat(filepath.Join(Dir, "node_modules", "rocketmq-client-nodejs")); err != nil {
		t.Skip("proxy/nodetest/node_modules is missing: run npm ci in proxy/nodetest (.ci/run does)")
	}
}

// Command is script of Dir with plan, as JSON, for its argument.
func Command(ctx context.Context, t testing.TB, script string, plan any) *exec.Cmd {
	t.Helper()
	raw, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "node", script, string(raw))
	cmd.Dir = Dir
	return cmd
}

// Run runs script with plan, bounded by timeout, and returns its events
// decoded into T (lines that are not JSON are skipped). It fails t when
// the script fails or its last event is not "done", and, with
// failOnError, on an "error" event.
func Run[T any](t testing.TB, script string, plan any, timeout time.Duration, failOnError bool) []T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := Command(ctx, t, script, plan)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var evs []T
	last := ""
	for _, line := range strings.Split(stdout.String(), "\n") {
		var head struct{ Event, Message string }
		if strings.TrimSpace(line) == "" || json.Unmarshal([]byte(line), &head) != nil {
			continue
		}
		var ev T
		if json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		if failOnError && head.Event == "error" {
			t.Fatalf("node %s: %s\nstderr:\n%s", script, head.Message, stderr.String())
		}
		evs, last = append(evs, ev), head.Event
	}
	if err != nil || last != "done" {
		t.Fatalf("node %s: %v (last event %q)\nstdout:\n%s\nstderr:\n%s", script, err, last, stdout.String(), stderr.String())
	}
	return evs
}
