package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/s3"
	"github.com/stratamq/stratamq/tier/s3fake"
	"github.com/stratamq/stratamq/tier/upload"
)

// fakeBucket is the real S3 provider talking to the in-process S3 fake.
func fakeBucket(t *testing.T) (*s3fake.Fake, tier.Bucket) {
	t.Helper()
	fake := s3fake.New(t, s3fake.Options{})
	fake.CreateBucket("stratamq")
	b, err := s3.New(context.Background(), s3.Config{Bucket: "stratamq", Endpoint: fake.URL(), Region: "us-east-1",
		AccessKey: "AK", SecretKey: "SK"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return fake, b
}

func startTieredBroker(t *testing.T, dir string, bucket tier.Bucket) (*Broker, *remoting.Client, func()) {
	t.Helper()
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 0}
	return runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
}

// produceTiered sends n messages of ~8 KiB to topic queue 0 and returns
// their bodies in queue order. Every send must succeed whatever the bucket does.
func produceTiered(t *testing.T, b *Broker, cl *remoting.Client, topic string, n int) [][]byte {
	t.Helper()
	var bodies [][]byte
	for i := 0; i < n; i++ {
		body := bytes.Repeat([]byte(fmt.Sprintf("%06d|", i)), 1170)
		resp := invoke(t, cl, b.Addr().String(), sendReq(topic, 0, body, ""))
		if resp.Code != int32(remoting.Success) {
			t.Fatalf("send %d while the bucket misbehaves: %d %s", i, resp.Code, resp.Remark)
		}
		bodies = append(bodies, body)
	}
	return bodies
}

// readBack reads queue 0 of topic back (readAll) and fails unless every
// message is served with its body.
func readBack(t *testing.T, b *Broker, cl *remoting.Client, topic string, bodies [][]byte) {
	t.Helper()
	got, bad := readAll(t, b, cl, topic, 0, len(bodies))
	if bad != nil {
		t.Fatalf("read back: %d %s", bad.Code, bad.Remark)
	}
	for i := range bodies {
		if !bytes.Equal(got[i], bodies[i]) {
			t.Fatalf("message %d differs after the bucket round trip", i)
		}
	}
}

// readAll pulls topic/queue from offset 0 until it has n messages or
// reaches the queue's end, and returns the bodies in queue order, or the
// first non-success response other than a hole (readAt).
func readAll(t *testing.T, b *Broker, cl *remoting.Client, topic string, queue, n int) ([][]byte, *remoting.Command) {
	t.Helper()
	at, bad := readAt(t, b, cl, topic, queue, n)
	got := make([][]byte, len(at))
	for i, m := range at {
		got[i] = m.body
	}
	return got, bad
}

// queuedBody is a message read back: its queue offset and body.
type queuedBody struct {
	off  int64
	body []byte
}

// readAt pulls topic/queue from offset 0 until it has n messages or
// reaches the queue's end, moving past holes (PULL_NOT_FOUND with a later
// nextBeginOffset, as clients do: a promoted copy's jump), and returns each
// message with its queue offset, or the first other non-success response.
func readAt(t *testing.T, b *Broker, cl *remoting.Client, topic string, queue, n int) ([]queuedBody, *remoting.Command) {
	t.Helper()
	var got []queuedBody
	end := b.store.MaxQueueOffset(topic, int32(queue))
	for off := int64(0); off < end && len(got) < n; {
		resp := invoke(t, cl, b.Addr().String(), pullReq("reader", topic, queue, off, 0, "*"))
		next, _ := strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64)
		if resp.Code == int32(remoting.PullNotFound) && next > off && next <= end {
			off = next
			continue
		}
		if resp.Code != int32(remoting.Success) {
			return got, resp
		}
		for body := resp.Body; len(body) > 0; {
			size := int(binary.BigEndian.Uint32(body))
			rec := body[:size]
			bl := int(binary.BigEndian.Uint32(rec[84:]))
			got = append(got, queuedBody{off: int64(binary.BigEndian.Uint64(rec[20:])), body: append([]byte(nil), rec[88:88+bl]...)})
			body = body[size:]
		}
		if next <= off {
			t.Fatalf("pull %s/%d at %d did not advance (next %d)", topic, queue, off, next)
		}
		off = next
	}
	return got, nil
}

