package sysmon

import (
	"errors"
	"strconv"
	"strings"
)

// AwakeTrace is the GODEBUG schedtrace period (ms) that keeps the Go
// runtime's system monitor out of its deep sleep: any schedtrace above zero
// does (runtime/proc.go, sysmon), and this one, the largest the runtime
// takes (int32), prints its scheduler summary to stderr only once every
// 24.8 days of the host's monotonic clock.
const AwakeTrace = "schedtrace=2147483647"

// Env is the knob: "auto" (or unset) keeps the monitor awake where it
// pays, "default" leaves the runtime as it is; CheckEnv refuses anything
// else.
const Env = "STRATAMQ_SYSMON"

// CheckEnv reports a bad STRATAMQ_SYSMON value.
func CheckEnv(v string) error {
	switch v {
	case "", "auto", "default":
		return nil
	default:
		return errors.New(Env + "=" + strconv.Quote(v) + ": want auto or default")
	}
}

// Mode names, for the start-up log, how a process with this GODEBUG runs
// its monitor.
func Mode(godebug string) string {
	if strings.Contains(godebug, AwakeTrace) {
		return "awake"
	}
	return "default"
}

// AwakeEnv returns the environment to re-execute a serving process (args,
// env; procs is its GOMAXPROCS) with so that the runtime's system monitor
// never deep-sleeps, or nil when the process should run as it is.
//
// Why: a broker answering a client in round trips goes fully idle between
// request batches thousands of times a second. Each time, the monitor
// deep-sleeps on a futex, and the first system call after the idle spell
// must wake it (a futex wake and, on a VM, an IPI), after which it polls
// every 20 µs until the next idle spell. Kept awake, it backs off to one
// wake-up every 10 ms. On two vCPUs this took 10-14 % off the broker's CPU
// per message end to end (a message at a time) and up to 8 % off pipelined
// single sends, depending on how often the process idled between batches
// (docs/benchmarks.md).
//
// Not with one P: the same monitor hands a P held by a blocking system
// call (an fsync, a cold read) to other goroutines, and with one P and the
// monitor at its 10 ms pace a sync-flush broker lost a quarter of its
// throughput and end-to-end p99 went from ~2 to ~6 ms. Nor when GODEBUG
// already names schedtrace (the user's choice; also what makes the
// re-executed process not re-execute again), nor for a bad STRATAMQ_SYSMON
// (the command refuses it).
func AwakeEnv(args, env []string, procs int) []string {
	if len(args) < 2 || (args[1] != "serve" && args[1] != "broker") {
		return nil
	}
	if procs < 2 {
		return nil
	}
	godebug, at := "", -1
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case Env:
			if v != "" && v != "auto" {
				return nil
			}
		case "GODEBUG":
			godebug, at = v, i
		}
	}
	for _, kv := range strings.Split(godebug, ",") {
		if k, _, _ := strings.Cut(kv, "="); strings.TrimSpace(k) == "schedtrace" {
			return nil
		}
	}
	out := append([]string(nil), env...)
	if at < 0 {
		return append(out, "GODEBUG="+AwakeTrace)
	}
	if godebug == "" {
		out[at] = "GODEBUG=" + AwakeTrace
	} else {
		out[at] = "GODEBUG=" + godebug + "," + AwakeTrace
	}
	return out
}
