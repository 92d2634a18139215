package main

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/stratamq/stratamq/tier/upload"
)

// binaryServe is `stratamq serve` as a real process.
type binaryServe struct {
	cmd    *exec.Cmd
	exited chan error
	logs   *syncBuffer
	ready  time.Time // when it was seen serving (set by the test)
}

// stopClean sends b SIGTERM and fails t unless it exits cleanly within d.
func (b *binaryServe) stopClean(t *testing.T, d time.Duration) {
	t.Helper()
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, b, d); err != nil {
		t.Fatalf("exit after SIGTERM: %v; logs:\n%s", err, tail(b.logs.String()))
	}
}

func startBinary(t *testing.T, bin string, env map[string]string) *binaryServe {
	t.Helper()
	return startBinaryCmd(t, bin, "serve", env)
}

// startBinaryCmd runs `stratamq sub` (serve, namesrv, broker) with env.
func startBinaryCmd(t *testing.T, bin, sub string, env map[string]string) *binaryServe {
	t.Helper()
	cmd := exec.Command(bin, sub)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	b := &binaryServe{cmd: cmd, exited: make(chan error, 1), logs: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = b.logs, b.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return b
}

// sendRefusedForLease sends msg, again while the broker refuses it because
// its 2 s lease's renewal came late (it stops acknowledging until it
// renews: the send was not acknowledged, so a client sends it again), for
// at most 30 s.
func sendRefusedForLease(t *testing.T, p rocketmq.Producer, msg *primitive.Message) (*primitive.SendResult, error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := p.SendSync(context.Background(), msg)
		if err == nil || !strings.Contains(err.Error(), "could not renew its bucket lease in time") || time.Now().After(deadline) {
			return res, err
		}
		t.Logf("send refused while the lease renewal was late, sending again: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestE2EKill9FreshDiskNoReuse: kill -9 a broker, wipe its disk, start a
// new one on the bucket (once the dead one's lease expired): every message
// of the uploaded segments is readable byte-identical, and new messages get
// commitlog and queue offsets past everything handed out before — even the
// messages lost with the unsealed tail.
func TestE2EKill9FreshDiskNoReuse(t *testing.T) {
	// Not parallel: with tests beside it its broker missed a renewal of
	// its 2s lease and refused a send; a longer lease outlasts the
	// restart loop's 5s attempts.
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	bucketDir := filepath.Join(t.TempDir(), "bucket")
	ns := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	br := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := map[string]string{
		"STRATAMQ_NAMESRV_LISTEN":      ns,
		"STRATAMQ_LISTEN":              br,
		"STRATAMQ_HTTP_LISTEN":         "127.0.0.1:0",
		"STRATAMQ_BUCKET":              "file://" + bucketDir,
		"STRATAMQ_SEGMENT_SIZE":        "4MiB",
		"STRATAMQ_LOCAL_RETENTION":     "0",
		"STRATAMQ_CHECKPOINT_INTERVAL": "500ms",
		"STRATAMQ_LEASE_TTL":           "2s",
	}
	env["STRATAMQ_DATA_DIR"] = t.TempDir()
	first := startBinary(t, bin, env)
	waitFor(t, 20*time.Second, "first broker routed", func() bool { return routeExists(ns, "TBW102") })

	topic := uniqueName(t, "T")
	p := newClientProducer(t, ns)
	type sent struct {
		body  []byte
		phys  int64
		queue int
		qoff  int64
	}
	msgs := map[string]sent{}
	rng := rand.New(rand.NewPCG(21, 22))
	var maxPhys int64
	maxQ := map[int]int64{}
	for i := 0; i < 2400; i++ { // ≈ 12 MiB: two or more sealed 4 MiB segments
		body := make([]byte, 4500+rng.IntN(1000))
		for j := range body {
			body[j] = byte(rng.UintN(256))
		}
		res, err := sendRefusedForLease(t, p, msgWithID(topic, i, body))
		if err != nil {
			t.Fatal(err)
		}
		ph := offsetOfMsgID(t, res.OffsetMsgID)
		msgs[strconv.Itoa(i)] = sent{body, ph, res.MessageQueue.QueueId, res.QueueOffset}
		maxPhys = max(maxPhys, ph)
		maxQ[res.MessageQueue.QueueId] = max(maxQ[res.MessageQueue.QueueId], res.QueueOffset)
	}
	_ = p.Shutdown()

	// Group G consumes everything and commits; its offsets reach a checkpoint.
	group := uniqueName(t, "G")
	rg := newReceived()
	g := newPushConsumer(t, ns, group, topic, rmqconsumer.MessageSelector{}, rg, "g")
	waitFor(t, 60*time.Second, "G consumed everything", func() bool { return rg.distinct() >= len(msgs) })
	queues := 0
	for q := range maxQ {
		queues = max(queues, q+1)
	}
	waitCommitted(t, g, br, group, topic, queues, int64(len(msgs)))
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(bucketDir, "DefaultCluster", "broker-a")
	checkpointOffsets := func() map[string]int64 {
		var cp struct {
			Sections struct {
				ConsumerOffsets struct {
					OffsetTable map[string]map[string]int64 `json:"offsetTable"`
				} `json:"consumerOffsets"`
			}
		}
		c, err := os.ReadFile(filepath.Join(prefix, "meta", "checkpoint.json"))
		if err != nil || json.Unmarshal(c, &cp) != nil {
			return nil
		}
		return cp.Sections.ConsumerOffsets.OffsetTable[topic+"@"+group]
	}
	waitFor(t, 30*time.Second, "G's offsets checkpointed", func() bool {
		var sum int64
		for _, o := range checkpointOffsets() {
			sum += o
		}
		return sum == int64(len(msgs))
	})
	var uploadedEnd int64
	waitFor(t, 60*time.Second, "two segments and their queue indexes uploaded, and a checkpoint past them", func() bool {
		m, err := loadManifestFile(filepath.Join(prefix, "meta", "manifest.json"))
		if err != nil {
			return false
		}
		idx := m.Indexes(upload.KindQueueIndex)
		var end int64
		n := 0
		for _, o := range m.CommitLog() {
			if _, ok := idx[o.Base]; ok {
				n++
				end = max(end, o.End())
			}
		}
		var cp struct {
			Sections struct {
				Commitlog struct{ HWM int64 } `json:"commitlog"`
			}
		}
		c, err := os.ReadFile(filepath.Join(prefix, "meta", "checkpoint.json"))
		if err != nil || json.Unmarshal(c, &cp) != nil {
			return false
		}
		uploadedEnd = end
		return n >= 2 && cp.Sections.Commitlog.HWM >= end
	})

	// kill -9, and the disk is gone.
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	env["STRATAMQ_DATA_DIR"] = t.TempDir()
	var second *binaryServe
	waitFor(t, 30*time.Second, "a new broker starts once the dead one's lease expired", func() bool {
		b := startBinary(t, bin, env)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-b.exited:
				return false // lease still held: try again
			default:
			}
			// Serving on the broker's address (the name server may
			// still route the dead one's registration).
			if _, ok := maxQueueOffset(br, "TBW102", 0); ok {
				second = b
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = b.cmd.Process.Kill()
		<-b.exited
		return false
	})

	// G's offsets are those of the last checkpoint.
	last := checkpointOffsets()
	if len(last) == 0 {
		t.Fatal("no offsets of G in the last checkpoint")
	}
	for q, want := range last {
		qi, _ := strconv.Atoi(q)
		if got := committedOffset(t, br, group, topic, qi); got != want {
			t.Fatalf("after the loss G's offset on queue %d is %d, the last checkpoint says %d", qi, got, want)
		}
	}

	r := newReceived()
	newPushConsumer(t, ns, uniqueName(t, "F"), topic, rmqconsumer.MessageSelector{}, r, "f")
	want := 0
	for _, m := range msgs {
		if m.phys < uploadedEnd {
			want++
		}
	}
	waitFor(t, 90*time.Second, "every message of the uploaded segments read", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for id, m := range msgs {
			if m.phys < uploadedEnd && len(r.msgs[id]) == 0 {
				return false
			}
		}
		return true
	})
	r.mu.Lock()
	for id, m := range msgs {
		if m.phys < uploadedEnd && !bytes.Equal(r.msgs[id][0].Body, m.body) {
			r.mu.Unlock()
			t.Fatalf("message %s differs after the loss", id)
		}
	}
	r.mu.Unlock()
	t.Logf("%d of %d messages were in uploaded segments and survived; %d were in the lost tail", want, len(msgs), len(msgs)-want)

	p2 := newClientProducer(t, ns)
	for i := 0; i < 20; i++ {
		res, err := sendRefusedForLease(t, p2, msgWithID(topic, 100000+i, []byte("after the loss")))
		if err != nil {
			t.Fatalf("send after restore: %v\n%s", err, second.logs.String())
		}
		if ph := offsetOfMsgID(t, res.OffsetMsgID); ph <= maxPhys {
			t.Fatalf("commitlog offset %d reused (old messages went up to %d)", ph, maxPhys)
		}
		if q := res.MessageQueue.QueueId; res.QueueOffset <= maxQ[q] {
			t.Fatalf("queue %d offset %d reused (old messages went up to %d)", q, res.QueueOffset, maxQ[q])
		}
	}
	// F reads on across the gap the lost tail left in each queue into the
	// new messages. Waiting for them also orders F's last pull before its
	// Shutdown in Cleanup: rocketmq-client-go closes a process queue's
	// channel in Shutdown while a pull that returned messages may still be
	// sending on it (a race in the client, seen by -race), so no consumer
	// may be shut down while messages are still arriving for it.
	waitFor(t, 60*time.Second, "F read the 20 messages sent after the loss", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := 0; i < 20; i++ {
			if len(r.msgs[strconv.Itoa(100000+i)]) == 0 {
				return false
			}
		}
		return true
	})
}
