package broker

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
)

func TestScheduleParseDelayLevels(t *testing.T) {
	t.Parallel()
	lv, err := ParseDelayLevels(DefaultDelayLevels)
	if err != nil || len(lv) != 18 || lv[0] != time.Second || lv[2] != 10*time.Second || lv[17] != 2*time.Hour {
		t.Fatalf("default levels: %v %v", lv, err)
	}
	if lv, err := ParseDelayLevels(" 1d\t90s "); err != nil || len(lv) != 2 || lv[0] != 24*time.Hour || lv[1] != 90*time.Second {
		t.Fatalf("1d 90s: %v %v", lv, err)
	}
	for in, want := range map[string]string{
		"1s 5x 10s": `level 2 is "5x"`, "": "at least one level", "1s 0s": `level 2 is "0s"`,
		"s": `level 1 is "s"`, "-1m": `level 1 is "-1m"`, "1.5s": `level 1 is "1.5s"`,
	} {
		if _, err := ParseDelayLevels(in); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "STRATAMQ_DELAY_LEVELS") {
			t.Errorf("ParseDelayLevels(%q) = %v, want an error naming the setting and %s", in, err, want)
		}
	}
	cfg := Config{DelayLevels: "1s 2q"}.withDefaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "STRATAMQ_DELAY_LEVELS") {
		t.Fatalf("Validate with a bad level: %v", err)
	}
	cfg = Config{TimerMaxDelay: time.Millisecond}.withDefaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "STRATAMQ_TIMER_MAX_DELAY") {
		t.Fatalf("Validate with a 1ms timer maximum: %v", err)
	}
}

// recordAt returns the record at a queue offset.
func recordAt(t *testing.T, b *Broker, topic string, q int32, idx int64) store.Record {
	t.Helper()
	phys, _, _, ok, err := b.store.QueueEntry(topic, q, idx)
	if err != nil || !ok {
		t.Fatalf("%s/%d@%d: %v %v", topic, q, idx, ok, err)
	}
	raw, err := b.store.ReadRecord(phys)
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := store.DecodeRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// delivered reports whether topic/q holds at least n entries and the record
// of entry n-1 is readable. The store makes a queue entry visible a moment
// before it publishes the log end that covers its record (every record
// below the end is dispatched: store.Store.flushRoundLocked relies on it),
// and ReadRecord refuses an offset past that end: a test that waits for a
// delivered message and then reads it waits for both.
func delivered(b *Broker, topic string, q int32, n int64) bool {
	if n <= 0 || b.store.MaxQueueOffset(topic, q) < n {
		return false
	}
	phys, size, _, ok, err := b.store.QueueEntry(topic, q, n-1)
	return err == nil && ok && phys+int64(size) <= b.store.MaxPhysOffset()
}

// TestScheduleSendBackLevels: CONSUMER_SEND_MSG_BACK stores the retry in
// SCHEDULE_TOPIC_XXXX at level 3+reconsumeTimes (or the header's level,
// capped at the last), REAL_TOPIC = %RETRY%<group>; a message past the
// group's retryMaxTimes (an old client: version < 121, so the header's
// maximum does not count) or with delayLevel -1 goes to %DLQ%<group> at
// once, without DELAY.
func TestScheduleSendBackLevels(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, func(c *Config) { c.DelayLevels = "1h 1h 1h 1h 1h" })
	addr := b.Addr().String()
	g := b.groups.GetOrCreate("G")
	g.RetryMaxTimes = 1
	b.groups.Put(g)
	send := func(reconsume int32) int64 {
		h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: "T", DefaultTopic: "TBW102",
			DefaultTopicQueueNums: 1, QueueID: 0, BornTimestamp: time.Now().UnixMilli(), ReconsumeTimes: reconsume,
			Properties: PropUniqKey + "\x01U" + strconv.Itoa(int(reconsume)) + "\x02"}
		r := invoke(t, cl, addr, remoting.NewRequest(remoting.SendMessage, h.Encode(), []byte("m")))
		if r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
		return recordAt(t, b, "T", 0, b.store.MaxQueueOffset("T", 0)-1).PhysOffset
	}
	back := func(off int64, level int32, version int32, maxTimes int32) {
		h := remoting.ConsumerSendMsgBackRequestHeader{Offset: off, Group: "G", DelayLevel: level, OriginTopic: "T",
			MaxReconsumeTimes: maxTimes, MaxReconsumeTimesSet: maxTimes > 0}
		req := remoting.NewRequest(remoting.ConsumerSendMsgBack, h.Encode(), nil)
		req.Version = version
		if r := invoke(t, cl, addr, req); r.Code != 0 {
			t.Fatalf("send back: %d %s", r.Code, r.Remark)
		}
	}
	check := func(what, topic string, q int32, level string, reconsume int32) {
		t.Helper()
		rec := recordAt(t, b, topic, q, b.store.MaxQueueOffset(topic, q)-1)
		p := rec.Properties
		if d, _ := propValue(p, PropDelay); d != level || rec.ReconsumeTimes != reconsume {
			t.Fatalf("%s: in %s/%d with DELAY %q reconsumeTimes %d, want %q %d", what, topic, q, d, rec.ReconsumeTimes, level, reconsume)
		}
		if rt, _ := propValue(p, PropRetryTopic); rt != "T" {
			t.Fatalf("%s: RETRY_TOPIC %q", what, rt)
		}
		if topic == ScheduleTopic {
			if real, _ := propValue(p, PropRealTopic); real != RetryGroupTopicPrefix+"G" {
				t.Fatalf("%s: REAL_TOPIC %q", what, real)
			}
		}
	}
	off0 := send(0)
	back(off0, 0, 100, 0)
	check("first retry", ScheduleTopic, 2, "3", 1) // level 3 + 0
	back(off0, 2, 100, 0)
	check("header level 2", ScheduleTopic, 1, "2", 1)
	back(off0, 9, 100, 0)
	check("header level 9 of 5", ScheduleTopic, 4, "5", 1)
	back(off0, -1, 100, 0)
	check("delayLevel -1", DLQGroupTopicPrefix+"G", 0, "", 1)
	off1 := send(1)
	back(off1, 0, 100, 16) // version < 121: the group's retryMaxTimes (1) counts
	check("past the group's retryMaxTimes", DLQGroupTopicPrefix+"G", 0, "", 2)
	back(off1, 0, 400, 16) // a newer client's maximum (16) wins
	check("under the client's maxReconsumeTimes", ScheduleTopic, 3, "4", 2)
}