// byOffset indexes messages read back by queue offset.
func byOffset(ms []queuedBody) map[int64][]byte {
	out := make(map[int64][]byte, len(ms))
	for _, m := range ms {
		out[m.off] = m.body
	}
	return out
}

// TestBrokerTierFaultsLoseNothing: while the S3 endpoint answers 503
// SlowDown or is gone altogether, producing continues; once it recovers
// the uploads catch up, local copies are dropped, and every message reads
// back byte-identical from the bucket.
func TestBrokerTierFaultsLoseNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault func(f *s3fake.Fake)
	}{
		{"slowdown", func(f *s3fake.Fake) { f.Fail("PutObject", 12, 503, "SlowDown") }},
		{"gone", func(f *s3fake.Fake) {
			for range 40 {
				f.Next("", s3fake.GoAway())
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake, bucket := fakeBucket(t)
			b, cl, _ := startTieredBroker(t, t.TempDir(), bucket)
			// The topic exists and a checkpoint lists it before the fault:
			// a topic first written during an outage is refused until a
			// checkpoint can list it (TestBrokerNewTopicNeedsCheckpoint).
			bodies := produceTiered(t, b, cl, "Faulty", 1)
			tc.fault(fake)
			bodies = append(bodies, produceTiered(t, b, cl, "Faulty", 400)...) // ≈ 3.2 MiB: 3 sealed segments
			waitCond(t, 90*time.Second, "faults consumed and sealed segments uploaded and dropped", func() bool {
				return fake.PendingHooks() == 0 && len(b.store.SealedSegments()) == 0 && b.store.LocalMinPhysOffset() > 0
			})
			readBack(t, b, cl, "Faulty", bodies)
		})
	}
}

// TestBrokerTierCorruptFrameNeverServed: a flipped byte inside an uploaded
// object is caught by the frame checksum on the cold read and reported; the
// pull fails instead of returning wrong bytes.
func TestBrokerTierCorruptFrameNeverServed(t *testing.T) {
	t.Parallel()
	_, bucket := fakeBucket(t)
	dir := t.TempDir()
	b, cl, stop := startTieredBroker(t, dir, bucket)
	h := remoting.QueryConsumerOffsetRequestHeader{ConsumerGroup: "newcomer", Topic: "Rot", QueueID: 0}
	if r := invoke(t, cl, b.Addr().String(), remoting.NewRequest(remoting.QueryConsumerOffset, h.Encode(), nil)); r.Code != int32(remoting.Success) || r.ExtFields["offset"] != "0" {
		t.Fatalf("a new group on an empty queue: %d %v, want offset 0", r.Code, r.ExtFields)
	}
	bodies := produceTiered(t, b, cl, "Rot", 300)
	waitCond(t, 60*time.Second, "segments uploaded and dropped", func() bool {
		return len(b.store.SealedSegments()) == 0 && b.store.LocalMinPhysOffset() > 0
	})
	// The queue's first message now lives only in the bucket: a new group
	// is told "no offset" and applies its ConsumeFromWhere, as RocketMQ does
	// for data that is no longer hot.
	if r := invoke(t, cl, b.Addr().String(), remoting.NewRequest(remoting.QueryConsumerOffset, h.Encode(), nil)); r.Code != int32(remoting.QueryNotFound) {
		t.Fatalf("a new group on a tiered queue: %d %v, want QUERY_NOT_FOUND", r.Code, r.ExtFields)
	}
	stop()

	ctx := context.Background()
	key := segmentKeyAt(t, bucket, 0)
	attrs, err := bucket.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	obj := make([]byte, attrs.Size)
	if err := bucket.ReadAt(ctx, key, obj, 0); err != nil {
		t.Fatal(err)
	}
	obj[100] ^= 0xFF // inside the first frame's compressed bytes
	if err := bucket.Put(ctx, key, bytes.NewReader(obj), int64(len(obj))); err != nil {
		t.Fatal(err)
	}

	b2, cl2, _ := startTieredBroker(t, dir, bucket)
	got, bad := readAll(t, b2, cl2, "Rot", 0, len(bodies))
	if bad == nil {
		t.Fatal("a corrupted object was served")
	}
	if bad.Code != int32(remoting.SystemError) || !strings.Contains(strings.ToLower(bad.Remark), "corrupt") {
		t.Fatalf("corruption reported as %d %q", bad.Code, bad.Remark)
	}
	for i := range got {
		if !bytes.Equal(got[i], bodies[i]) {
			t.Fatalf("message %d served wrong bytes", i)
		}
	}
}

