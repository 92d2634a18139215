package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
)

// TestE2EResetOffsetByTime (issue 11 item 5): a group consumes a topic
// whose older half lives only in the bucket; `stratamq admin
// resetOffsetByTime` rewinds it to a time inside that half while its
// official push consumer runs (INVOKE_BROKER_TO_RESET_OFFSET, the broker
// tells the client RESET_CONSUMER_CLIENT_OFFSET): exactly the messages
// stored from that time on are delivered again, read back across the
// tiers. A group with no live consumer is reset by the admin tool
// committing the offsets itself.
func TestE2EResetOffsetByTime(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir(), map[string]string{
		"STRATAMQ_SEGMENT_SIZE":    "1MiB",
		"STRATAMQ_LOCAL_RETENTION": "0",
	})
	topic := uniqueName(t, "RT")
	const queues = 2
	s.createTopic(topic, queues)
	p := newClientProducer(t, s.nsAddr)
	pad := make([]byte, 8<<10) // incompressible: the client compresses bodies over 4 KiB
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range pad {
		pad[i] = byte(rng.UintN(256))
	}
	sent := map[string]int64{} // id → its ack's time (ms)
	var order []string
	send := func(n int) {
		for range n {
			id := strconv.Itoa(len(order))
			if _, err := p.SendSync(context.Background(), msgWithID(topic, len(order), append([]byte(id+"|"), pad...))); err != nil {
				t.Fatal(err)
			}
			sent[id] = time.Now().UnixMilli()
			order = append(order, id)
			if len(order) == 150 { // the reset point: a store time of its own
				waitFor(t, time.Second, "the clock to pass a millisecond", func() bool { return time.Now().UnixMilli() > sent[id] })
			}
		}
	}
	send(300) // ~2.4 MiB: the first 1 MiB segments seal and upload
	resetAt := sent[order[149]] + 1
	clDir := filepath.Join(s.dir, "store", "commitlog")
	waitFor(t, 60*time.Second, "the oldest segments uploaded and dropped locally", func() bool {
		names, err := os.ReadDir(clDir)
		return err == nil && len(names) > 0 && names[0].Name() != fmt.Sprintf("%020d", 0)
	})
	send(100)

	group := uniqueName(t, "G")
	rg := newReceived()
	c := newPushConsumer(t, s.nsAddr, group, topic, rmqconsumer.MessageSelector{}, rg, "c")
	waitFor(t, 60*time.Second, "every message consumed once", func() bool { return rg.distinct() == len(order) })
	waitCommitted(t, c, s.brokAddr, group, topic, queues, int64(len(order)))

	var out, errOut bytes.Buffer
	if code := runAdmin(context.Background(), []string{"resetOffsetByTime", "-n", s.nsAddr, "-g", group, "-t", topic,
		"-s", strconv.FormatInt(resetAt, 10)}, nil, &out, &errOut); code != 0 {
		t.Fatalf("resetOffsetByTime: exit %d: %s", code, errOut.String())
	}
	// rocketmq-client-go applies a reset after a 10 s pause.
	waitFor(t, 60*time.Second, "the messages from the reset time on delivered again", func() bool {
		for _, id := range order[150:] {
			if len(rg.get(id)) < 2 {
				return false
			}
		}
		return true
	})
	for _, id := range order[:150] {
		if n := len(rg.get(id)); n != 1 {
			t.Fatalf("message %s, stored before the reset time, delivered %d times", id, n)
		}
	}

	// The live consumer reports its positions (GET_CONSUMER_STATUS_FROM_CLIENT).
	// rocketmq-client-go answers that by reading its offset map without the
	// lock its consumers write it under (a race in the client, reported by
	// -race), so this part runs in the README's second, race-free command.
	if !raceEnabled {
		out.Reset()
		errOut.Reset()
		if code := runAdmin(context.Background(), []string{"getConsumerStatus", "-n", s.nsAddr, "-g", group, "-t", topic}, nil, &out, &errOut); code != 0 {
			t.Fatalf("getConsumerStatus: exit %d: %s", code, errOut.String())
		}
		for _, want := range []string{`"consumerTable":{"`, `"topic":"` + topic + `"`, `"queueId":0`, `"queueId":1`} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("getConsumerStatus output lacks %s:\n%s", want, out.String())
			}
		}
	}

	// No live consumer: the admin tool commits the offsets.
	idle := uniqueName(t, "idle")
	out.Reset()
	errOut.Reset()
	if code := runAdmin(context.Background(), []string{"resetOffsetByTime", "-n", s.nsAddr, "-g", idle, "-t", topic,
		"-s", strconv.FormatInt(resetAt, 10)}, nil, &out, &errOut); code != 0 {
		t.Fatalf("resetOffsetByTime of a group without consumers: exit %d: %s", code, errOut.String())
	}
	var sum int64
	for q := range queues {
		sum += committedOffset(t, s.brokAddr, idle, topic, q)
	}
	if code := runAdmin(context.Background(), []string{"getConsumerStatus", "-n", s.nsAddr, "-g", idle, "-t", topic}, nil, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "CONSUMER_NOT_ONLINE") {
		t.Fatalf("getConsumerStatus of a group without consumers: exit %d, %s; want 1 and CONSUMER_NOT_ONLINE", code, errOut.String())
	}
	if sum != 150 {
		t.Fatalf("the idle group's committed offsets add up to %d, want 150 (the messages before the reset time); admin said:\n%s", sum, out.String())
	}
}
