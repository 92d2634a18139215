package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/schedule"
	"github.com/stratamq/stratamq/remoting"
)

// longTopic is a topic name well past the schedule topics' 19 bytes.
var longTopic = "Orders-" + strings.Repeat("x", 53)

// entrySize is the record size of topic/q's entry idx.
func entrySize(t *testing.T, b *Broker, topic string, q int32, idx int64) int {
	t.Helper()
	_, size, _, ok, err := b.store.QueueEntry(topic, q, idx)
	if err != nil || !ok {
		t.Fatalf("%s/%d@%d: %v %v", topic, q, idx, ok, err)
	}
	return int(size)
}

// TestScheduleDelayNearLimitDelivered: a DELAY message to a topic with a
// long name whose schedule record is exactly STRATAMQ_MAX_MESSAGE_SIZE is
// delivered (without REAL_TOPIC and REAL_QID: as it is, it would be
// larger than the limit), and the message after it at the same level is
// delivered too. The level used to stop at it for ever.
func TestScheduleDelayNearLimitDelivered(t *testing.T) {
	t.Parallel()
	const limit = 4096
	b, cl := startBroker(t, func(c *Config) { c.MaxMessageSize = limit; c.DelayLevels = "1s" })
	addr := b.Addr().String()
	props := func(uniq string) string { return "DELAY\x011\x02UNIQ_KEY\x01" + uniq + "\x02" }
	send := func(uniq string, body []byte) {
		t.Helper()
		if r := invoke(t, cl, addr, sendReq(longTopic, 0, body, props(uniq))); r.Code != int32(remoting.Success) {
			t.Fatalf("send %s: %d %s", uniq, r.Code, r.Remark)
		}
	}
	send("M0", bytes.Repeat([]byte("a"), 1000))
	big := bytes.Repeat([]byte("b"), 1000+limit-entrySize(t, b, ScheduleTopic, 0, 0))
	send("M1", big)
	if n := entrySize(t, b, ScheduleTopic, 0, 1); n != limit {
		t.Fatalf("the big message's schedule record is %d bytes, want %d", n, limit)
	}
	send("M2", []byte("after"))
	waitCond(t, 20*time.Second, "every delayed message delivered", func() bool { return delivered(b, longTopic, 0, 3) })
	got := queueRecords(t, b, longTopic, 0)
	for i, want := range []string{"M0", "M1", "M2"} {
		p := parseProps(got[i].Properties)
		if p[PropUniqKey] != want || p[PropDelay] != "" || p[PropDelayDueMs] != "" {
			t.Fatalf("delivered %d: props %v, want %s without DELAY", i, p, want)
		}
	}
	if !bytes.Equal(got[1].Body, big) {
		t.Fatalf("the big message was delivered with a body of %d bytes, want %d", len(got[1].Body), len(big))
	}
}

// TestTransactionHalfNearLimit: a half message too large to be put back
// for a check (TRANSACTION_CHECK_TIMES grows it) is refused at its send
// with MESSAGE_ILLEGAL; it used to be accepted and stop every check round
// at it, so a later half in doubt was never asked about.
func TestTransactionHalfNearLimit(t *testing.T) {
	t.Parallel()
	const limit = 4096
	b, cl := startBroker(t, func(c *Config) { c.MaxMessageSize = limit; c.DelayLevels = "1s" })
	addr := b.Addr().String()
	old := time.Now().Add(-time.Minute).UnixMilli()
	phys, half := sendHalf(t, b, cl, longTopic, bytes.Repeat([]byte("a"), 1000), "P", old, "")
	invoke(t, cl, addr, endReq("pg", phys, half, sysFlagTransRollback, "P"))
	body := bytes.Repeat([]byte("b"), 1000+limit-entrySize(t, b, TransHalfTopic, 0, half))
	req := preparedReq(longTopic, 0, body, "Q")
	if r := invoke(t, cl, addr, req); r.Code != int32(remoting.MessageIllegal) || !strings.Contains(r.Remark, "STRATAMQ_MAX_MESSAGE_SIZE") {
		t.Errorf("a half message at the limit: %d %q, want MESSAGE_ILLEGAL naming the limit", r.Code, r.Remark)
	}
	_, doubt := sendHalf(t, b, cl, longTopic, []byte("in doubt"), "D", old, "")
	nextMilli(t)
	if err := b.trans.Round(context.Background()); err != nil {
		t.Errorf("check round: %v", err)
	}
	if got := putBack(t, b, doubt+1); len(got) != 1 || got[0] != "D" {
		t.Fatalf("the round put back %v, want [D]", got)
	}
}

