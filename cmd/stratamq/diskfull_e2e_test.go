package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory and unmounts
// it in Cleanup. Without the privilege to mount it skips the test, loudly,
// unless CI is set: then it fails.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("cannot mount a %d-byte tmpfs on %s (%v: %s): THIS TEST DID NOT RUN; it needs root (or CAP_SYS_ADMIN)", size, dir, err, bytes.TrimSpace(out))
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("!!! SKIPPED: " + msg)
	}
	t.Cleanup(func() {
		// Registered after the broker's kill in startBinary: runs first. A
		// killed process's files may still be open for a moment.
		for i := 0; i < 50; i++ {
			if exec.Command("umount", dir).Run() == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// freeBytes is what statfs says an unprivileged writer may still add.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// writeFiller writes a file of n bytes (n < 0: until the disk is full)
// and returns how many it wrote.
func writeFiller(t *testing.T, path string, n int64) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := bytes.Repeat([]byte{0xa5}, 1<<20)
	var done int64
	for n < 0 || done < n {
		b := buf
		if n >= 0 {
			b = buf[:min(int64(len(buf)), n-done)]
		}
		k, err := f.Write(b)
		done += int64(k)
		if errors.Is(err, syscall.ENOSPC) && n < 0 {
			return done
		}
		if err != nil {
			t.Fatalf("filler %s: %v", path, err)
		}
	}
	return done
}

// TestE2EDiskFullRecovers runs the real binary on a 64 MiB tmpfs: sends
// are refused with SERVICE_NOT_AVAILABLE and a remark naming the full disk
// once free space drops below STRATAMQ_MIN_FREE_SPACE; with the disk then
// filled to the last byte the store's checkpoint write fails with ENOSPC
// too; once the filler is deleted, sends succeed again without a restart,
// and every acknowledged message reads back byte-identical, also after a
// restart.
func TestE2EDiskFullRecovers(t *testing.T) {
	// Not parallel: it failed once beside other tests (refused at 4 MiB
	// free, then its flusher never hit ENOSPC), not yet understood.
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dataDir := mountTmpfs(t, 64<<20)
	bin := buildBinary(t)
	ns := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := map[string]string{
		"STRATAMQ_NAMESRV_LISTEN": ns,
		"STRATAMQ_LISTEN":         fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"STRATAMQ_HTTP_LISTEN":    "127.0.0.1:0",
		"STRATAMQ_DATA_DIR":       dataDir,
		"STRATAMQ_BUCKET":         "file://" + filepath.Join(t.TempDir(), "bucket"), // not on the tmpfs
		"STRATAMQ_SEGMENT_SIZE":   "4MiB",
		"STRATAMQ_MIN_FREE_SPACE": "4MiB",
		"STRATAMQ_FLUSH_INTERVAL": "500ms",
	}
	br := startBinary(t, bin, env)
	waitFor(t, 30*time.Second, "broker routed", func() bool { return routeExists(ns, "TBW102") })
	p := newClientProducer(t, ns)
	topic := uniqueName(t, "DF")
	rng := rand.New(rand.NewPCG(6, 11))
	acked := map[string][]byte{}
	id := 0
	// probe sends to one queue (queue >= 0), p to any.
	probe := newClientProducer(t, ns, rmqproducer.WithQueueSelector(rmqproducer.NewManualQueueSelector()))
	sendTo := func(queue, size int) error {
		id++
		body := make([]byte, size)
		for j := range body {
			body[j] = byte(rng.UintN(256))
		}
		m := msgWithID(topic, id, body)
		var err error
		if queue >= 0 {
			m.Queue = &primitive.MessageQueue{Topic: topic, BrokerName: "broker-a", QueueId: queue}
			_, err = probe.SendSync(context.Background(), m)
		} else {
			_, err = p.SendSync(context.Background(), m)
		}
		if err == nil {
			acked[strconv.Itoa(id)] = body
		}
		return err
	}
	send := func(size int) error { return sendTo(-1, size) }
	if err := send(1000); err != nil {
		t.Fatalf("first send: %v\n%s", err, br.logs.String())
	}
	// Leave about 6 MiB free, then send until the reserve refuses.
	ballast := filepath.Join(dataDir, "ballast")
	writeFiller(t, ballast, freeBytes(t, dataDir)-6<<20)
	time.Sleep(200 * time.Millisecond) // the broker's free-space estimate is at most 100ms old
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		err = send(32 << 10)
	}
	refused := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "CODE: 14") && strings.Contains(err.Error(), "disk is full")
	}
	if !refused(err) || !strings.Contains(err.Error(), "free") {
		t.Fatalf("filling the disk: %v; want SERVICE_NOT_AVAILABLE (14) with a remark naming the full disk and the free space", err)
	}
	if free := freeBytes(t, dataDir); free < 3<<20 {
		t.Fatalf("refused at %d bytes free: the 4 MiB reserve was not kept", free)
	}
	t.Logf("refused at %d bytes free: %v", freeBytes(t, dataDir), err)

	// Room again for one message, then the disk is filled to the last byte
	// before the next flush round: its checkpoint write fails for space.
	// The message goes to a queue whose consumequeue file has room for its
	// entry in a page it already has (tmpfs allocates by page), so that
	// the entry's write succeeds and the checkpoint's is the one that fails.
	filler := filepath.Join(dataDir, "filler")
	owed := false
	attempts := 0
	for attempt := 0; attempt < 5 && !owed; attempt++ {
		attempts++
		os.Remove(ballast)
		os.Remove(filler)
		time.Sleep(700 * time.Millisecond) // a flush round: every entry is in its file
		q := roomyQueue(t, filepath.Join(dataDir, "store", "consumequeue", topic))
		waitFor(t, 10*time.Second, "a send to be accepted", func() bool { return sendTo(q, 1000) == nil })
		writeFiller(t, filler, -1)
		waitFor(t, 10*time.Second, "sends to be refused on the full disk", func() bool {
			err = send(1000)
			return refused(err)
		})
		// The remark names the failed flush work once a round ran on the
		// full disk (500ms flush interval). If the round that checkpointed the
		// accepted message came before the filler, only the reserve refuses:
		// try again. The wait is for a condition, bounded: a loaded machine
		// (CI beside other jobs) can delay a round by seconds.
		deadline := time.Now().Add(10 * time.Second)
		for !owed && time.Now().Before(deadline) {
			err = send(1000)
			owed = refused(err) && strings.Contains(err.Error(), "no space left on device")
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !owed {
		t.Fatalf("the flusher's work never hit ENOSPC: %v\n%s", err, br.logs.String())
	}
	if !strings.Contains(err.Error(), "write checkpoint") {
		t.Fatalf("refusal on the full disk: %v; want the failed checkpoint write named", err)
	}
	t.Logf("refused with the checkpoint owed: %v", err)

	// Space freed: sends succeed again without a restart.
	os.Remove(filler)
	freed := time.Now()
	waitFor(t, 15*time.Second, "sends to succeed again after space was freed", func() bool {
		err := send(32 << 10)
		if err != nil && !refused(err) {
			t.Fatalf("send after space was freed: %v", err)
		}
		return err == nil
	})
	t.Logf("sends resumed %v after the filler was deleted", time.Since(freed).Round(time.Millisecond))
	for i := 0; i < 20; i++ {
		if err := send(16 << 10); err != nil {
			t.Fatalf("send after recovery: %v", err)
		}
	}
	p.Shutdown()
	probe.Shutdown()
	logs := br.logs.String()
	// Episodes: the first fill, then one per attempt at owing the
	// flusher's work (each frees the space and fills it again).
	if n := strings.Count(logs, "store: disk full; refusing writes"); n < 1 || n > 1+attempts {
		t.Errorf("%d log lines entering the disk-full state, want one per episode (at most %d)", n, 1+attempts)
	}
	if !strings.Contains(logs, "store: disk space available again") {
		t.Errorf("no log line leaving the disk-full state:\n%s", logs)
	}

	readAll := func(who string) {
		t.Helper()
		r := newReceived()
		c := newPushConsumer(t, ns, uniqueName(t, "G"+who), topic, rmqconsumer.MessageSelector{}, r, who)
		waitFor(t, 60*time.Second, "every acknowledged message read ("+who+")", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			for k := range acked {
				if len(r.msgs[k]) == 0 {
					return false
				}
			}
			return true
		})
		r.mu.Lock()
		for k, body := range acked {
			if !bytes.Equal(r.msgs[k][0].Body, body) {
				r.mu.Unlock()
				t.Fatalf("%s: message %s differs", who, k)
			}
		}
		r.mu.Unlock()
		shutdownWhenQuiet(t, c, r)
	}
	readAll("live")

	// And after a restart on the same disk.
	br.stopClean(t, 40*time.Second)
	br = startBinary(t, bin, env)
	waitFor(t, 30*time.Second, "broker routed after the restart", func() bool { return routeExists(ns, "TBW102") })
	readAll("restarted")
	t.Logf("%d acknowledged messages read back, live and after a restart", len(acked))
}

// roomyQueue returns a queue of the topic whose consumequeue dir (cqDir)
// has a last file with room for one more 20-byte entry in its last
// page, or -1 (any queue) when none has.
func roomyQueue(t *testing.T, cqDir string) int {
	t.Helper()
	ids, err := os.ReadDir(cqDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ids {
		q, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		files, err := os.ReadDir(filepath.Join(cqDir, d.Name()))
		if err != nil || len(files) == 0 {
			continue
		}
		fi, err := files[len(files)-1].Info()
		if err != nil {
			continue
		}
		if r := fi.Size() % 4096; r > 0 && r+20 <= 4096 {
			return q
		}
	}
	return -1
}

// shutdownWhenQuiet shuts c down once no delivery arrived for a moment
// (see newPushConsumer on why a consumer is not shut down while messages
// still arrive).
func shutdownWhenQuiet(t *testing.T, c rocketmq.PushConsumer, r *received) {
	t.Helper()
	last := r.n.Load()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(300 * time.Millisecond)
		n := r.n.Load()
		if n == last {
			break
		}
		last = n
	}
	_ = c.Shutdown()
}
