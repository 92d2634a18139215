package broker

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/restore"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/segfile"
	"github.com/stratamq/stratamq/tier/upload"
)

func createTopicAttrReq(topic, attrs string) *remoting.Command {
	h := remoting.CreateTopicRequestHeader{Topic: topic, DefaultTopic: "TBW102", ReadQueueNums: 1, WriteQueueNums: 1,
		Perm: 6, TopicFilterType: "SINGLE_TAG", Attributes: attrs}
	return remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil)
}

// TestTopicRetentionExpiresWhileAnotherKeeps: topic Short has a 1-minute
// retention (the broker default is unlimited), Keep the default. Once the
// retention clock passes a minute, Short's queue minimum moves past all of
// its messages (a consumer behind it gets PULL_OFFSET_MOVED and resumes at
// the new minimum), the segments holding only Short's records are deleted
// from the bucket and locally, the one holding Keep's records stays (and
// the Short-only ones after it: the floor moves over a prefix), and
// Keep's messages stay readable. The minimum survives a restart and a
// restore on an empty disk, where Keep is read from the bucket.
func TestTopicRetentionExpiresWhileAnotherKeeps(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 1 << 30}
	var skew atomic.Int64
	start := func() (*Broker, *remoting.Client, func()) { return startSkewed(t, cfg, bucket, &skew) }
	b, cl, stop := start()
	addr := b.Addr().String()
	if r := invoke(t, cl, addr, createTopicAttrReq("Short", "+"+RetentionAttribute+"=1m")); r.Code != 0 {
		t.Fatalf("create Short: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("Keep", "")); r.Code != 0 {
		t.Fatalf("create Keep: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("Bad", "+"+RetentionAttribute+"=soon")); r.Code == 0 {
		t.Fatal("a bad retention.time was accepted")
	}
	if tc, _ := b.topics.Get("Short"); tc.Attributes[RetentionAttribute] != "1m" {
		t.Fatalf("Short's attributes %v", tc.Attributes)
	}
	send := func(topic string, n int) {
		for i := range n {
			body := bytes.Repeat([]byte(fmt.Sprintf("%s%05d|", topic, i)), 700)
			if r := invoke(t, cl, addr, sendReq(topic, 0, body, "")); r.Code != 0 {
				t.Fatalf("send %s %d: %d %s", topic, i, r.Code, r.Remark)
			}
		}
	}
	send("Short", 200) // more than a segment of Short alone
	send("Keep", 5)
	send("Short", 200)
	if err := b.store.SealActive(); err != nil {
		t.Fatal(err)
	}
	b.tier.Uploader().Notify()
	end := b.store.MaxPhysOffset()
	waitCond(t, 30*time.Second, "every segment and its index uploaded", func() bool {
		p, _ := b.tier.Sealed(context.Background())
		m := b.tier.Uploader().Manifest()
		cl := m.CommitLog()
		return len(p) == 0 && len(cl) > 0 && cl[len(cl)-1].End() == end
	})
	keepSeg := int64(-1)
	keepPhys := recordAt(t, b, "Keep", 0, 0).PhysOffset
	objs := b.tier.Uploader().Manifest().CommitLog()
	for _, o := range objs {
		if o.Base <= keepPhys && keepPhys < o.End() {
			keepSeg = o.Base
		}
	}
	if keepSeg <= 0 || keepSeg == objs[len(objs)-1].Base {
		t.Fatalf("Keep's records in segment %d of %+v: want one after the first, before the last", keepSeg, objs)
	}
	// Nothing expires on the real clock.
	if got := b.store.MinQueueOffset("Short", 0); got != 0 {
		t.Fatalf("Short's min %d before its retention passed", got)
	}
	skew.Store(int64(2 * time.Minute))
	// The store's floor moves before the manifest is trimmed: wait for both.
	waitCond(t, 30*time.Second, "Short expired and its segments before Keep's deleted", func() bool {
		cl := b.tier.Uploader().Manifest().CommitLog()
		return b.store.MinQueueOffset("Short", 0) == 400 && b.store.MinPhysOffset() == keepSeg && len(cl) > 0 && cl[0].Base == keepSeg
	})
	skew.Store(0)
	resp := invoke(t, cl, addr, pullNow("Short", 0, 0))
	if resp.Code != int32(remoting.PullOffsetMoved) || resp.ExtFields["nextBeginOffset"] != "400" || resp.ExtFields["minOffset"] != "400" {
		t.Fatalf("pull behind the expired minimum: %d %s %v, want PULL_OFFSET_MOVED to 400", resp.Code, resp.Remark, resp.ExtFields)
	}
	send("Short", 1)
	expectPull(t, "Short at its new minimum", invoke(t, cl, addr, pullNow("Short", 0, 400)), remoting.Success,
		[]string{string(bytes.Repeat([]byte("Short00000|"), 700))}, 401, 401)
	checkKeep := func(b *Broker, cl *remoting.Client) {
		t.Helper()
		var want []string
		for i := range 5 {
			want = append(want, string(bytes.Repeat([]byte(fmt.Sprintf("Keep%05d|", i)), 700)))
		}
		expectPull(t, "Keep's history", invoke(t, cl, b.Addr().String(), pullNow("Keep", 0, 0)), remoting.Success, want, 5, 5)
	}
	checkKeep(b, cl)
	// The bucket: the objects before Keep's segment are gone, with their
	// indexes; Keep's and the later ones stay.
	m, _, err := upload.LoadManifest(context.Background(), bucket, "DefaultCluster/broker-a/"+upload.ManifestKey(""))
	if err != nil {
		t.Fatal(err)
	}
	if cl := m.CommitLog(); len(cl) == 0 || cl[0].Base != keepSeg || cl[len(cl)-1].End() != end {
		t.Fatalf("manifest after retention: %+v, want from %d to %d", cl, keepSeg, end)
	}
	// Deleted after the manifest is trimmed: the bucket holds exactly the
	// objects of Keep's segment and after, each with its queue and key
	// index inside (every kind of object of a segment is that one).
	var kept []int64
	for _, o := range objs {
		if o.Base >= keepSeg {
			kept = append(kept, o.Base)
		}
	}
	waitCond(t, 10*time.Second, "the expired segments' objects deleted", func() bool {
		return fmt.Sprint(bucketSegments(t, bucket)) == fmt.Sprint(kept)
	})
	if got := b.store.LocalMinPhysOffset(); got != keepSeg {
		t.Fatalf("local log starts at %d, want Keep's segment %d (the expired ones dropped)", got, keepSeg)
	}
	// The admin report: Keep holds its segment back.
	rep, err := b.ret.Report(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Topics {
		switch s.Topic {
		case "Keep":
			if s.HeldSegments != 1 || s.HeldBytes != objs[1].Length && s.HeldBytes <= 0 || s.Override || s.OldestRetained == 0 {
				t.Fatalf("Keep in the report: %+v", s)
			}
		case "Short":
			if s.HeldSegments != 0 || !s.Override || s.RetentionMillis != 60000 {
				t.Fatalf("Short in the report: %+v", s)
			}
		}
	}

	// Restart on the same disk, then a restore on an empty one.
	stop()
	b, cl, stop = start()
	if got := b.store.MinQueueOffset("Short", 0); got != 400 {
		t.Fatalf("Short's min %d after a restart, want 400", got)
	}
	checkKeep(b, cl)
	stop()
	cfg.DataDir = t.TempDir()
	b, cl, _ = start()
	if got := b.store.MinQueueOffset("Short", 0); got != 400 {
		t.Fatalf("Short's min %d after a restore on an empty disk, want 400", got)
	}
	resp = invoke(t, cl, b.Addr().String(), pullNow("Short", 0, 10))
	if resp.Code != int32(remoting.PullOffsetMoved) || resp.ExtFields["nextBeginOffset"] != "400" {
		t.Fatalf("restored: pull behind the minimum: %d %s %v", resp.Code, resp.Remark, resp.ExtFields)
	}
	if tc, _ := b.topics.Get("Short"); tc.Attributes[RetentionAttribute] != "1m" {
		t.Fatalf("restored: Short's attributes %v", tc.Attributes)
	}
	checkKeep(b, cl)
	// The restored broker expires from the bucket: Short's last message,
	// sent after the first expiry, lies only there now.
	skew.Store(int64(2 * time.Minute))
	waitCond(t, 30*time.Second, "Short's last message expired on the restored broker", func() bool {
		return b.store.MinQueueOffset("Short", 0) == 401
	})
	skew.Store(0)
	if got := b.store.MinQueueOffset("Keep", 0); got != 0 {
		t.Fatalf("restored: Keep's min %d, want 0", got)
	}
	checkKeep(b, cl)
}

// TestScheduleRetentionPinWithTopicOverrides: with a per-topic override in
// place (retention follows the queue minima), bucket retention still keeps
// the segment of an undelivered scheduled message: it is delivered when
// due, from the bucket, and the segment goes afterwards.
func TestScheduleRetentionPinWithTopicOverrides(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 0, Retention: 1500 * time.Millisecond, DelayLevels: "8s"}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	if r := invoke(t, cl, b.Addr().String(), createTopicAttrReq("Forever", "+"+RetentionAttribute+"=-1")); r.Code != 0 {
		t.Fatalf("create Forever: %d %s", r.Code, r.Remark)
	}
	if !b.ret.HasOverride() {
		t.Fatal("no override seen")
	}
	sentAt := time.Now().Truncate(time.Millisecond)
	r := invoke(t, cl, b.Addr().String(), sendReq("Later", 0, []byte("delayed"), PropDelay+"\x011\x02"))
	if r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	pending := recordAt(t, b, ScheduleTopic, 0, 0).PhysOffset
	produceTiered(t, b, cl, "Old", 400)
	waitCond(t, 30*time.Second, "the delayed message delivered", func() bool {
		return b.store.MaxQueueOffset("Later", 0) == 1 && delivered(b, "Later", 0, 1)
	})
	if got := recordAt(t, b, "Later", 0, 0); string(got.Body) != "delayed" || time.UnixMilli(got.StoreTimestamp).Before(sentAt.Add(8*time.Second)) {
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
	if mn := b.store.MinQueueOffset("Old", 0); mn == 0 {
		t.Fatal("the default topic's min did not move")
	}
}

// BenchmarkRetentionTick: one pass of bucket retention (expiry of every
// queue, the deletion decision) with 32 topics of 4 queues, each with its
// own retention (1h: nothing expires) and 8 messages per queue.
func BenchmarkRetentionTick(b *testing.B) {
	cfg := Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 1 << 30}
	br, err := New(cfg, Deps{Logger: discardLogger(), Bucket: tier.NewMem()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	defer func() { cancel(); <-done }()
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	addr := br.Addr().String()
	invokeB := func(req *remoting.Command) *remoting.Command {
		ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
		defer icancel()
		r, err := cl.Invoke(ictx, addr, req)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	for i := range 32 {
		topic := fmt.Sprintf("T%02d", i)
		h := remoting.CreateTopicRequestHeader{Topic: topic, DefaultTopic: "TBW102", ReadQueueNums: 4, WriteQueueNums: 4,
			Perm: 6, TopicFilterType: "SINGLE_TAG", Attributes: "+" + RetentionAttribute + "=1h"}
		if r := invokeB(remoting.NewRequest(remoting.UpdateAndCreateTopic, h.Encode(), nil)); r.Code != 0 {
			b.Fatalf("create: %d %s", r.Code, r.Remark)
		}
		for q := range 4 {
			for range 8 {
				if r := invokeB(sendReq(topic, q, []byte("m"), "")); r.Code != 0 {
					b.Fatalf("send: %d %s", r.Code, r.Remark)
				}
			}
		}
	}
	if err := br.store.SealActive(); err != nil {
		b.Fatal(err)
	}
	br.tier.Uploader().Notify()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if p, _ := br.tier.Sealed(ctx); len(p) == 0 && br.tier.Uploader().Manifest() != nil && len(br.tier.Uploader().Manifest().CommitLog()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("not uploaded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.ResetTimer()
	for range b.N {
		if err := br.tier.EnforceBucketRetention(ctx, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSlaveFollowsTopicRetention: a slave mirrors a topic's retention.time
// and moves its own queue minimum as the master does, so its consumers
// get PULL_OFFSET_MOVED too; it writes nothing to the bucket.
func TestSlaveFollowsTopicRetention(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	haAddr := haTestAddr(t)
	m, mcl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true,
		SegmentSize: 1 << 20, MaxMessageSize: 256 << 10, HAListen: haAddr}, Deps{Logger: discardLogger(), Bucket: bucket})
	ro := &readOnlyBucket{Bucket: bucket}
	s, scl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, Role: RoleSlave, BrokerID: 1, HAMaster: haAddr,
		HASyncInterval: 50 * time.Millisecond}, Deps{Logger: discardLogger(), Bucket: ro})
	waitCond(t, 20*time.Second, "the slave to connect", func() bool { return haSlaves(m) == 1 })
	if r := invoke(t, mcl, m.Addr().String(), createTopicAttrReq("Short", "+"+RetentionAttribute+"=1s")); r.Code != 0 {
		t.Fatalf("create Short: %d %s", r.Code, r.Remark)
	}
	for i := range 20 {
		if r := invoke(t, mcl, m.Addr().String(), sendReq("Short", 0, []byte(fmt.Sprint(i)), "")); r.Code != 0 {
			t.Fatalf("send %d: %d %s", i, r.Code, r.Remark)
		}
	}
	waitCond(t, 30*time.Second, "the master and the slave to expire Short", func() bool {
		return m.store.MinQueueOffset("Short", 0) == 20 && s.store.MinQueueOffset("Short", 0) == 20
	})
	resp := invoke(t, scl, s.Addr().String(), pullNow("Short", 0, 0))
	if resp.Code != int32(remoting.PullOffsetMoved) || resp.ExtFields["nextBeginOffset"] != "20" {
		t.Fatalf("slave: pull behind the minimum: %d %s %v", resp.Code, resp.Remark, resp.ExtFields)
	}
	if n := ro.writes.Load(); n != 0 {
		t.Fatalf("the slave tried %d bucket writes, want none", n)
	}
}

// startSkewed runs a broker on cfg and bucket whose tiering loop sees the
// clock moved by skew; stop (also a cleanup) waits for Run to return.
func startSkewed(t *testing.T, cfg Config, bucket tier.Bucket, skew *atomic.Int64) (*Broker, *remoting.Client, func()) {
	t.Helper()
	return runBrokerWith(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket}, func(b *Broker) {
		b.tier.Hooks.Clock = func(now time.Time) time.Time { return now.Add(time.Duration(skew.Load())) }
	})
}

// retentionBody is message i of topic in the retention tests.
func retentionBody(topic string, i int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("%s%05d|", topic, i)), 700)
}

// TestTopicRetentionDeletesFromTheMiddle: segments whose every record has
// expired are deleted even when an earlier segment is kept by a record of
// a long-retention topic (issue 11 item 7: not only a prefix of the log).
// The manifest records the gap; the kept topic reads across it, here and
// after a restore on an empty disk; a slave's U runs past it; the report
// counts the kept segments against the topic that keeps them. Without
// middle deletion the Short-only segments between Keep's stay.
func TestTopicRetentionDeletesFromTheMiddle(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 0} // uploaded segments leave the disk at once
	var skew atomic.Int64
	b, cl, stop := startSkewed(t, cfg, bucket, &skew)
	addr := b.Addr().String()
	if r := invoke(t, cl, addr, createTopicAttrReq("Short", "+"+RetentionAttribute+"=1m")); r.Code != 0 {
		t.Fatalf("create Short: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("Keep", "+"+RetentionAttribute+"=forever")); r.Code != 0 {
		t.Fatalf("create Keep: %d %s", r.Code, r.Remark)
	}
	sent := map[string]int{}
	send := func(topic string, n int) {
		for range n {
			i := sent[topic]
			sent[topic]++
			if r := invoke(t, cl, addr, sendReq(topic, 0, retentionBody(topic, i), "")); r.Code != 0 {
				t.Fatalf("send %s %d: %d %s", topic, i, r.Code, r.Remark)
			}
		}
	}
	// About 130 records a segment: Short only, Keep, three segments of
	// Short only, Keep, Short.
	send("Short", 200)
	send("Keep", 5)
	send("Short", 400)
	send("Keep", 5)
	send("Short", 200)
	if err := b.store.SealActive(); err != nil {
		t.Fatal(err)
	}
	b.tier.Uploader().Notify()
	end := b.store.MaxPhysOffset()
	waitCond(t, 30*time.Second, "every segment and its indexes uploaded, and dropped locally", func() bool {
		p, _ := b.tier.Sealed(context.Background())
		cl := b.tier.Uploader().Manifest().CommitLog()
		return len(p) == 0 && len(cl) > 0 && cl[len(cl)-1].End() == end && len(b.store.SealedSegments()) == 0
	})
	objs := b.tier.Uploader().Manifest().CommitLog()
	segOf := func(phys int64) int {
		for i, o := range objs {
			if o.Base <= phys && phys < o.End() {
				return i
			}
		}
		t.Fatalf("no object holds %d", phys)
		return -1
	}
	k1, k2 := segOf(recordAt(t, b, "Keep", 0, 0).PhysOffset), segOf(recordAt(t, b, "Keep", 0, 5).PhysOffset)
	if k1 < 1 || k2-k1 < 3 || k2 >= len(objs)-1 {
		t.Fatalf("Keep's records in segments %d and %d of %d: want Short-only segments before, between (two or more) and after", k1, k2, len(objs))
	}
	// Short's retention passes: its min moves past all its records; the
	// segments before Keep's first go as a prefix, those between Keep's
	// two from the middle; Keep's two and the newest stay.
	skew.Store(int64(2 * time.Minute))
	waitCond(t, 30*time.Second, "Short expired and the Short-only segments deleted", func() bool {
		m := b.tier.Uploader().Manifest()
		return b.store.MinQueueOffset("Short", 0) == int64(sent["Short"]) && len(m.CommitLog()) == 3
	})
	skew.Store(0)
	m := b.tier.Uploader().Manifest()
	if got := m.CommitLog(); got[0].Base != objs[k1].Base || got[1].Base != objs[k2].Base || got[2].Base != objs[len(objs)-1].Base {
		t.Fatalf("commitlog objects left %+v, want Keep's %d and %d and the newest", got, objs[k1].Base, objs[k2].Base)
	}
	// The gaps: between Keep's two segments, and between Keep's second
	// and the newest when Short filled more than that one.
	wantGaps := []upload.Span{{From: objs[k1].End(), To: objs[k2].Base}}
	if k2 < len(objs)-2 {
		wantGaps = append(wantGaps, upload.Span{From: objs[k2].End(), To: objs[len(objs)-1].Base})
	}
	if fmt.Sprint(m.Expired) != fmt.Sprint(wantGaps) {
		t.Fatalf("expired ranges %+v, want %+v", m.Expired, wantGaps)
	}
	if got := restore.ReplicaStart(m); got != end {
		t.Fatalf("a slave's U %d, want the uploaded end %d (the expired gap does not stop it)", got, end)
	}
	if got := b.store.MinPhysOffset(); got != objs[k1].Base {
		t.Fatalf("floor %d, want Keep's first segment %d", got, objs[k1].Base)
	}
	// Every object of a deleted segment is gone from the bucket; the kept
	// ones are all there, each holding its queue and key index.
	want := []int64{objs[k1].Base, objs[k2].Base, objs[len(objs)-1].Base}
	waitCond(t, 10*time.Second, "the deleted segments' objects gone", func() bool {
		return fmt.Sprint(bucketSegments(t, bucket)) == fmt.Sprint(want)
	})
	checkKeep := func(b *Broker, cl *remoting.Client) {
		t.Helper()
		var want []string
		for i := range sent["Keep"] {
			want = append(want, string(retentionBody("Keep", i)))
		}
		expectPull(t, "Keep across the gap", invoke(t, cl, b.Addr().String(), pullNow("Keep", 0, 0)), remoting.Success, want, 10, 10)
		expectPull(t, "Keep after the gap", invoke(t, cl, b.Addr().String(), pullNow("Keep", 0, 5)), remoting.Success, want[5:], 10, 10)
	}
	checkKeep(b, cl)
	resp := invoke(t, cl, addr, pullNow("Short", 0, 300))
	if resp.Code != int32(remoting.PullOffsetMoved) {
		t.Fatalf("pull of an expired Short offset: %d %s", resp.Code, resp.Remark)
	}
	rep, err := b.ret.Report(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Topics {
		if s.Topic == "Keep" && (s.HeldSegments != 2 || s.HeldBytes != objs[k1].Length+objs[k2].Length) {
			t.Fatalf("Keep in the report: %+v, want its two segments (%d bytes)", s, objs[k1].Length+objs[k2].Length)
		}
		if s.Topic == "Short" && s.HeldSegments != 0 {
			t.Fatalf("Short in the report: %+v", s)
		}
	}
	// A restore on an empty disk reads Keep across the gap from the bucket.
	stop()
	cfg.DataDir = t.TempDir()
	b, cl, _ = startSkewed(t, cfg, bucket, &skew)
	if got := b.store.MinQueueOffset("Short", 0); got != int64(sent["Short"]) {
		t.Fatalf("restored: Short's min %d, want %d", got, sent["Short"])
	}
	checkKeep(b, cl)
}

// TestTopicRetentionExpiresDeliveredInternalRecords: with per-topic
// retention and no STRATAMQ_RETENTION, the records the broker consumes
// itself (delayed messages once delivered, half and op records once
// resolved) expire at the progress of the last checkpoint, so they do not
// keep their segments for ever: once Short's own retention passes, every
// segment goes. Without retention's expireInternal the schedule and half
// queues' minima stay at 0 and keep them all.
func TestTopicRetentionExpiresDeliveredInternalRecords(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 0, DelayLevels: "1s", CheckpointInterval: 200 * time.Millisecond,
		TransactionCheckInterval: 200 * time.Millisecond}
	var skew atomic.Int64
	b, cl, _ := startSkewed(t, cfg, bucket, &skew)
	addr := b.Addr().String()
	if r := invoke(t, cl, addr, createTopicAttrReq("Short", "+"+RetentionAttribute+"=1m")); r.Code != 0 {
		t.Fatalf("create Short: %d %s", r.Code, r.Remark)
	}
	const delayed = 150
	halves := int64(0)
	for i := range delayed {
		if r := invoke(t, cl, addr, sendReq("Short", 0, retentionBody("Short", i), PropDelay+"\x011\x02")); r.Code != 0 {
			t.Fatalf("delayed send %d: %d %s", i, r.Code, r.Remark)
		}
		if i%8 == 0 {
			halves++
			uniq := fmt.Sprintf("TX%03d", i)
			phys, half := halfSent(t, b, cl, "Short", 0, retentionBody("Half", i), uniq)
			if r := invoke(t, cl, addr, endReq("pg", phys, half, sysFlagTransCommit, uniq)); r.Code != 0 {
				t.Fatalf("commit %s: %d %s", uniq, r.Code, r.Remark)
			}
		}
	}
	waitCond(t, 30*time.Second, "every delayed message delivered and every half committed", func() bool {
		return b.store.MaxQueueOffset("Short", 0) == delayed+halves
	})
	// A checkpoint counts the deliveries and commits once the bucket holds
	// them: seal and upload them first.
	if err := b.store.SealActive(); err != nil {
		t.Fatal(err)
	}
	b.tier.Uploader().Notify()
	waitCond(t, 30*time.Second, "a checkpoint with the delivery and the check progress", func() bool {
		p := b.savedProgress()
		return p != nil && p[queueKey{ScheduleTopic, 0}] == delayed && p[queueKey{TransHalfTopic, 0}] == halves
	})
	waitCond(t, 30*time.Second, "every segment uploaded and dropped locally", func() bool {
		p, _ := b.tier.Sealed(context.Background())
		return len(p) == 0 && len(b.store.SealedSegments()) == 0
	})
	before := len(b.tier.Uploader().Manifest().CommitLog())
	if before < 3 {
		t.Fatalf("%d segments uploaded, want at least 3", before)
	}
	skew.Store(int64(2 * time.Minute))
	waitCond(t, 30*time.Second, "every segment deleted", func() bool {
		return len(b.tier.Uploader().Manifest().CommitLog()) == 0
	})
	for _, q := range []queueKey{{ScheduleTopic, 0}, {TransHalfTopic, 0}, {"Short", 0}} {
		if mn, mx := b.store.MinQueueOffset(q.topic, q.queue), b.store.MaxQueueOffset(q.topic, q.queue); mn != mx {
			t.Errorf("%s/%d: min %d, max %d: want everything expired", q.topic, q.queue, mn, mx)
		}
	}
}

// bucketSegments lists the segment objects of broker-a's prefix by base,
// in order. A segment is one object holding its queue and key index as
// sections: an object of any other kind under commitlog/ (an index object
// of its own), or a segment object without both sections, fails the test.
func bucketSegments(t *testing.T, bucket tier.Bucket) []int64 {
	t.Helper()
	ctx := context.Background()
	var bases []int64
	err := bucket.List(ctx, "DefaultCluster/broker-a/commitlog/", func(key string, size int64) error {
		name := strings.TrimPrefix(key, "DefaultCluster/broker-a/commitlog/")
		// <20-digit base>.seg, or with the lease epoch, <base>.<epoch>.seg
		base, err := strconv.ParseInt(name[:min(len(name), 20)], 10, 64)
		if err != nil || !strings.HasSuffix(name, ".seg") {
			t.Fatalf("object %s besides the segments", key)
		}
		f, err := segfile.ReadFooter(ctx, bucket.ReadAt, key, size)
		if err != nil {
			return err
		}
		for _, k := range []upload.Kind{upload.KindQueueIndex, upload.KindKeyIndex} {
			if _, ok := f.Section(uint32(k)); !ok {
				t.Fatalf("segment object %s holds no %s", key, k)
			}
		}
		bases = append(bases, base)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bases
}
