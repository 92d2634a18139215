package sysmon

import (
	"slices"
	"strings"
	"testing"
)

func TestAwakeEnv(t *testing.T) {
	base := []string{"PATH=/bin", "HOME=/root"}
	for _, tc := range []struct {
		name  string
		args  []string
		env   []string
		procs int
		want  string // the GODEBUG to re-execute with; "" for none
	}{
		{"serve", []string{"stratamq", "serve"}, base, 2, AwakeTrace},
		{"broker", []string{"stratamq", "broker", "--flush", "sync"}, base, 4, AwakeTrace},
		{"one P", []string{"stratamq", "serve"}, base, 1, ""},
		{"namesrv", []string{"stratamq", "namesrv"}, base, 2, ""},
		{"bench", []string{"stratamq", "bench", "produce"}, base, 2, ""},
		{"no command", []string{"stratamq"}, base, 2, ""},
		{"opt out", []string{"stratamq", "serve"}, append(slices.Clone(base), Env+"=default"), 2, ""},
		{"auto", []string{"stratamq", "serve"}, append(slices.Clone(base), Env+"=auto"), 2, AwakeTrace},
		{"bad value", []string{"stratamq", "serve"}, append(slices.Clone(base), Env+"=off"), 2, ""},
		{"other GODEBUG kept", []string{"stratamq", "serve"}, append(slices.Clone(base), "GODEBUG=madvdontneed=1"), 2,
			"madvdontneed=1," + AwakeTrace},
		{"empty GODEBUG", []string{"stratamq", "serve"}, append(slices.Clone(base), "GODEBUG="), 2, AwakeTrace},
		{"user schedtrace wins", []string{"stratamq", "serve"}, append(slices.Clone(base), "GODEBUG=gctrace=1,schedtrace=1000"), 2, ""},
		{"user schedtrace=0 wins", []string{"stratamq", "serve"}, append(slices.Clone(base), "GODEBUG=schedtrace=0"), 2, ""},
		{"re-executed", []string{"stratamq", "serve"}, append(slices.Clone(base), "GODEBUG="+AwakeTrace), 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.env)
			got := AwakeEnv(tc.args, tc.env, tc.procs)
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

// TestCheckEnv: auto, default and unset are taken; anything else is
// refused with the variable and the value named.
func TestCheckEnv(t *testing.T) {
	for _, v := range []string{"", "auto", "default"} {
		if err := CheckEnv(v); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
	}
	if err := CheckEnv("off"); err == nil || err.Error() != `STRATAMQ_SYSMON="off": want auto or default` {
		t.Fatalf("off: %v", err)
	}
}

func TestMode(t *testing.T) {
	if Mode("madvdontneed=1,"+AwakeTrace) != "awake" || Mode("") != "default" || Mode("schedtrace=1000") != "default" {
		t.Fatal("Mode")
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
