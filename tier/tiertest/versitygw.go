package tiertest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/loopback"
)

// VersityGWVersion is the versitygw release the tests are written against;
// .ci/versitygw.sh installs it.
const VersityGWVersion = "v1.8.0"

// FindVersityGW returns the path of the versitygw binary: $PATH first, then
// $(go env GOPATH)/bin. It returns "" if there is none.
func FindVersityGW() string {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	var dirs []string
	if gp := os.Getenv("GOPATH"); gp != "" {
		dirs = append(dirs, filepath.SplitList(gp)...)
	} else if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		dirs = append(dirs, filepath.SplitList(strings.TrimSpace(string(out)))...)
	} else if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "bin", "versitygw")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// RequireVersityGW returns the versitygw binary's path. When it is missing
// the test is skipped with a loud message, except when the CI environment
// variable is non-empty: then the test fails, because CI must run it.
func RequireVersityGW(t testing.TB) string {
	t.Helper()
	p := FindVersityGW()
	if p != "" {
		return p
	}
	msg := "versitygw binary not found in $PATH or $(go env GOPATH)/bin; " +
		"install it with .ci/versitygw.sh (go install github.com/versity/versitygw/cmd/versitygw@" + VersityGWVersion + ")"
	if os.Getenv("CI") != "" {
		t.Fatal("CI is set and " + msg)
	}
	t.Skip("SKIPPING real-S3 tests: " + msg)
	return ""
}

// StartVersityGW starts a versitygw S3 server on a free loopback port with a
// fresh temporary root directory and random root credentials, waits until
// it answers HTTP, and stops it (SIGTERM, then SIGKILL) when the test ends.
// It skips or fails like RequireVersityGW when the binary is missing.
// endpoint is "http://127.0.0.1:PORT"; the region is us-east-1.
func StartVersityGW(t testing.TB) (endpoint, accessKey, secretKey string) {
	t.Helper()
	bin := RequireVersityGW(t)
	accessKey = "AK" + randHex(t, 8)
	secretKey = randHex(t, 20)
	root := t.TempDir()

	// Another process may still take the port before versitygw binds it,
	// so try a few times.
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("versitygw: free port: %v", err)
		}
		endpoint = "http://127.0.0.1:" + port
		if lastErr = startVersityGW(t, bin, port, accessKey, secretKey, root, endpoint); lastErr == nil {
			return endpoint, accessKey, secretKey
		}
		t.Logf("versitygw: %v; retrying on another port", lastErr)
	}
	t.Fatalf("versitygw did not start: %v", lastErr)
	return "", "", ""
}

func startVersityGW(t testing.TB, bin, port, ak, sk, root, endpoint string) error {
	out := &capBuffer{max: 64 << 10}
	cmd := exec.Command(bin, "--port", "127.0.0.1:"+port, "--access", ak, "--secret", sk,
		"--keep-alive", "--quiet", "posix", root)
	cmd.Stdout, cmd.Stderr = out, out
	// The credentials are on the command line of a loopback-only test
	// server; they are random per run and never logged.
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}

	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		// Any HTTP answer (403 for an unauthenticated GET /) means ready.
		resp, err := client.Get(endpoint + "/")
		if err == nil {
			resp.Body.Close()
			t.Cleanup(stop)
			return nil
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("not ready after 20s: %v; output:\n%s", err, out.String())
		}
		select {
		case werr := <-exited:
			exited <- werr // for stop
			return fmt.Errorf("exited early (%v); output:\n%s", werr, out.String())
		case <-tick.C:
		}
	}
}

// freePort is a loopback port for versitygw (see infra/loopback).
func freePort() (string, error) {
	p, err := loopback.Port()
	return strconv.Itoa(p), err
}

func randHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// BucketName returns a fresh, valid S3 bucket name for t.
func BucketName(t testing.TB) string {
	return "t-" + randHex(t, 10)
}

// capBuffer keeps the first max bytes of a process's output.
type capBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