// TestBrokerTierBucketRetention: objects older than STRATAMQ_RETENTION are
// deleted whole, the queue's minimum offset advances, and a consumer behind
// it gets PULL_OFFSET_MOVED pointing at the new minimum, from where it reads on.
func TestBrokerTierBucketRetention(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 0, Retention: 1500 * time.Millisecond}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	bodies := produceTiered(t, b, cl, "Old", 400)
	countObjects := func() int {
		n := 0
		_ = bucket.List(context.Background(), "DefaultCluster/broker-a/commitlog/", func(string, int64) error { n++; return nil })
		return n
	}
	waitCond(t, 30*time.Second, "three segments uploaded", func() bool { return countObjects() >= 3 || b.store.MinPhysOffset() > 0 })
	waitCond(t, 30*time.Second, "expired objects deleted and the floor raised", func() bool {
		return countObjects() == 0 && b.store.MinPhysOffset() > 0
	})
	minQ := b.store.MinQueueOffset("Old", 0)
	if minQ <= 0 || minQ >= int64(len(bodies)) {
		t.Fatalf("queue min offset %d after retention (of %d)", minQ, len(bodies))
	}
	resp := invoke(t, cl, b.Addr().String(), pullReq("late", "Old", 0, 0, 0, "*"))
	if resp.Code != int32(remoting.PullOffsetMoved) {
		t.Fatalf("pull below the retention floor: %d %s, want PULL_OFFSET_MOVED", resp.Code, resp.Remark)
	}
	if resp.ExtFields["nextBeginOffset"] != strconv.FormatInt(minQ, 10) || resp.ExtFields["minOffset"] != strconv.FormatInt(minQ, 10) {
		t.Fatalf("moved to %v, want the new minimum %d", resp.ExtFields, minQ)
	}
	resp = invoke(t, cl, b.Addr().String(), pullReq("late", "Old", 0, minQ, 0, "*"))
	if resp.Code != int32(remoting.Success) {
		t.Fatalf("pull at the new minimum: %d %s", resp.Code, resp.Remark)
	}
	// The manifest no longer lists the deleted objects.
	m, _, err := upload.LoadManifest(context.Background(), bucket, "DefaultCluster/broker-a/"+upload.ManifestKey(""))
	if err != nil {
		t.Fatal(err)
	}
	if cl := m.CommitLog(); len(cl) != 0 {
		t.Fatalf("manifest still lists %d deleted commitlog objects", len(cl))
	}
}

