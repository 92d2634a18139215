package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// TestE2EFailoverAutoCreatedTopicMinInSync (issue 29 items 11 and 13) runs
// the binaries the way the report did: a name server and two
// failover nodes that both prefer sync_master (the README's example: the
// second becomes the first's slave), a 10 s lease, 2 s checkpoints and
// STRATAMQ_HA_MIN_INSYNC=1; the official Go client's 16 senders
// auto-create a topic on the master and write for 6 s; kill -9 the master.
// The slave takes the lease, lists the topic (it came with the slave's
// copy or the bucket checkpoint) and is routed for it as master, and the
// producer's sends are acknowledged again by the promoted master alone
// once the client polled the new route (rocketmq-client-go polls every
// 30 s).
func TestE2EFailoverAutoCreatedTopicMinInSync(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	ns := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startBinaryCmd(t, bin, "namesrv", map[string]string{"STRATAMQ_NAMESRV_LISTEN": ns, "STRATAMQ_HTTP_LISTEN": ""})
	base := map[string]string{
		"STRATAMQ_BUCKET":              "file://" + filepath.Join(t.TempDir(), "bucket"),
		"STRATAMQ_NAMESRV":             ns,
		"STRATAMQ_HTTP_LISTEN":         "",
		"STRATAMQ_GRPC_LISTEN":         "",
		"STRATAMQ_CHECKPOINT_INTERVAL": "2s",
		"STRATAMQ_LEASE_TTL":           "10s",
		"STRATAMQ_HA_FAILOVER":         "true",
		"STRATAMQ_ROLE":                "sync_master",
		"STRATAMQ_BROKER_ID":           "1", // its id whenever it is a slave
		"STRATAMQ_HA_MIN_INSYNC":       "1",
	}
	node := func() map[string]string {
		e := maps.Clone(base)
		e["STRATAMQ_DATA_DIR"] = t.TempDir()
		e["STRATAMQ_LISTEN"] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		e["STRATAMQ_HA_LISTEN"] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		return e
	}
	aEnv, bEnv := node(), node()
	a := startBinaryCmd(t, bin, "broker", aEnv)
	waitFor(t, 30*time.Second, "the master routed", func() bool { return masterOf(ns, "TBW102") == aEnv["STRATAMQ_LISTEN"] })
	b := startBinaryCmd(t, bin, "broker", bEnv)
	waitFor(t, 30*time.Second, "the second node registered as the slave", func() bool {
		return brokerAddrsOf(ns, "TBW102", "broker-a")[1] == bEnv["STRATAMQ_LISTEN"]
	})

	topic := uniqueName(t, "AUTO")
	p := newClientProducer(t, ns)
	var ok, notOK, noRoute atomic.Int64
	var lastErr atomic.Value
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte(fmt.Sprintf("w%d-%d", w, i))))
				cancel()
				switch {
				case err == nil && res.Status == primitive.SendOK:
					ok.Add(1)
					continue
				case err != nil:
					if strings.Contains(err.Error(), "route info not found") {
						noRoute.Add(1)
					}
					lastErr.Store(err.Error())
				default:
					lastErr.Store(fmt.Sprintf("send status %d", res.Status))
				}
				notOK.Add(1)
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(6 * time.Second)
	if ok.Load() == 0 {
		t.Fatalf("nothing acknowledged in 6 s: %d not (%v)", notOK.Load(), lastErr.Load())
	}
	t.Logf("before the kill: %d acknowledged, %d not", ok.Load(), notOK.Load())

	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	killed := time.Now()
	waitFor(t, 60*time.Second, "the promoted node to be routed as the topic's master", func() bool {
		return masterOf(ns, topic) == bEnv["STRATAMQ_LISTEN"]
	})
	routed := time.Since(killed)
	if !knowsTopic(bEnv["STRATAMQ_LISTEN"], topic) {
		t.Fatalf("the promoted master does not list %s", topic)
	}
	ok0, not0 := ok.Load(), notOK.Load()
	deadline := time.Now().Add(90 * time.Second)
	for ok.Load() == ok0 {
		if time.Now().After(deadline) {
			t.Fatalf("no send acknowledged %v after the kill (routed after %v): %d not, %d of them route info not found (%v); the promoted node's log:\n%s",
				time.Since(killed), routed, notOK.Load()-not0, noRoute.Load(), lastErr.Load(), b.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := haStatusOf(t, bEnv["STRATAMQ_LISTEN"]); !st.AckingAlone || st.AckedAlone == 0 || st.InSyncReplicas != 1 {
		t.Fatalf("the promoted master acknowledging alone: %+v", st)
	}
	t.Logf("kill -9 to routed: %v; to the first SEND_OK from the promoted master: %v (%d sends failed meanwhile, %d with route info not found)",
		routed, time.Since(killed), notOK.Load()-not0, noRoute.Load())
}
