package broker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/logtest"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// TestBrokerSendRecycleKeepsNoHeaderString: plain sends served in a read
// batch give their decoded headers back for reuse (remoting
// ReadBatch.Recycle; under -race a recycled header is poisoned at once),
// so nothing the broker keeps may alias a header string. Concurrent sends
// on one connection (they share read batches) auto-create topics, create
// retry topics and their groups, and carry keys; afterwards the topic
// table holds every name as it was sent, and each key finds its message
// in its topic.
func TestBrokerSendRecycleKeepsNoHeaderString(t *testing.T) {
	t.Parallel()
	b, cl, stop := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true}, Deps{Logger: discardLogger()})
	defer stop()
	addr := b.Addr().String()
	const writers, per = 8, 40
	topicOf := func(g, i int) string {
		if i%10 == 3 {
			return fmt.Sprintf("%sgrp-recycle-%d", RetryGroupTopicPrefix, g)
		}
		return fmt.Sprintf("Recycle-%d-%d", g, i%4)
	}
	keyOf := func(g, i int) string { return fmt.Sprintf("key-%d-%03d", g, i) }
	var wg sync.WaitGroup
	errs := make(chan error, writers*per)
	for g := range writers {
		wg.Go(func() {
			for i := range per {
				props := fmt.Sprintf("KEYS\x01%s\x02TAGS\x01t%d\x02WAIT\x01true\x02", keyOf(g, i), i%3)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := cl.Invoke(ctx, addr, sendReq(topicOf(g, i), -1, []byte(strings.Repeat("b", 200)), props))
				cancel()
				switch {
				case err != nil:
					errs <- err
				case resp.Code != int32(remoting.Success):
					errs <- fmt.Errorf("send %d/%d to %s: code %d %s", g, i, topicOf(g, i), resp.Code, resp.Remark)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	counts := b.topics.QueueCounts()
	for name := range counts {
		if strings.ContainsRune(name, '\uFFFD') || strings.IndexByte(name, 0xa5) >= 0 {
			t.Errorf("the topic table holds a name that changed after it was added: %q", name)
		}
	}
	for g := range writers {
		for i := range per {
			if _, ok := counts[topicOf(g, i)]; !ok {
				t.Fatalf("topic %q missing from the table (it has %d topics)", topicOf(g, i), len(counts))
			}
		}
	}
	groups, _, err := b.groups.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for g := range writers {
		if name := fmt.Sprintf(`"grp-recycle-%d"`, g); !strings.Contains(string(groups), name) {
			t.Fatalf("group %s missing from the groups: %s", name, groups)
		}
	}
	now := time.Now().UnixMilli()
	for g := range writers {
		for _, i := range []int{0, 3, per - 1} {
			res, err := b.store.QueryByKey(context.Background(), store.KeyQuery{Topic: topicOf(g, i), Key: keyOf(g, i), MaxNum: 4, Begin: 0, End: now + 1000})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Records) != 1 {
				t.Fatalf("key %s in %s: %d records, want 1", keyOf(g, i), topicOf(g, i), len(res.Records))
			}
		}
	}
}

// TestBrokerSendRecycleLogsNoHeaderString: a log record of a recycled
// send names strings the broker owns, not the header's: a slog handler
// may keep its records (logtest.Recorder does, and so may an embedder's
// asynchronous one), and the header is reused after the batch.
func TestBrokerSendRecycleLogsNoHeaderString(t *testing.T) {
	t.Parallel()
	rec := &logtest.Recorder{}
	b, cl, stop := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true},
		Deps{Logger: slog.New(rec)})
	defer stop()
	addr := b.Addr().String()
	const n = 8
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := cl.Invoke(ctx, addr, sendReq(fmt.Sprintf("AutoLogTopic-%d", i), -1, []byte("body"), ""))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Code != int32(remoting.Success) {
			t.Fatalf("send %d: code %d %s", i, resp.Code, resp.Remark)
		}
	}
	seen := 0
	for _, r := range rec.Records() {
		if r.Message != "topic auto-created" {
			continue
		}
		want := fmt.Sprintf("AutoLogTopic-%d", seen) // sends are sequential
		seen++
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "topic" && a.Value.String() != want {
				t.Errorf("log record \"topic auto-created\" of %s has topic %q: the string aliased a recycled header", want, a.Value.String())
			}
			return true
		})
	}
	if seen != n {
		t.Fatalf("%d \"topic auto-created\" records, want %d", seen, n)
	}
}
