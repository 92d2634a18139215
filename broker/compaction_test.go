package broker

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker/compaction"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/upload"
)

// compactSent is one message sent to a compacted topic.
type compactSent struct {
	offset int64
	key    string
	body   string // "" a tombstone
}

// compactWant is what a compacted queue read from 0 holds: the latest
// record of each key, without the keys whose latest is a tombstone (the
// tests drop tombstones at once).
func compactWant(sent []compactSent) []compactSent {
	latest := map[string]int64{}
	for _, s := range sent {
		latest[s.key] = s.offset
	}
	var out []compactSent
	for _, s := range sent {
		if latest[s.key] == s.offset && s.body != "" {
			out = append(out, s)
		}
	}
	return out
}

// pullAllFrom0 reads a queue from offset 0 to its max as a consumer
// does, following nextBeginOffset, and returns what it got.
func pullAllFrom0(t *testing.T, cl *remoting.Client, addr, topic string, max int64) []compactSent {
	t.Helper()
	var got []compactSent
	for off, pulls := int64(0), 0; off < max; pulls++ {
		if pulls > 10000 {
			t.Fatalf("%s: no end after %d pulls", topic, pulls)
		}
		resp := invoke(t, cl, addr, pullNow(topic, 0, off))
		if resp.Code != int32(remoting.Success) && resp.Code != int32(remoting.PullNotFound) && resp.Code != int32(remoting.PullRetryImmediately) {
			t.Fatalf("pull %s at %d: %d %s", topic, off, resp.Code, resp.Remark)
		}
		for body := resp.Body; len(body) > 0; {
			r, n, err := store.DecodeRecord(body)
			if err != nil {
				t.Fatal(err)
			}
			k, _ := propValue(r.Properties, "KEYS")
			got = append(got, compactSent{offset: r.QueueOffset, key: k, body: string(r.Body)})
			body = body[n:]
		}
		next, _ := strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64)
		if next <= off {
			t.Fatalf("pull %s at %d: nextBeginOffset %d", topic, off, next)
		}
		off = next
	}
	return got
}

func sameCompacted(t *testing.T, what string, got, want []compactSent) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d (the latest of each live key)", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: record %d is %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

