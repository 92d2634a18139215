package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestReadProcSnapOfThisProcess: the snapshot of a live process grows with
// what it does: a thousand write syscalls show in its syscall count, and
// its context switches (summed over its threads) and CPU ticks never go
// back.
func TestReadProcSnapOfThisProcess(t *testing.T) {
	a, err := readProcSnap(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	b, err := readProcSnap(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if b.syscalls-a.syscalls < 1000 {
		t.Fatalf("syscalls grew by %d over 1000 writes", b.syscalls-a.syscalls)
	}
	if b.ticks < a.ticks || b.switches < a.switches || a.switches <= 0 {
		t.Fatalf("snapshots %+v then %+v", a, b)
	}
	if _, err := readProcSnap(1 << 30); err == nil {
		t.Fatal("a process that does not exist gave a snapshot")
	}
}

// TestServerCostInTheBenchLine: the cost per message, per MiB, per
// context switch and syscall, as the bench's JSON line carries it.
func TestServerCostInTheBenchLine(t *testing.T) {
	a := procSnap{ticks: 100, switches: 50, syscalls: 1000}
	b := procSnap{ticks: 300, switches: 250, syscalls: 5000} // 2 s of CPU
	r := &benchResult{Mode: "produce", Messages: 400_000}
	r.serverCost = costOf(a, b, 400_000, 400_000*1024)
	line, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"server_cpu_us_per_msg":5`, `"server_cpu_us_per_mib":5120`, `"server_ctx_switches_per_msg":0.0005`, `"server_rw_syscalls_per_msg":0.01`} {
		if !strings.Contains(string(line), want) {
			t.Fatalf("bench line %s lacks %s", line, want)
		}
	}
	if costOf(a, b, 0, 0) != nil {
		t.Fatal("a cost per message of no message")
	}
	line, _ = json.Marshal(&benchResult{Mode: "produce"})
	if strings.Contains(string(line), "server_") {
		t.Fatalf("without --server-pid the line carries %s", line)
	}
}
