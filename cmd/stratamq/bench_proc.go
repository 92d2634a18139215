package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procSnap is what a server process has spent so far, from /proc (Linux):
// CPU clock ticks (user + system, /proc/PID/stat), context switches
// (voluntary and involuntary, summed over its threads: /proc/PID/status
// counts only the first), and read- and write-type syscalls of the whole
// process, sockets included (/proc/PID/io syscr + syscw; epoll and futex
// calls are not counted there).
type procSnap struct {
	ticks, switches, syscalls int64
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go runs on (sysconf(_SC_CLK_TCK) without cgo).
const clockTicks = 100

func readProcSnap(pid int) (procSnap, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	var s procSnap
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return s, fmt.Errorf("read the server's CPU time: %w", err)
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields are counted after its closing one.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return s, fmt.Errorf("read the server's CPU time: /proc/%d/stat does not parse", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 { // utime and stime are fields 14 and 15: 12 and 13 after the name
		return s, fmt.Errorf("read the server's CPU time: /proc/%d/stat has %d fields after the name", pid, len(f))
	}
	for _, k := range []int{11, 12} {
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return s, fmt.Errorf("read the server's CPU time: /proc/%d/stat: %w", pid, err)
		}
		s.ticks += v
	}
	tasks, err := filepath.Glob(filepath.Join(dir, "task", "*", "status"))
	if err != nil || len(tasks) == 0 {
		return s, fmt.Errorf("read the server's context switches: no thread of process %d", pid)
	}
	for _, t := range tasks {
		n, err := sumFields(t, "voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")
		if err != nil {
			continue // a thread that exited since the listing
		}
		s.switches += n
	}
	if s.syscalls, err = sumFields(filepath.Join(dir, "io"), "syscr:", "syscw:"); err != nil {
		return s, fmt.Errorf("read the server's syscalls: %w", err)
	}
	return s, nil
}

// sumFields adds the values of the "name: value" lines of path named in
// names.
func sumFields(path string, names ...string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var sum int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			k, v, ok = strings.Cut(sc.Text(), " ")
		}
		for _, n := range names {
			if ok && k == n {
				x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("%s: %s: %w", path, n, err)
				}
				sum += x
			}
		}
	}
	return sum, sc.Err()
}

// serverCost is what the server spent per message between two snapshots.
type serverCost struct {
	CPUMicrosPerMsg float64 `json:"server_cpu_us_per_msg"`
	CPUMicrosPerMiB float64 `json:"server_cpu_us_per_mib"`
	SwitchesPerMsg  float64 `json:"server_ctx_switches_per_msg"`
	SyscallsPerMsg  float64 `json:"server_rw_syscalls_per_msg"`
}

// costOf divides what the server spent from a to b by msgs messages of
// bytes bytes in all; nil without messages.
func costOf(a, b procSnap, msgs, bytes int64) *serverCost {
	if msgs <= 0 {
		return nil
	}
	us := float64(b.ticks-a.ticks) * 1e6 / clockTicks
	c := &serverCost{
		CPUMicrosPerMsg: us / float64(msgs),
		SwitchesPerMsg:  float64(b.switches-a.switches) / float64(msgs),
		SyscallsPerMsg:  float64(b.syscalls-a.syscalls) / float64(msgs),
	}
	if bytes > 0 {
		c.CPUMicrosPerMiB = us / (float64(bytes) / (1 << 20))
	}
	return c
}
