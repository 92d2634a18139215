package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/segfile"
	"github.com/stratamq/stratamq/tier/upload"
)

// produceKeyed sends n messages of ~8 KiB to topic queue 0: message i has
// KEYS "k<i> g<i/40>" and UNIQ_KEY "UNIQ<i>". It returns their store
// times.
func produceKeyed(t *testing.T, b *Broker, cl *remoting.Client, topic string, n int) []int64 {
	t.Helper()
	var ts []int64
	for i := 0; i < n; i++ {
		body := bytes.Repeat([]byte(fmt.Sprintf("%06d|", i)), 1170)
		props := fmt.Sprintf("KEYS\x01k%d g%d\x02UNIQ_KEY\x01UNIQ%d\x02", i, i/40, i)
		resp := invoke(t, cl, b.Addr().String(), sendReq(topic, 0, body, props))
		if resp.Code != int32(remoting.Success) {
			t.Fatalf("send %d: %d %s", i, resp.Code, resp.Remark)
		}
		rec, err := b.store.ReadRecord(mustOffset(t, resp))
		if err != nil {
			t.Fatal(err)
		}
		r, _, _ := store.DecodeRecord(rec)
		ts = append(ts, r.StoreTimestamp)
	}
	return ts
}

func mustOffset(t *testing.T, resp *remoting.Command) int64 {
	t.Helper()
	_, off, err := store.DecodeMessageID(resp.ExtFields["msgId"])
	if err != nil {
		t.Fatal(err)
	}
	return off
}

// queryKey sends QUERY_MESSAGE and returns the message numbers found (from
// their bodies), their commitlog offsets and the response.
func queryKey(t *testing.T, b *Broker, cl *remoting.Client, h remoting.QueryMessageRequestHeader) ([]int, []int64, *remoting.Command) {
	t.Helper()
	resp := invoke(t, cl, b.Addr().String(), remoting.NewRequest(remoting.QueryMessage, h.Encode(), nil))
	if resp.Code != int32(remoting.Success) && resp.Code != int32(remoting.QueryNotFound) {
		t.Fatalf("QUERY_MESSAGE %+v: %d %s", h, resp.Code, resp.Remark)
	}
	var ids []int
	var offs []int64
	for body := resp.Body; len(body) > 0; {
		r, n, err := store.DecodeRecord(body)
		if err != nil {
			t.Fatalf("QUERY_MESSAGE body: %v", err)
		}
		id, err := strconv.Atoi(string(r.Body[:6]))
		if err != nil {
			t.Fatalf("body %q", r.Body[:8])
		}
		ids = append(ids, id)
		offs = append(offs, r.PhysOffset)
		body = body[n:]
	}
	return ids, offs, resp
}