// TestBrokerTierUploadsNoConsumeQueues: consumequeue files are not
// uploaded (their entries are in each segment's queue index object), so
// full ones add no PUT and no manifest entry.
func TestBrokerTierUploadsNoConsumeQueues(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 1 << 30, CQEntriesPerFile: 10}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	for i := 0; i < 25; i++ {
		if r := invoke(t, cl, b.Addr().String(), sendReq("CQ", 2, []byte("m"+strconv.Itoa(i)), "")); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	if err := b.store.Flush(); err != nil {
		t.Fatal(err)
	}
	waitCond(t, 10*time.Second, "two full consumequeue files", func() bool { return len(b.store.SealedQueueFiles()) == 2 })
	if err := b.store.SealActive(); err != nil {
		t.Fatal(err)
	}
	b.tier.Uploader().Notify()
	waitCond(t, 30*time.Second, "the segment and its indexes uploaded", func() bool {
		p, _ := b.tier.Sealed(context.Background())
		return len(p) == 0
	})
	b.tier.Uploader().Flush()
	waitCond(t, 30*time.Second, "the manifest lists the segment", func() bool {
		m := b.tier.Uploader().Manifest()
		return m != nil && len(m.CommitLog()) == 1
	})
	var listed int
	err := bucket.List(context.Background(), "DefaultCluster/broker-a/", func(key string, _ int64) error {
		listed++
		if strings.Contains(key, "/consumequeue/") {
			t.Errorf("consumequeue object uploaded: %s", key)
		}
		return nil
	})
	if err != nil || listed == 0 {
		t.Fatalf("list: %d objects, %v", listed, err)
	}
	for _, o := range b.tier.Uploader().Manifest().Objects {
		if o.Kind == upload.KindConsumeQueue.String() {
			t.Fatalf("manifest lists a consumequeue object: %+v", o)
		}
	}
}

// TestBrokerTierSealsByAge: a quiet active segment is sealed after
// STRATAMQ_SEGMENT_MAX_AGE and uploaded, so bytes do not stay only local.
func TestBrokerTierSealsByAge(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 64 << 20,
		LocalRetention: 1 << 30, SegmentMaxAge: time.Second}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	if r := invoke(t, cl, b.Addr().String(), sendReq("Quiet", 0, []byte("only one"), "")); r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	waitCond(t, 30*time.Second, "the aged segment uploaded", func() bool {
		return segmentKeyAt(t, bucket, 0) != ""
	})
}

// outageBucket refuses every segment upload (503) while down is set.
type outageBucket struct {
	tier.Bucket
	down     atomic.Bool
	refusals atomic.Int64
}

func (o *outageBucket) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if o.down.Load() && strings.HasSuffix(key, ".seg") {
		o.refusals.Add(1)
		return &tier.ServerError{Op: "put", Key: key, Status: 503, Code: "SlowDown", Err: errors.New("outage")}
	}
	return o.Bucket.Put(ctx, key, r, size)
}

// TestBrokerTierNeverDropsUnuploaded: with STRATAMQ_LOCAL_RETENTION=0 and
// the bucket refusing uploads, sealed segments stay on local disk and every
// message stays readable; once the bucket is back they upload and go.
func TestBrokerTierNeverDropsUnuploaded(t *testing.T) {
	t.Parallel()
	bucket := &outageBucket{Bucket: tier.NewMem()}
	bucket.down.Store(true)
	b, cl, _ := startTieredBroker(t, t.TempDir(), bucket)
	bodies := produceTiered(t, b, cl, "Hold", 400)
	waitCond(t, 30*time.Second, "uploads attempted and refused", func() bool { return bucket.refusals.Load() >= 3 })
	if got := len(b.store.SealedSegments()); got < 3 || b.store.LocalMinPhysOffset() != 0 {
		t.Fatalf("during the outage: %d sealed segments local, local log starts at %d; nothing may be dropped", got, b.store.LocalMinPhysOffset())
	}
	got, bad := readAll(t, b, cl, "Hold", 0, len(bodies))
	if bad != nil || len(got) != len(bodies) {
		t.Fatalf("read during the outage: %v (%d of %d)", bad, len(got), len(bodies))
	}
	bucket.down.Store(false)
	waitCond(t, 60*time.Second, "uploaded and dropped after the outage", func() bool {
		return len(b.store.SealedSegments()) == 0 && b.store.LocalMinPhysOffset() > 0
	})
}
