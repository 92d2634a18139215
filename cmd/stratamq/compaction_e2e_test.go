//go:build !race

// Uses replayAll (the official pull consumer races inside itself): the
// README's second, race-free pass runs it.

package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/stratamq/stratamq/remoting"
)

// TestE2ECompactedTopic: the official Go client writes a compacted topic
// (cleanup.policy=COMPACTION, 4 queues, each key to one queue, some
// tombstones: empty bodies), its segments are tiered and compacted in the
// bucket, and then the bucket holds about one message per live key (the
// generation objects) and no segment of the topic but the newest; the
// official pull consumer from offset 0 gets exactly the latest value of
// each live key, per queue in offset order; the same after a restore on an
// empty disk. STRATAMQ_COMPACT_MSGS and STRATAMQ_COMPACT_KEYS set the size
// (CI: 100,000 messages over 1,000 keys; the long form 1,000,000 over
// 10,000); it logs the compaction's rate and bucket requests.
func TestE2ECompactedTopic(t *testing.T) {
	n, keys := 100_000, 1_000
	if v, err := strconv.Atoi(os.Getenv("STRATAMQ_COMPACT_MSGS")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("STRATAMQ_COMPACT_KEYS")); err == nil && v > 0 {
		keys = v
	}
	root := t.TempDir()
	bucketDir := filepath.Join(root, "bucket")
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := map[string]string{
		"STRATAMQ_BUCKET":                         "file://" + bucketDir,
		"STRATAMQ_SEGMENT_SIZE":                   "8MiB",
		"STRATAMQ_SEGMENT_MAX_AGE":                "2s",
		"STRATAMQ_LOCAL_RETENTION":                "0",
		"STRATAMQ_TIER_COMMIT_DELAY":              "100ms",
		"STRATAMQ_COMPACTION_INTERVAL":            "500ms",
		"STRATAMQ_COMPACTION_MIN_MESSAGES":        "1",
		"STRATAMQ_COMPACTION_TOMBSTONE_RETENTION": "1ms",
		"STRATAMQ_COMPACTION_CPU":                 "100",
		"STRATAMQ_COMPACTION_GRACE":               "1s",
		"STRATAMQ_COMPACTION_MAX_DELAY":           "500ms",
		"STRATAMQ_HTTP_LISTEN":                    httpAddr,
	}
	s := startServe(t, filepath.Join(root, "data1"), env)
	topic := uniqueName(t, "Compacted")
	h := remoting.CreateTopicRequestHeader{Topic: topic, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6,
		Attributes: "+cleanup.policy=COMPACTION"}
	if r, ok := ask(s.brokAddr, remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil), 10*time.Second); !ok {
		t.Fatalf("create the compacted topic: %v", r)
	}
	waitFor(t, 10*time.Second, "route of "+topic, func() bool { return routeExists(s.nsAddr, topic) })

	// Each key lives in queue key%4; batches of one queue's messages.
	p := newClientProducer(t, s.nsAddr, rmqproducer.WithQueueSelector(rmqproducer.NewManualQueueSelector()))
	type val struct {
		body string
		id   int
	}
	latest := map[string]val{}
	rng := rand.New(rand.NewPCG(21, 22))
	pending := make([][]*primitive.Message, 4)
	ctx := context.Background()
	flush := func(q int) {
		if len(pending[q]) == 0 {
			return
		}
		res, err := p.SendSync(ctx, pending[q]...)
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send a batch to queue %d: %v %v", q, res, err)
		}
		pending[q] = pending[q][:0]
	}
	sendStart := time.Now()
	for i := range n {
		k := rng.IntN(keys)
		key := fmt.Sprintf("cfg-%05d", k)
		body := fmt.Sprintf(`{"key":"%s","version":%d,"pad":"%s"}`, key, i, strings.Repeat("x", 40))
		q := k % 4
		if i%97 == 96 {
			// A tombstone, sent on its own (a batch entry must have a body).
			flush(q)
			m := primitive.NewMessage(topic, nil)
			m.WithKeys([]string{key})
			m.Queue = &primitive.MessageQueue{Topic: topic, BrokerName: "broker-a", QueueId: q}
			if _, err := p.SendSync(ctx, m); err != nil {
				t.Fatalf("send a tombstone: %v", err)
			}
			latest[key] = val{body: "", id: i}
			continue
		}
		m := primitive.NewMessage(topic, []byte(body))
		m.WithKeys([]string{key})
		m.Queue = &primitive.MessageQueue{Topic: topic, BrokerName: "broker-a", QueueId: q}
		pending[q] = append(pending[q], m)
		latest[key] = val{body: body, id: i}
		if len(pending[q]) == 128 {
			flush(q)
		}
	}
	for q := range 4 {
		flush(q)
	}
	sendTook := time.Since(sendStart)
	live := 0
	for _, v := range latest {
		if v.body != "" {
			live++
		}
	}
	t.Logf("sent %d messages over %d keys in %s (%d live keys)", n, keys, sendTook.Round(time.Millisecond), live)

	check := func(what string) {
		t.Helper()
		got := replayAll(t, s.nsAddr, topic)
		total := 0
		for q, msgs := range got {
			prev := int64(-1)
			for _, m := range msgs {
				key := m.GetKeys()
				want, ok := latest[key]
				if !ok || want.body == "" || string(m.Body) != want.body {
					t.Fatalf("%s: queue %d offset %d: key %s body %q, want its latest %q", what, q, m.QueueOffset, key, m.Body, want.body)
				}
				if m.QueueOffset <= prev {
					t.Fatalf("%s: queue %d: offset %d after %d", what, q, m.QueueOffset, prev)
				}
				prev = m.QueueOffset
				total++
			}
		}
		if total != live {
			t.Fatalf("%s: %d messages from offset 0, want %d (one per live key)", what, total, live)
		}
	}
	// Every queue compacted to its end: reading from 0 gives one message
	// per live key, and the topic's segments have left the bucket.
	compactStart := time.Now()
	waitFor(t, 5*time.Minute, "the topic compacted to its end and its segments gone", func() bool {
		segs, _ := bucketObjects(bucketDir, "commitlog/")
		gens, _ := bucketObjects(bucketDir, "compacted/")
		if len(segs) > 1 || len(gens) != 4 { // the replaced ones deleted after their grace
			return false
		}
		for _, g := range gens {
			// compacted/<topic>/<queue>/<point>.<epoch>.cmp
			q, _ := strconv.Atoi(filepath.Base(filepath.Dir(g)))
			point, _ := strconv.ParseInt(strings.SplitN(filepath.Base(g), ".", 2)[0], 10, 64)
			if point != queueMax(s.brokAddr, topic, q) {
				return false
			}
		}
		return true
	})
	t.Logf("compacted and segments deleted %s after the last send", time.Since(compactStart).Round(time.Millisecond))
	check("compacted")
	gens, genBytes := bucketObjects(bucketDir, "compacted/")
	segs, segBytes := bucketObjects(bucketDir, "commitlog/")
	perMsg := int64(len(`{"key":"cfg-00000","version":1000000,"pad":""}`) + 40 + 200) // body + record and properties
	if genBytes > int64(live)*perMsg {
		t.Fatalf("generations hold %d bytes for %d live keys: more than %d bytes a message", genBytes, live, perMsg)
	}
	t.Logf("bucket: %d generation objects, %d bytes; %d segment objects, %d bytes", len(gens), genBytes, len(segs), segBytes)
	metrics := scrapeLines(t, "http://"+httpAddr+"/metrics", "stratamq_compaction_", "rocketmq_tiered_store_cold_get_total", "rocketmq_tiered_store_upload_objects_total")
	t.Logf("compaction metrics:\n%s", metrics)

	// A restore on an empty disk reads the same history from the bucket.
	s.stop()
	s.dir = filepath.Join(root, "data2")
	s.env["STRATAMQ_DATA_DIR"] = s.dir
	s.start()
	check("restored on an empty disk")
}

