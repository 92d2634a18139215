package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestE2EBinaryServeStartsAndDrains builds the real binary, runs
// `stratamq serve` on an empty data dir, waits until both ports answer and
// the broker is routed, then sends SIGTERM and expects a clean exit.
// Start-up time is logged (the 2 s goal is measured, not asserted).
func TestE2EBinaryServeStartsAndDrains(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	ns := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	br := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "serve", "--listen", br)
	cmd.Env = append(os.Environ(),
		"STRATAMQ_DATA_DIR="+t.TempDir(),
		"STRATAMQ_NAMESRV_LISTEN="+ns,
		"STRATAMQ_HTTP_LISTEN=127.0.0.1:0",
	)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitFor(t, 20*time.Second, "ports open", func() bool { return dialable(ns) && dialable(br) })
	portsOpen := time.Since(start)
	waitFor(t, 20*time.Second, "broker routed", func() bool { return routeExists(ns, "TBW102") })
	t.Logf("serve on an empty data dir: ports open after %v, broker routed after %v", portsOpen, time.Since(start))

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("serve exited with %v after SIGTERM:\n%s", err, logs.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("serve did not exit within 40s of SIGTERM:\n%s", logs.String())
	}
}

func dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