// TestScheduleRetentionKeepsPending: bucket retention does not delete the
// segment of a scheduled message not yet delivered (RocketMQ loses it,
// apache/rocketmq#9006): it is delivered when due from the bucket, and
// retention deletes the objects afterwards.
func TestScheduleRetentionKeepsPending(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 0, Retention: 1500 * time.Millisecond, DelayLevels: "10s"}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	sentAt := time.Now().Truncate(time.Millisecond)
	r := invoke(t, cl, b.Addr().String(), sendReq("Later", 0, []byte("delayed"), PropDelay+"\x011\x02"))
	if r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	pending := recordAt(t, b, ScheduleTopic, 0, 0).PhysOffset
	produceTiered(t, b, cl, "Old", 400)
	// Retention deletes the first segments about 7 s after the send (the
	// uploads, then 1.5 s); had it deleted this one, the message would
	// never be delivered.
	waitCond(t, 30*time.Second, "the delayed message delivered", func() bool {
		return b.store.MaxQueueOffset("Later", 0) == 1 && delivered(b, "Later", 0, 1)
	})
	if got := recordAt(t, b, "Later", 0, 0); string(got.Body) != "delayed" || time.UnixMilli(got.StoreTimestamp).Before(sentAt.Add(10*time.Second)) {
		t.Fatalf("delivered %q at %s after the send", got.Body, time.UnixMilli(got.StoreTimestamp).Sub(sentAt))
	}
	// Its scheduled record goes only once the delivery is in the bucket
	// too (a restore would deliver it again from the record): seal it.
	if err := b.store.SealActive(); err != nil {
		t.Fatal(err)
	}
	b.tier.Uploader().Notify()
	waitCond(t, 30*time.Second, "retention deletes the delivered message's segment", func() bool {
		return b.store.MinPhysOffset() > pending
	})
}

