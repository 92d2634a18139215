package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"

	"github.com/stratamq/stratamq/tier/tiertest"
)

// slowProxy forwards loopback TCP connections to upstream; while rate is
// set, bytes towards upstream pass at most rate bytes a second per
// connection (a bucket whose uploads crawl but whose small requests still
// get through).
type slowProxy struct {
	ln   net.Listener
	rate atomic.Int64
	wg   sync.WaitGroup
}

func startSlowProxy(t *testing.T, upstream string) *slowProxy {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.serve(c, upstream) })
		}
	})
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *slowProxy) serve(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(c, u)
		c.Close()
		close(done)
	}()
	buf := make([]byte, 1024)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := u.Write(buf[:n]); werr != nil {
				break
			}
			if r := p.rate.Load(); r > 0 {
				time.Sleep(time.Duration(int64(n) * int64(time.Second) / r)) // the throttle itself, not a wait for a condition
			}
		}
		if err != nil {
			break
		}
	}
	u.Close()
	<-done
}

// waitExit waits for the process to end and returns its exit error.
func waitExit(t *testing.T, b *binaryServe, d time.Duration) error {
	t.Helper()
	select {
	case err := <-b.exited:
		return err
	case <-time.After(d):
		t.Fatalf("process did not exit within %v; logs:\n%s", d, b.logs.String())
		return nil
	}
}

// TestE2EDrainTimeoutIsNotClean (issue 9 item 2, the real binary): a
// SIGTERM whose upload cannot finish within STRATAMQ_SHUTDOWN_TIMEOUT
// exits non-zero and leaves the tail on disk; the bucket's checkpoint names
// the range, so a broker started on an empty disk refuses (instead of
// starting without the tail, as 760f746 did after writing clean:true and
// exiting 0); the old disk restarted uploads the tail, and only then does
// an empty disk start, with every message.
func TestE2EDrainTimeoutIsNotClean(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	endpoint, ak, sk := tiertest.StartVersityGW(t)
	proxy := startSlowProxy(t, strings.TrimPrefix(endpoint, "http://"))
	ns := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	br := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := map[string]string{
		"AWS_ACCESS_KEY_ID":            ak,
		"AWS_SECRET_ACCESS_KEY":        sk,
		"AWS_REGION":                   "us-east-1",
		"STRATAMQ_BUCKET":              fmt.Sprintf("s3://%s/drain?endpoint=http://%s&region=us-east-1", tiertest.BucketName(t), proxy.ln.Addr()),
		"STRATAMQ_NAMESRV_LISTEN":      ns,
		"STRATAMQ_LISTEN":              br,
		"STRATAMQ_HTTP_LISTEN":         "127.0.0.1:0",
		"STRATAMQ_SEGMENT_SIZE":        "4MiB",
		"STRATAMQ_CHECKPOINT_INTERVAL": "500ms",
		"STRATAMQ_LEASE_TTL":           "3s",
		"STRATAMQ_SHUTDOWN_TIMEOUT":    "6s",
	}
	withDir := func(dir string) map[string]string {
		e := maps.Clone(env)
		e["STRATAMQ_DATA_DIR"] = dir
		return e
	}
	oldDir := t.TempDir()
	first := startBinary(t, bin, withDir(oldDir))
	waitFor(t, 30*time.Second, "broker routed", func() bool { return routeExists(ns, "TBW102") })
	topic := uniqueName(t, "T")
	p := newClientProducer(t, ns)
	rng := rand.New(rand.NewPCG(5, 6))
	bodies := map[string][]byte{}
	for i := range 200 { // ≈ 800 KiB, all in the active segment
		body := make([]byte, 4096)
		for j := range body {
			body[j] = byte(rng.UintN(256))
		}
		if _, err := p.SendSync(context.Background(), msgWithID(topic, i, body)); err != nil {
			t.Fatal(err)
		}
		bodies[strconv.Itoa(i)] = body
	}
	_ = p.Shutdown()

	// The bucket slows to a crawl (64 KB/s up): small checkpoints pass,
	// the segment upload cannot finish within the shutdown deadline.
	proxy.rate.Store(64 << 10)
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := waitExit(t, first, 60*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("an incomplete drain exited %v, want a non-zero exit; logs:\n%s", err, first.logs.String())
	}
	if !strings.Contains(first.logs.String(), "not uploaded") {
		t.Fatalf("the logs do not say what was not uploaded:\n%s", first.logs.String())
	}
	if segs, _ := filepath.Glob(filepath.Join(oldDir, "store", "commitlog", "0*")); len(segs) == 0 {
		t.Fatal("the tail is not on the local disk")
	}
	proxy.rate.Store(0)

	// An empty disk refuses, naming the range and the way out.
	empty := startBinary(t, bin, withDir(t.TempDir()))
	if err := waitExit(t, empty, 60*time.Second); err == nil {
		t.Fatalf("a broker on an empty disk started over an incomplete drain; logs:\n%s", empty.logs.String())
	}
	for _, want := range []string{"refusing to start", "commitlog offsets [0, ", "STRATAMQ_ACCEPT_LOSS"} {
		if !strings.Contains(empty.logs.String(), want) {
			t.Fatalf("the refusal does not say %q; logs:\n%s", want, empty.logs.String())
		}
	}

	// The old disk comes back and uploads the tail; its stop is clean.
	again := startBinary(t, bin, withDir(oldDir))
	waitFor(t, 60*time.Second, "old disk routed", func() bool { return routeExists(ns, "TBW102") })
	again.stopClean(t, 60*time.Second) // a complete drain

	// Now an empty disk starts and serves every message.
	fresh := startBinary(t, bin, withDir(t.TempDir()))
	waitFor(t, 60*time.Second, "fresh disk routed", func() bool { return routeExists(ns, "TBW102") })
	r := newReceived()
	newPushConsumer(t, ns, uniqueName(t, "G"), topic, rmqconsumer.MessageSelector{}, r, "fresh")
	waitFor(t, 2*time.Minute, "every message read back on the fresh disk", func() bool { return r.distinct() >= len(bodies) })
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, want := range bodies {
		if ms := r.msgs[id]; len(ms) == 0 || !bytes.Equal(ms[0].Body, want) {
			t.Fatalf("message %s missing or different after the restore", id)
		}
	}
	_ = fresh
}