// bucketObjects lists the objects of the test broker's prefix under sub
// in a file:// bucket, and their total bytes.
func bucketObjects(bucketDir, sub string) ([]string, int64) {
	var keys []string
	var total int64
	root := filepath.Join(bucketDir, "DefaultCluster", "broker-a", sub)
	filepath.Walk(root, func(path string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && !strings.Contains(fi.Name(), ".tmp") {
			keys = append(keys, path)
			total += fi.Size()
		}
		return nil
	})
	return keys, total
}

// queueMax is GET_MAX_OFFSET of a queue (-1: no answer).
func queueMax(addr, topic string, q int) int64 {
	h := remoting.QueueRequestHeader{Topic: topic, QueueID: int32(q)}
	r, ok := ask(addr, remoting.NewRequest(remoting.GetMaxOffset, h.Encode(), nil), 5*time.Second)
	if !ok {
		return -1
	}
	v, err := strconv.ParseInt(r.ExtFields["offset"], 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// scrapeLines returns the lines of a /metrics page starting with one of
// the prefixes.
func scrapeLines(t *testing.T, url string, prefixes ...string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		for _, p := range prefixes {
			if strings.HasPrefix(sc.Text(), p) {
				out.WriteString(sc.Text() + "\n")
			}
		}
	}
	return out.String()
}
