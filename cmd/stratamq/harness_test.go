package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/stratamq/stratamq/infra/loopback"
	"github.com/stratamq/stratamq/remoting"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("fatal")
	code := m.Run()
	if sharedBin.dir != "" {
		_ = os.RemoveAll(sharedBin.dir)
	}
	os.Exit(code)
}

// sharedBin is the stratamq binary the end-to-end tests run, built once per
// test run (by the first test that needs it) into a directory TestMain
// removes at the end: a link of this binary takes seconds, and a score of
// tests each building their own made the suite minutes slower.
var sharedBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildBinary returns the path of the stratamq binary built from this
// package, building it on the first call of the run. Tests only run it:
// none may write to it or beside it.
func buildBinary(t *testing.T) string {
	t.Helper()
	sharedBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "stratamq-e2e-bin-")
		if err != nil {
			sharedBin.err = err
			return
		}
		sharedBin.dir = dir
		bin := filepath.Join(dir, "stratamq")
		build := exec.Command("go", "build", "-o", bin, ".")
		var out bytes.Buffer
		build.Stdout, build.Stderr = &out, &out
		if err := build.Run(); err != nil {
			sharedBin.err = fmt.Errorf("go build: %v\n%s", err, out.String())
			return
		}
		sharedBin.path = bin
	})
	if sharedBin.err != nil {
		t.Fatal(sharedBin.err)
	}
	return sharedBin.path
}

// testServe is one in-process `stratamq serve` on loopback ports.
type testServe struct {
	t        *testing.T
	dir      string
	nsAddr   string
	brokAddr string
	env      map[string]string
	cancel   context.CancelFunc
	done     chan int
	logs     *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freePort is a loopback port for a server started by address (see
// infra/loopback: a port of 127.0.0.1:0 may be handed out twice).
func freePort(t *testing.T) int {
	t.Helper()
	p, err := loopback.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startServe runs `stratamq serve` in-process on dir with extra env, and
// waits until the broker is registered with the name server.
func startServe(t *testing.T, dir string, extra map[string]string) *testServe {
	t.Helper()
	s := &testServe{t: t, dir: dir, logs: &syncBuffer{}}
	s.nsAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s.brokAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s.env = map[string]string{
		"STRATAMQ_DATA_DIR":       dir,
		"STRATAMQ_NAMESRV_LISTEN": s.nsAddr,
		"STRATAMQ_LISTEN":         s.brokAddr,
		"STRATAMQ_HTTP_LISTEN":    "127.0.0.1:0",
		"STRATAMQ_LOG_LEVEL":      "info",
	}
	for k, v := range extra {
		s.env[k] = v
	}
	s.start()
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *testServe) start() {
	t := s.t
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.done = make(chan int, 1)
	go func() { s.done <- run(ctx, []string{"serve"}, s.env, io.Discard, s.logs) }()
	waitFor(t, 10*time.Second, "broker registered with the name server", func() bool {
		select {
		case code := <-s.done:
			s.done <- code
			t.Fatalf("serve exited early with %d:\n%s", code, s.logs.String())
		default:
		}
		return routeExists(s.nsAddr, "TBW102")
	})
}

// stop shuts the server down gracefully and waits for it (idempotent).
func (s *testServe) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	select {
	case code := <-s.done:
		if code != 0 {
			s.t.Errorf("serve exited with %d:\n%s", code, s.logs.String())
		}
	case <-time.After(40 * time.Second):
		s.t.Errorf("serve did not stop within 40s:\n%s", s.logs.String())
	}
	s.cancel = nil
}

func (s *testServe) restart() {
	s.stop()
	s.start()
}

// ask sends req to addr on a connection of its own and returns the
// response if it came within d with code SUCCESS.
func ask(addr string, req *remoting.Command, d time.Duration) (*remoting.Command, bool) {
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := cl.Invoke(ctx, addr, req)
	return resp, err == nil && resp.Code == int32(remoting.Success)
}

func routeExists(ns, topic string) bool {
	resp, ok := ask(ns, remoting.NewRequest(remoting.GetRouteinfoByTopic, map[string]string{"topic": topic}, nil), time.Second)
	return ok && len(resp.Body) > 0
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// createTopic creates topic with n queues through the official admin API
// and waits until the name server routes it.
func (s *testServe) createTopic(topic string, n int) {
	t := s.t
	t.Helper()
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{s.nsAddr})))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(s.brokAddr),
		admin.WithReadQueueNums(n), admin.WithWriteQueueNums(n)); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	waitFor(t, 10*time.Second, "route of "+topic, func() bool { return routeExists(s.nsAddr, topic) })
}

func uniqueName(t *testing.T, prefix string) string {
	n := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s_%s_%d", prefix, n, time.Now().UnixNano()%1_000_000)
}

// consumerIDs asks the broker for a group's live client ids.
func consumerIDs(t *testing.T, brokerAddr, group string) []string {
	t.Helper()
	resp, ok := ask(brokerAddr, remoting.NewRequest(remoting.GetConsumerListByGroup, map[string]string{"consumerGroup": group}, nil), 2*time.Second)
	if !ok {
		return nil
	}
	var body remoting.ConsumerListBody
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatalf("decode consumer list: %v", err)
	}
	return body.ConsumerIDList
}

// waitCommitted waits until group's committed offsets on the first queues
// queues of topic add up to n. A push consumer commits every 5 s, and on
// Shutdown only what its offset store holds: the last messages' callbacks
// may have returned before their offsets got there. So tests wait for
// this, not for deliveries, before shutting down a consumer whose
// offsets they check. c is the group's consumer: while waiting, its
// offset store is pushed to the broker every 100 ms through
// PersistConsumerOffset, the method the client's own 5 s ticker calls
// (same requests, same offsets, taken under the store's lock), so the
// wait ends once the offsets are there rather than at the next tick or
// the one after (5-10 s a call); the broker's answer is still what is
// checked.
func waitCommitted(t *testing.T, c rocketmq.PushConsumer, brokerAddr, group, topic string, queues int, n int64) {
	t.Helper()
	persist, _ := c.(interface{ PersistConsumerOffset() error })
	var pushed time.Time
	waitFor(t, 30*time.Second, fmt.Sprintf("%s's offsets on %s to add up to %d", group, topic, n), func() bool {
		if persist != nil && time.Since(pushed) >= 100*time.Millisecond {
			_ = persist.PersistConsumerOffset() // an error: not running yet; the next poll tries again
			pushed = time.Now()
		}
		var sum int64
		for q := range queues {
			sum += max(committedOffset(t, brokerAddr, group, topic, q), 0)
		}
		return sum == n
	})
}

// committedOffset asks the broker for a group's committed offset (-1: none).
func committedOffset(t *testing.T, brokerAddr, group, topic string, queue int) int64 {
	t.Helper()
	h := remoting.QueryConsumerOffsetRequestHeader{ConsumerGroup: group, Topic: topic, QueueID: int32(queue)}
	resp, ok := ask(brokerAddr, remoting.NewRequest(remoting.QueryConsumerOffset, h.Encode(), nil), 2*time.Second)
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
	if err != nil {
		return -1
	}
	return n
}