func wantIDs(t *testing.T, what string, got []int, from, to int) {
	t.Helper()
	var want []int
	for i := from; i < to; i++ {
		want = append(want, i)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// countKeyIndexes counts the key indexes in the bucket: the segment
// objects whose footer holds a key index section. A segment's indexes are
// inside its object, so any other object under commitlog/ fails the test.
func countKeyIndexes(t *testing.T, bucket tier.Bucket) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	err := bucket.List(ctx, "DefaultCluster/broker-a/commitlog/", func(key string, size int64) error {
		if !strings.HasSuffix(key, ".seg") {
			t.Fatalf("object %s besides the segments (their indexes are sections of them)", key)
		}
		f, err := segfile.ReadFooter(ctx, bucket.ReadAt, key, size)
		if errors.Is(err, tier.ErrNotExist) {
			return nil // deleted by retention since the listing
		}
		if err != nil {
			return err
		}
		if _, ok := f.Section(uint32(upload.KindKeyIndex)); ok {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkKeyQueries asks for every key group (some in the bucket only, one
// across the local/bucket boundary, the newest local), a single key, a
// unique key, maxNum and time bounds, and returns how many groups straddle
// the boundary.
func checkKeyQueries(t *testing.T, b *Broker, cl *remoting.Client, topic string, n int, ts []int64) int {
	t.Helper()
	all := int64(math.MaxInt64)
	straddle := 0
	for g := 0; g*40 < n; g++ {
		ids, offs, _ := queryKey(t, b, cl, remoting.QueryMessageRequestHeader{Topic: topic, Key: fmt.Sprintf("g%d", g), MaxNum: 64, EndTimestamp: all})
		wantIDs(t, fmt.Sprintf("group g%d", g), ids, g*40, min(g*40+40, n))
		local := b.store.LocalMinPhysOffset()
		if offs[0] < local && offs[len(offs)-1] >= local {
			straddle++
		}
	}
	ids, _, _ := queryKey(t, b, cl, remoting.QueryMessageRequestHeader{Topic: topic, Key: "k0", MaxNum: 64, EndTimestamp: all})
	wantIDs(t, "k0", ids, 0, 1)
	ids, _, _ = queryKey(t, b, cl, remoting.QueryMessageRequestHeader{Topic: topic, Key: "UNIQ7", MaxNum: 1, EndTimestamp: all, UniqueKeyQuery: true})
	wantIDs(t, "unique key UNIQ7", ids, 7, 8)
	ids, _, _ = queryKey(t, b, cl, remoting.QueryMessageRequestHeader{Topic: topic, Key: "g1", MaxNum: 5, EndTimestamp: all})
	wantIDs(t, "g1 maxNum 5 (the newest)", ids, 75, 80)
	// Store times are ms and shared by neighbours: bound by message 41's
	// and 50's times, and expect every message stored within them.
	from, to := 40, 0
	for i := 40; i < 80; i++ {
		if ts[i] < ts[41] {
			from = i + 1
		}
		if ts[i] <= ts[50] {
			to = i + 1
		}
	}
	ids, _, _ = queryKey(t, b, cl, remoting.QueryMessageRequestHeader{Topic: topic, Key: "g1", MaxNum: 64, BeginTimestamp: ts[41], EndTimestamp: ts[50]})
	wantIDs(t, "g1 within [ts41, ts50]", ids, from, to)
	_, _, resp := queryKey(t, b, cl, remoting.QueryMessageRequestHeader{Topic: topic, Key: "k0", MaxNum: 64, BeginTimestamp: ts[n-1] + 1, EndTimestamp: all})
	if resp.Code != int32(remoting.QueryNotFound) {
		t.Fatalf("k0 after its time: %d %s, want QUERY_NOT_FOUND", resp.Code, resp.Remark)
	}
	_, _, resp = queryKey(t, b, cl, remoting.QueryMessageRequestHeader{Topic: "OtherTopic", Key: "k0", MaxNum: 64, EndTimestamp: all})
	if resp.Code != int32(remoting.QueryNotFound) {
		t.Fatalf("k0 in another topic: %d %s, want QUERY_NOT_FOUND", resp.Code, resp.Remark)
	}
	return straddle
}

// TestBrokerQueryMessageTiers: QUERY_MESSAGE finds keys in the active
// segment, in sealed local segments, across the local/bucket boundary and
// only in the bucket (STRATAMQ_LOCAL_RETENTION=0, 1 MiB segments), and
// after a restore on an empty disk from the bucket alone.
func TestBrokerQueryMessageTiers(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	b, cl, stop := startTieredBroker(t, t.TempDir(), bucket)
	const n = 400
	ts := produceKeyed(t, b, cl, "Keyed", n)
	waitCond(t, 30*time.Second, "segments uploaded with their key indexes and dropped locally", func() bool {
		b.tier.Uploader().Flush() // no manifest delay
		return b.store.LocalMinPhysOffset() > 0 && countKeyIndexes(t, bucket) >= 2
	})
	// Some segments are local still: new ones seal while older ones go.
	produceKeyed(t, b, cl, "Filler", 1)
	if straddle := checkKeyQueries(t, b, cl, "Keyed", n, ts); straddle == 0 {
		t.Logf("no key group straddles the boundary at %d; the single-key checks cover both tiers", b.store.LocalMinPhysOffset())
	}
	_, _, resp := queryKey(t, b, cl, remoting.QueryMessageRequestHeader{Topic: "Keyed", Key: "k399", MaxNum: 64, EndTimestamp: math.MaxInt64})
	if resp.ExtFields["indexLastUpdatePhyoffset"] == "" || resp.ExtFields["indexLastUpdateTimestamp"] == "" {
		t.Fatalf("response header %v lacks indexLastUpdate*", resp.ExtFields)
	}
	stop() // drains: every segment and its indexes go to the bucket

	// A new machine: an empty data dir, the same bucket.
	b2, cl2, _ := startTieredBroker(t, t.TempDir(), bucket)
	if b2.store.LocalMinPhysOffset() == 0 {
		t.Fatalf("the restored broker's log starts at 0: not restored from the bucket")
	}
	checkKeyQueries(t, b2, cl2, "Keyed", n, ts)
}

// TestBrokerQueryMessageStraddles pins a key group across the boundary:
// the oldest local segment is kept (a large local retention), the ones
// below it are in the bucket only.
func TestBrokerQueryMessageStraddles(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 2 << 20}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	const n = 600
	ts := produceKeyed(t, b, cl, "Keyed", n)
	// Every sealed segment listed and local retention applied: the
	// boundary no longer moves while the queries run (uploads finishing
	// together are listed together, a moment after the first drop).
	waitCond(t, 30*time.Second, "old segments dropped, the rest uploaded", func() bool {
		b.tier.Uploader().Flush()
		p, _ := b.tier.Sealed(context.Background())
		var local int64
		for _, s := range b.store.SealedSegments() {
			local += s.Length
		}
		return b.store.LocalMinPhysOffset() > 0 && len(p) == 0 && local <= int64(cfg.LocalRetention)
	})
	if straddle := checkKeyQueries(t, b, cl, "Keyed", n, ts); straddle == 0 {
		t.Fatalf("no key group straddles the boundary at %d", b.store.LocalMinPhysOffset())
	}
}

// TestBrokerQueryMessageExpired: bucket retention deletes the key index
// objects with their segments, and the dropped segments' local key index
// files go with them; the expired keys are no longer found.
func TestBrokerQueryMessageExpired(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LocalRetention: 0, Retention: 1500 * time.Millisecond}
	b, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	produceKeyed(t, b, cl, "Old", 400)
	waitCond(t, 30*time.Second, "key indexes uploaded", func() bool {
		b.tier.Uploader().Flush()
		return countKeyIndexes(t, bucket) >= 2 || b.store.MinPhysOffset() > 0
	})
	waitCond(t, 30*time.Second, "expired key index objects deleted", func() bool {
		return countKeyIndexes(t, bucket) == 0 && b.store.MinPhysOffset() > 0
	})
	_, _, resp := queryKey(t, b, cl, remoting.QueryMessageRequestHeader{Topic: "Old", Key: "k0", MaxNum: 64, EndTimestamp: math.MaxInt64})
	if resp.Code != int32(remoting.QueryNotFound) {
		t.Fatalf("an expired key: %d %s, want QUERY_NOT_FOUND", resp.Code, resp.Remark)
	}
	names, err := os.ReadDir(filepath.Join(dir, "store", "keyindex"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		base, _ := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".kix"), 10, 64)
		if base < b.store.LocalMinPhysOffset() {
			t.Fatalf("key index file %s of a dropped segment is kept", e.Name())
		}
	}
}