// TestTransactionDelayedCommitNearLimit: the largest delayed half the
// broker accepts for a topic with a long name, committed, is delivered,
// and a delayed message after it at the same level too: the delivered
// record used to grow past the limit and stop the level for ever.
func TestTransactionDelayedCommitNearLimit(t *testing.T) {
	t.Parallel()
	const limit = 4096
	b, cl := startBroker(t, func(c *Config) { c.MaxMessageSize = limit; c.DelayLevels = "1s" })
	addr := b.Addr().String()
	for n := limit - 150; ; n-- {
		if n < 1000 {
			t.Fatal("no delayed half near the limit was accepted")
		}
		req := preparedReq(longTopic, 1, bytes.Repeat([]byte("c"), n), "C")
		var h remoting.SendMessageRequestHeader
		if err := h.Decode(req.ExtFields); err != nil {
			t.Fatal(err)
		}
		h.Properties += "DELAY\x011\x02"
		r := invoke(t, cl, addr, remoting.NewRequest(remoting.SendMessage, h.Encode(), req.Body))
		if r.Code != int32(remoting.Success) {
			continue
		}
		phys, half := halfOffsets(t, r)
		if e := invoke(t, cl, addr, endReq("pg", phys, half, sysFlagTransCommit, "C")); e.Code != int32(remoting.Success) {
			t.Fatalf("commit of the largest delayed half (%d bytes): %d %s", entrySize(t, b, TransHalfTopic, 0, half), e.Code, e.Remark)
		}
		break
	}
	if r := invoke(t, cl, addr, sendReq(longTopic, 1, []byte("after"), "DELAY\x011\x02UNIQ_KEY\x01A\x02")); r.Code != int32(remoting.Success) {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 20*time.Second, "the committed delayed transaction and the message after it delivered", func() bool { return delivered(b, longTopic, 1, 2) })
	got := queueRecords(t, b, longTopic, 1)
	if parseProps(got[0].Properties)[PropUniqKey] != "C" || parseProps(got[1].Properties)[PropUniqKey] != "A" {
		t.Fatalf("delivered %v", got)
	}
}

// TestScheduleShortenedLevelsKeepDueTime: a message sent at level 2 of "1s
// 4s" is delivered no earlier than 4 s after its send when the broker
// restarts with STRATAMQ_DELAY_LEVELS "1s 1s"; a message sent after the
// restart at level 2 takes the new delay (behind the first in its queue).
// The pending one used to be delivered after the new, shorter delay.
func TestScheduleShortenedLevelsKeepDueTime(t *testing.T) {
	t.Parallel()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20, DelayLevels: "1s 4s"}
	b, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger()})
	sent := time.Now().UnixMilli()
	if r := invoke(t, cl, b.Addr().String(), sendReq("Later", 0, []byte("old"), "DELAY\x012\x02")); r.Code != int32(remoting.Success) {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	stop()
	cfg.DelayLevels = "1s 1s"
	b, cl, _ = runBroker(t, cfg, Deps{Logger: discardLogger()})
	if r := invoke(t, cl, b.Addr().String(), sendReq("Later", 0, []byte("new"), "DELAY\x012\x02")); r.Code != int32(remoting.Success) {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 20*time.Second, "both delayed messages delivered", func() bool { return delivered(b, "Later", 0, 2) })
	got := queueRecords(t, b, "Later", 0)
	if string(got[0].Body) != "old" || got[0].StoreTimestamp < sent+4000 {
		t.Fatalf("the message sent at level 2 of \"1s 4s\" was delivered %d ms after its send, want at least 4000", got[0].StoreTimestamp-sent)
	}
	if string(got[1].Body) != "new" {
		t.Fatalf("second delivered %q", got[1].Body)
	}
}

// TestScheduleReplayedHopNotDuplicated: a timer message hopped from timer
// queue 2 to queue 1, whose progress past it was not saved (the saved
// delayOffset.json is rewound to before it, as a crash or a failover
// leaves it), is not hopped again when the next run replays queue 2: it
// is delivered once. A replayed hop used to store a second copy, and each
// copy was delivered (each later interrupted hop doubling them again).
func TestScheduleReplayedHopNotDuplicated(t *testing.T) {
	t.Parallel()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20}
	b, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger()})
	due := time.Now().UnixMilli() + 3500 // queue 2 (a 2 s hop), then queue 1
	props := PropTimerDeliverMs + "\x01" + strconv.FormatInt(due, 10) + "\x02UNIQ_KEY\x01T1\x02"
	if r := invoke(t, cl, b.Addr().String(), sendReq("Hop", 0, []byte("timer"), props)); r.Code != int32(remoting.Success) {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	if n := b.store.MaxQueueOffset(TimerTopic, 2); n != 1 {
		t.Fatalf("timer queue 2 holds %d entries, want the message", n)
	}
	waitCond(t, 10*time.Second, "the hop to timer queue 1", func() bool { return b.store.MaxQueueOffset(TimerTopic, 1) == 1 })
	stop()
	path := filepath.Join(cfg.DataDir, "config", schedule.FileName)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct { // schedule.FileName's format
		OffsetTable      map[string]int64 `json:"offsetTable"`
		TimerOffsetTable map[string]int64 `json:"timerOffsetTable,omitempty"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if f.TimerOffsetTable["2"] != 1 {
		t.Fatalf("saved progress %s: timer queue 2 is not past the hopped entry", raw)
	}
	f.TimerOffsetTable["2"] = 0
	if raw, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	b, _, _ = runBroker(t, cfg, Deps{Logger: discardLogger()})
	waitCond(t, 20*time.Second, "the timer message delivered and the wheel drained", func() bool {
		if !delivered(b, "Hop", 0, 1) {
			return false
		}
		for q := int32(0); q < 3; q++ {
			if b.sched.Progress(schedule.Queue{Topic: TimerTopic, ID: q}) < b.store.MaxQueueOffset(TimerTopic, q) {
				return false
			}
		}
		return true
	})
	if n, m := b.store.MaxQueueOffset(TimerTopic, 1), b.store.MaxQueueOffset("Hop", 0); n != 1 || m != 1 {
		t.Fatalf("after the replay timer queue 1 holds %d copies and the topic %d deliveries, want 1 and 1", n, m)
	}
}