// TestCompactedTopicInTheBucket: a topic with cleanup.policy=COMPACTION
// (with tombstones, empty bodies, which other topics refuse) is compacted
// from the bucket once its segments are uploaded; the segments its
// generation covers leave the bucket (but the newest); a consumer from
// offset 0 gets exactly the latest value of each live key in offset
// order, GET_MIN_OFFSET the first of them; msgId and key lookups find the
// kept records; all of it again after a restore on an empty disk.
func TestCompactedTopicInTheBucket(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 0, CompactionInterval: 50 * time.Millisecond,
		CompactionMinMessages: 1, CompactionTombstoneRetention: time.Nanosecond, CompactionGrace: 300 * time.Millisecond,
		CompactionMaxDelay: 100 * time.Millisecond,
		HAListen:           haTestAddr(t)}
	b, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	addr := b.Addr().String()
	if r := invoke(t, cl, addr, createTopicAttrReq("Conf", "+"+compaction.Attribute+"="+compaction.PolicyCompaction)); r.Code != 0 {
		t.Fatalf("create Conf: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("Bad", "+"+compaction.Attribute+"=compact")); r.Code == 0 {
		t.Fatal("a bad cleanup.policy was accepted")
	}
	// cleanup.policy is set at creation, as RocketMQ's: never added, changed or removed after.
	for _, mods := range []string{"-" + compaction.Attribute, "+" + compaction.Attribute + "=" + compaction.PolicyDelete} {
		if r := invoke(t, cl, addr, createTopicAttrReq("Conf", mods)); r.Code == 0 || !strings.Contains(r.Remark, "unchangeable") {
			t.Fatalf("Conf updated with %s: %d %s", mods, r.Code, r.Remark)
		}
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("Plain", "")); r.Code != 0 {
		t.Fatalf("create Plain: %d %s", r.Code, r.Remark)
	}
	if r := invoke(t, cl, addr, createTopicAttrReq("Plain", "+"+compaction.Attribute+"="+compaction.PolicyCompaction)); r.Code == 0 {
		t.Fatal("an existing topic was made compacted")
	}
	if r := invoke(t, cl, addr, sendReq("Plain", 0, nil, "")); r.Code != int32(remoting.MessageIllegal) {
		t.Fatalf("an empty body on a plain topic: %d %s, want MESSAGE_ILLEGAL", r.Code, r.Remark)
	}
	if r := invoke(t, cl, addr, sendReq("Keep", 0, []byte("kept for ever"), "")); r.Code != 0 {
		t.Fatalf("send Keep: %d %s", r.Code, r.Remark)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	var sent []compactSent
	msgIDs := map[int64]string{}
	const nConf = 6000 // about 4 MiB: segments 1 to 3 hold only Conf's records
	for i := range nConf {
		key := fmt.Sprintf("key%02d", rng.IntN(40))
		body := string(bytes.Repeat([]byte(fmt.Sprintf("%s=%05d|", key, i)), 60))
		if i%11 == 10 {
			body = ""
		}
		r := invoke(t, cl, addr, sendReq("Conf", 0, []byte(body), "KEYS\x01"+key+"\x02"))
		if r.Code != 0 {
			t.Fatalf("send %d: %d %s", i, r.Code, r.Remark)
		}
		off, _ := strconv.ParseInt(r.ExtFields["queueOffset"], 10, 64)
		sent = append(sent, compactSent{offset: off, key: key, body: body})
		msgIDs[off] = r.ExtFields["msgId"]
	}
	if err := b.store.SealActive(); err != nil {
		t.Fatal(err)
	}
	b.tier.Uploader().Notify()
	want := compactWant(sent)
	ctx := context.Background()
	waitCond(t, 30*time.Second, "Conf compacted up to its end", func() bool {
		p, ok, _ := b.compactPoint(ctx, "Conf", 0)
		return ok && p == nConf
	})
	// The first segment holds Keep's message (kept for ever) and stays; the
	// newest stays (it records how far the log was uploaded); the ones in
	// between hold only Conf's records, which the generation covers: gone.
	var segs []int64
	waitCond(t, 30*time.Second, "the covered segments deleted from the bucket", func() bool {
		segs = bucketSegmentBases(t, bucket)
		return len(segs) == 2 && segs[0] == 0
	})
	if segs[1] < 3<<20 {
		t.Fatalf("segments %v: want the newest past 3 MiB (two or more deleted between)", segs)
	}
	check := func(what string, b *Broker, cl *remoting.Client) {
		t.Helper()
		addr := b.Addr().String()
		expectPull(t, what+": Keep", invoke(t, cl, addr, pullNow("Keep", 0, 0)), remoting.Success, []string{"kept for ever"}, 1, 1)
		sameCompacted(t, what, pullAllFrom0(t, cl, addr, "Conf", nConf), want)
		h := remoting.GetMinOffsetRequestHeader{Topic: "Conf", QueueID: 0}
		if r := invoke(t, cl, addr, remoting.NewRequest(remoting.GetMinOffset, h.Encode(), nil)); r.ExtFields["offset"] != strconv.FormatInt(want[0].offset, 10) {
			t.Fatalf("%s: GET_MIN_OFFSET %v, want %d", what, r.ExtFields, want[0].offset)
		}
		for _, w := range []compactSent{want[0], want[len(want)/2]} {
			vh := remoting.ViewMessageRequestHeader{Offset: mustPhys(t, msgIDs[w.offset])}
			v := invoke(t, cl, addr, remoting.NewRequest(remoting.ViewMessageByID, vh.Encode(), nil))
			if v.Code != int32(remoting.Success) || !bytes.Contains(v.Body, []byte(w.body)) {
				t.Fatalf("%s: msgId of offset %d: %d %s", what, w.offset, v.Code, v.Remark)
			}
			q := remoting.QueryMessageRequestHeader{Topic: "Conf", Key: w.key, MaxNum: 32, BeginTimestamp: 0, EndTimestamp: 1<<63 - 1}
			resp := invoke(t, cl, addr, remoting.NewRequest(remoting.QueryMessage, q.Encode(), nil))
			if resp.Code != int32(remoting.Success) || !bytes.Contains(resp.Body, []byte(w.body)) {
				t.Fatalf("%s: QUERY_MESSAGE %s: %d %s, want its latest value", what, w.key, resp.Code, resp.Remark)
			}
		}
	}
	check("compacted", b, cl)
	// The bucket holds the generation and the two segments: a generation
	// an earlier round wrote (segments uploaded one by one) goes a grace
	// after it was replaced.
	var gens []string
	listGens := func() []string {
		gens = gens[:0]
		if err := bucket.List(ctx, "DefaultCluster/broker-a/compacted/", func(key string, _ int64) error {
			gens = append(gens, key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return gens
	}
	waitCond(t, 30*time.Second, "one generation object left", func() bool { return len(listGens()) == 1 })
	m, _, err := upload.LoadManifest(ctx, bucket, "DefaultCluster/broker-a/"+upload.ManifestKey(""))
	if err != nil {
		t.Fatal(err)
	}
	listed := 0
	for _, o := range m.Objects {
		if o.Kind == compaction.Kind {
			listed++
			if "DefaultCluster/broker-a/"+o.Key != gens[0] || o.Topic != "Conf" || o.Base != nConf {
				t.Fatalf("listed generation %+v, bucket %v", o, gens)
			}
		}
	}
	if listed != 1 {
		t.Fatalf("%d generations listed", listed)
	}

	// A slave over the same bucket (read-only) serves the same history.
	ro := &readOnlyBucket{Bucket: bucket}
	sl, scl, stopSlave := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, Role: RoleSlave, HAMaster: cfg.HAListen, BrokerID: 1}, Deps{Logger: discardLogger(), Bucket: ro})
	waitCond(t, 30*time.Second, "the slave to know Conf and its generation", func() bool {
		p, ok, _ := sl.compactPoint(ctx, "Conf", 0)
		return ok && p == nConf && sl.store.MaxQueueOffset("Conf", 0) == nConf
	})
	check("slave", sl, scl)
	stopSlave()
	if n := ro.writes.Load(); n != 0 {
		t.Fatalf("the slave tried %d bucket writes", n)
	}

	// A restore on an empty disk reads the same history.
	stop()
	cfg.DataDir = t.TempDir()
	b, cl, stop = runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	defer stop()
	check("restored on an empty disk", b, cl)

	// More values for a few keys, compacted into the next generation.
	addr = b.Addr().String()
	next := int64(nConf)
	for i := range 30 {
		key := fmt.Sprintf("key%02d", i%3)
		body := fmt.Sprintf("%s=late%02d", key, i)
		r := invoke(t, cl, addr, sendReq("Conf", 0, []byte(body), "KEYS\x01"+key+"\x02"))
		if r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
		if off, _ := strconv.ParseInt(r.ExtFields["queueOffset"], 10, 64); off != next {
			t.Fatalf("restored broker numbered a send %d, want %d", off, next)
		}
		sent = append(sent, compactSent{offset: next, key: key, body: body})
		next++
	}
	if err := b.store.SealActive(); err != nil {
		t.Fatal(err)
	}
	b.tier.Uploader().Notify()
	want = compactWant(sent)
	waitCond(t, 30*time.Second, "the new values compacted", func() bool {
		p, ok, _ := b.compactPoint(ctx, "Conf", 0)
		return ok && p == next
	})
	sameCompacted(t, "second generation", pullAllFrom0(t, cl, addr, "Conf", next), want)
	// The replaced generation is deleted a grace later; the new one stays.
	newKey := "DefaultCluster/broker-a/" + compaction.Key("Conf", 0, next, 2)
	waitCond(t, 30*time.Second, "the replaced generation deleted", func() bool {
		g := listGens()
		return len(g) == 1 && g[0] == newKey
	})
}

// bucketSegmentBases lists the commitlog objects' bases.
func bucketSegmentBases(t *testing.T, bucket tier.Bucket) []int64 {
	t.Helper()
	var out []int64
	err := bucket.List(context.Background(), "DefaultCluster/broker-a/commitlog/", func(key string, _ int64) error {
		name := key[len("DefaultCluster/broker-a/commitlog/"):]
		base, err := strconv.ParseInt(name[:min(len(name), 20)], 10, 64)
		if err == nil {
			out = append(out, base)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
