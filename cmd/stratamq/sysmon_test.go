package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/sysmon"
)

// TestSysmonEnvBadValue: a STRATAMQ_SYSMON other than auto or default is
// refused with a clear error before anything starts.
func TestSysmonEnvBadValue(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"serve", "--data-dir", t.TempDir()}, map[string]string{sysmon.Env: "off"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), `STRATAMQ_SYSMON="off": want auto or default`) {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// TestE2EBinarySysmonAwake runs the real binary: with two Ps `serve`
// re-executes itself in place (the PID the test started runs with the
// monitor kept awake and says so), and with one P, or when told not to,
// it runs as started.
func TestE2EBinarySysmonAwake(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	bin := buildBinary(t)
	for _, tc := range []struct {
		name  string
		env   []string
		awake bool
	}{
		{"two Ps", []string{"GOMAXPROCS=2", "GODEBUG=madvdontneed=1"}, true},
		{"one P", []string{"GOMAXPROCS=1"}, false},
		{"opt out", []string{"GOMAXPROCS=2", sysmon.Env + "=default"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			cmd := exec.Command(bin, "serve", "--listen", br)
			cmd.Env = append(withoutEnv(os.Environ(), "GODEBUG", "GOMAXPROCS", sysmon.Env),
				"STRATAMQ_DATA_DIR="+t.TempDir(),
				fmt.Sprintf("STRATAMQ_NAMESRV_LISTEN=127.0.0.1:%d", freePort(t)),
				"STRATAMQ_HTTP_LISTEN=", "STRATAMQ_GRPC_LISTEN=",
			)
			cmd.Env = append(cmd.Env, tc.env...)
			logs := &syncBuffer{}
			cmd.Stdout, cmd.Stderr = logs, logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			waitFor(t, 20*time.Second, "broker port open", func() bool { return dialable(br) })
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			var godebug string
			for _, kv := range bytes.Split(environ, []byte{0}) {
				if v, ok := bytes.CutPrefix(kv, []byte("GODEBUG=")); ok {
					godebug = string(v)
				}
			}
			mode := "sysmon=default"
			if tc.awake {
				mode = "sysmon=awake"
				if godebug != "madvdontneed=1,"+sysmon.AwakeTrace {
					t.Fatalf("PID %d runs with GODEBUG=%q, want the user's setting and %s", cmd.Process.Pid, godebug, sysmon.AwakeTrace)
				}
			} else if strings.Contains(godebug, "schedtrace") {
				t.Fatalf("PID %d runs with GODEBUG=%q, want no schedtrace", cmd.Process.Pid, godebug)
			}
			waitFor(t, 20*time.Second, "start-up log line", func() bool { return strings.Contains(logs.String(), "stratamq starting") })
			if !strings.Contains(logs.String(), mode) {
				t.Fatalf("start-up log does not say %s:\n%s", mode, logs.String())
			}
			// The trace prints once the monotonic clock passes each
			// 2^31 ms (24.8 days): not at start on a host up for less.
			if up, err := os.ReadFile("/proc/uptime"); err == nil {
				var secs float64
				if _, err := fmt.Sscan(string(up), &secs); err == nil && secs < 24*86400 && strings.Contains(logs.String(), "SCHED") {
					t.Fatalf("the runtime printed a scheduler trace:\n%s", logs.String())
				}
			}
		})
	}
}

func withoutEnv(env []string, keys ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(keys, k)
	})
}