// TestScheduleTopicGrowsWithLevels: a broker restarted with more delay
// levels grows SCHEDULE_TOPIC_XXXX, so a send at a new level is stored
// (the queue was not listed before).
func TestScheduleTopicGrowsWithLevels(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20, DelayLevels: "1h 1h"}
	b, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger()})
	if r := invoke(t, cl, b.Addr().String(), sendReq("T", 0, []byte("a"), PropDelay+"\x012\x02")); r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	stop()
	cfg.DelayLevels = "1h 1h 1h 1h"
	b, cl, _ = runBroker(t, cfg, Deps{Logger: discardLogger()})
	if r := invoke(t, cl, b.Addr().String(), sendReq("T", 0, []byte("b"), PropDelay+"\x014\x02")); r.Code != 0 {
		t.Fatalf("send at a new level: %d %s", r.Code, r.Remark)
	}
	if tc, _ := b.topics.Get(ScheduleTopic); queueCount(tc) != 4 || b.store.MaxQueueOffset(ScheduleTopic, 3) != 1 {
		t.Fatalf("schedule topic %+v, level 4 queue holds %d", tc, b.store.MaxQueueOffset(ScheduleTopic, 3))
	}
}

// TestScheduleFailoverResumes: only the master runs the schedule service;
// after a handover (admin promote) the new master resumes from the
// checkpoint's progress: a message delivered before is not delivered
// again, a pending one comes at its time.
func TestScheduleFailoverResumes(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	acfg, bcfg := failoverConfig(t, RoleSyncMaster), failoverConfig(t, RoleSlave)
	acfg.LeaseTTL, bcfg.LeaseTTL = time.Minute, time.Minute
	acfg.DelayLevels, bcfg.DelayLevels = "1s 6s", "1s 6s"
	a := runNode(t, acfg, Deps{Bucket: mem})
	b := runNode(t, bcfg, Deps{Bucket: mem})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	waitCond(t, 20*time.Second, "the master to see its slave", func() bool {
		m := a.Broker()
		return a.role() == RoleSyncMaster && b.role() == RoleSlave && m != nil && m.haSlaves() == 1
	})
	send := func(body, level string) time.Time {
		t.Helper()
		at := time.Now().Truncate(time.Millisecond)
		if r := invoke(t, cl, acfg.Listen, sendReq("Later", 0, []byte(body), PropDelay+"\x01"+level+"\x02")); r.Code != 0 {
			t.Fatalf("send %s: %d %s", body, r.Code, r.Remark)
		}
		return at
	}
	send("d1", "1")
	waitCond(t, 10*time.Second, "d1 delivered by the master", func() bool { return a.Broker().store.MaxQueueOffset("Later", 0) == 1 })
	d2At := send("d2", "2")
	if r := invoke(t, cl, bcfg.Listen, remoting.NewRequest(remoting.PromoteBroker, nil, nil)); r.Code != 0 {
		t.Fatalf("promote: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 20*time.Second, "the slave promoted", func() bool {
		return b.role() == RoleSyncMaster && a.role() == RoleSlave && b.Broker() != nil
	})
	nb := b.Broker()
	waitCond(t, 20*time.Second, "d2 delivered by the new master", func() bool { return delivered(nb, "Later", 0, 2) })
	if got := recordAt(t, nb, "Later", 0, 1); string(got.Body) != "d2" || time.UnixMilli(got.StoreTimestamp).Before(d2At.Add(6*time.Second)) {
		t.Fatalf("offset 1: %q stored %s after its send (delay 6s)", got.Body, time.UnixMilli(got.StoreTimestamp).Sub(d2At))
	}
	time.Sleep(1500 * time.Millisecond) // bounded: a redelivery of d1 would have happened by now
	if n := nb.store.MaxQueueOffset("Later", 0); n != 2 || string(recordAt(t, nb, "Later", 0, 0).Body) != "d1" {
		t.Fatalf("the new master's topic holds %d messages, want d1 (once) and d2", n)
	}
}
