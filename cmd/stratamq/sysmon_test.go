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
)

func TestSysmonAwakeEnv(t *testing.T) {
	base := []string{"PATH=/bin", "HOME=/root"}
	for _, tc := range []struct {
		name  string
		args  []string
		env   []string
		procs int
		want  string // the GODEBUG to re-execute with; "" for none
	}{
		{"serve", []string{"stratamq", "serve"}, base, 2, sysmonAwakeTrace},
		{"broker", []string{"stratamq", "broker", "--flush", "sync"}, base, 4, sysmonAwakeTrace},
		{"one P", []string{"stratamq", "serve"}, base, 1, ""},
		{"namesrv", []string{"stratamq", "namesrv"}, base, 2, ""},
		{"bench", []string{"stratamq", "bench", "produce"}, base, 2, ""},
		{"no command", []string{"stratamq"}, base, 2, ""},
		{"opt out", []string{"stratamq", "serve"}, append(slices.Clone(base), sysmonEnv+"=default"), 2, ""},
		{"auto", []string{"stratamq", "serve"}, append(slices.Clone(base), sysmonEnv+"=auto"), 2, sysmonAwakeTrace},
		{"bad value", []string{"stratamq", "serve"}, append(slices.Clone(base), sysmonEnv+"=off"), 2, ""},
		{"other GODEBUG kept", []string{"stratamq", "serve"}, append(slices.Clone(base), "GODEBUG=madvdontneed=1"), 2,
			"madvdontneed=1," + sysmonAwakeTrace},
		{"empty GODEBUG", []string{"stratamq", "serve"}, append(slices.Clone(base), "GODEBUG="), 2, sysmonAwakeTrace},
		{"user schedtrace wins", []string{"stratamq", "serve"}, append(slices.Clone(base), "GODEBUG=gctrace=1,schedtrace=1000"), 2, ""},
		{"user schedtrace=0 wins", []string{"stratamq", "serve"}, append(slices.Clone(base), "GODEBUG=schedtrace=0"), 2, ""},
		{"re-executed", []string{"stratamq", "serve"}, append(slices.Clone(base), "GODEBUG="+sysmonAwakeTrace), 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.env)
			got := sysmonAwakeEnv(tc.args, tc.env, tc.procs)
			if !slices.Equal(tc.env, before) {
				t.Fatalf("the environment passed in changed: %q", tc.env)
			}
			if tc.want == "" {
				if got != nil {
					t.Fatalf("re-executes with %q, want no re-execution", got)
				}
				return
			}
			var godebug []string
			for _, kv := range got {
				if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
					godebug = append(godebug, v)
				} else if !slices.Contains(tc.env, kv) {
					t.Fatalf("re-executes with %q, not in the environment", kv)
				}
			}
			if len(godebug) != 1 || godebug[0] != tc.want || len(got) != len(tc.env)+boolInt(!hasGODEBUG(tc.env)) {
				t.Fatalf("re-executes with %q, want GODEBUG=%s once and the rest unchanged", got, tc.want)
			}
		})
	}
}

// TestSysmonEnvBadValue: a STRATAMQ_SYSMON other than auto or default is
// refused with a clear error before anything starts.
func TestSysmonEnvBadValue(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"serve", "--data-dir", t.TempDir()}, map[string]string{sysmonEnv: "off"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), `STRATAMQ_SYSMON="off": want auto or default`) {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	for _, v := range []string{"", "auto", "default"} {
		if err := checkSysmonEnv(map[string]string{sysmonEnv: v}); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func hasGODEBUG(env []string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GODEBUG=") })
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
		{"opt out", []string{"GOMAXPROCS=2", sysmonEnv + "=default"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			cmd := exec.Command(bin, "serve", "--listen", br)
			cmd.Env = append(withoutEnv(os.Environ(), "GODEBUG", "GOMAXPROCS", sysmonEnv),
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
				if godebug != "madvdontneed=1,"+sysmonAwakeTrace {
					t.Fatalf("PID %d runs with GODEBUG=%q, want the user's setting and %s", cmd.Process.Pid, godebug, sysmonAwakeTrace)
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
