package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// TestE2EManyQueuesUnderLowFDLimit (issue 9 item 7): the real binary under
// a low soft and hard RLIMIT_NOFILE takes more queues than the limit, each
// with a message, and after a restart recovers them and serves every
// queue. Before, every consumequeue file kept a descriptor open, so the
// broker ran out of them (and could not restart). The CI form runs 1
// topic of 512 queues under a limit of 128 (each new queue file costs two
// fsyncs, its own and its directory's); STRATAMQ_LONG=1 runs the reported
// case, 5 topics of 1,024 queues under 1024:1024.
func TestE2EManyQueuesUnderLowFDLimit(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("needs prlimit (util-linux) to start the broker with a low fd limit")
	}
	topics, queues, limit := 1, 512, 128
	if os.Getenv("STRATAMQ_LONG") == "1" {
		topics, queues, limit = 5, 1024, 1024
	}
	bin := buildBinary(t)
	// startBinary runs `<bin> serve`: a wrapper that lowers the limit first.
	wrapper := filepath.Join(t.TempDir(), "stratamq-limited")
	script := fmt.Sprintf("#!/bin/sh\nexec %s --nofile=%d:%d %s \"$@\"\n", prlimit, limit, limit, bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	br := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := map[string]string{
		"STRATAMQ_NAMESRV_LISTEN": ns,
		"STRATAMQ_LISTEN":         br,
		"STRATAMQ_HTTP_LISTEN":    "127.0.0.1:0",
		"STRATAMQ_DATA_DIR":       t.TempDir(),
		"STRATAMQ_BUCKET":         "file://" + filepath.Join(t.TempDir(), "bucket"),
		"STRATAMQ_SEGMENT_SIZE":   "4MiB",
	}
	srv := startBinary(t, wrapper, env)
	waitFor(t, 30*time.Second, "broker routed", func() bool { return routeExists(ns, "TBW102") })
	if !strings.Contains(srv.logs.String(), fmt.Sprintf("soft=%d hard=%d", limit, limit)) {
		t.Fatalf("the broker did not log its fd limit as %d/%d:\n%s", limit, limit, srv.logs.String())
	}

	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	call := func(req *remoting.Command) (*remoting.Command, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return cl.Invoke(ctx, br, req)
	}
	topic := func(i int) string { return fmt.Sprintf("Wide%d", i) }
	for i := range topics {
		h := remoting.CreateTopicRequestHeader{Topic: topic(i), DefaultTopic: "TBW102", ReadQueueNums: int32(queues),
			WriteQueueNums: int32(queues), Perm: 6, TopicFilterType: "SINGLE_TAG"}
		resp, err := call(remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil))
		if err != nil || resp.Code != int32(remoting.Success) {
			t.Fatalf("create %s: %v %+v", topic(i), err, resp)
		}
	}
	// Every queue gets a message (a few senders at once), so every queue
	// has a consumequeue file.
	forAll := func(what string, do func(topic string, q int) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := w; n < topics*queues; n += 8 {
					if err := do(topic(n/queues), n%queues); err != nil {
						errs <- fmt.Errorf("%s %s/%d: %w", what, topic(n/queues), n%queues, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%v\n%s", err, srv.logs.String())
		}
	}
	send := func(tp string, q int) error {
		h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: tp, DefaultTopic: "TBW102",
			DefaultTopicQueueNums: 4, QueueID: int32(q), BornTimestamp: time.Now().UnixMilli()}
		resp, err := call(remoting.NewRequest(remoting.SendMessage, h.Encode(), []byte(fmt.Sprintf("%s/%d", tp, q))))
		if err == nil && resp.Code != int32(remoting.Success) {
			err = fmt.Errorf("code %d: %s", resp.Code, resp.Remark)
		}
		return err
	}
	start := time.Now()
	forAll("send", send)
	t.Logf("%d sends took %v", topics*queues, time.Since(start))

	// A graceful restart on the same disk: recovery sees every queue.
	srv.stopClean(t, 60*time.Second)
	t.Logf("stopped after %v", time.Since(start))
	srv = startBinary(t, wrapper, env)
	waitFor(t, 60*time.Second, "restarted broker routed", func() bool {
		select {
		case err := <-srv.exited:
			t.Fatalf("restarted broker exited: %v\n%s", err, srv.logs.String())
		default:
		}
		return routeExists(ns, topic(topics-1))
	})
	t.Logf("restarted and routed after %v", time.Since(start))
	cl.Close()
	cl = remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	forAll("pull", func(tp string, q int) error {
		h := remoting.PullMessageRequestHeader{ConsumerGroup: "g", Topic: tp, QueueID: int32(q), QueueOffset: 0,
			MaxMsgNums: 32, SysFlag: remoting.PullFlagSubscription, Subscription: "*", ExpressionType: "TAG"}
		resp, err := call(remoting.NewRequest(remoting.PullMessage, h.Encode(), nil))
		if err != nil {
			return err
		}
		if resp.Code != int32(remoting.Success) || resp.ExtFields["maxOffset"] != "1" {
			return fmt.Errorf("pull: code %d (%s), maxOffset %s", resp.Code, resp.Remark, resp.ExtFields["maxOffset"])
		}
		if want := fmt.Sprintf("%s/%d", tp, q); !strings.Contains(string(resp.Body), want) {
			return fmt.Errorf("pull: the body lacks %q", want)
		}
		return nil
	})
	forAll("send after restart", send)
	t.Logf("pulled and sent again after %v", time.Since(start))
}
