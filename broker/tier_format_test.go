package broker

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/segfile"
	"github.com/stratamq/stratamq/tier/upload"
)

// bucketKinds counts broker-a's objects under commitlog/ by suffix, and
// the segment objects that hold index sections.
func bucketKinds(t *testing.T, bucket tier.Bucket) (byExt map[string]int, withSections int) {
	t.Helper()
	ctx := context.Background()
	byExt = map[string]int{}
	err := bucket.List(ctx, "DefaultCluster/broker-a/commitlog/", func(key string, size int64) error {
		byExt[key[strings.LastIndexByte(key, '.'):]]++
		if strings.HasSuffix(key, ".seg") {
			f, err := segfile.ReadFooter(ctx, bucket.ReadAt, key, size)
			if err != nil {
				return err
			}
			if len(f.Sections) > 0 {
				withSections++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return byExt, withSections
}

// TestBrokerReadsOldFormatBucket: a bucket written before segments held
// their indexes (each segment's queue and key index an object of its own,
// format version 1 manifest) is read by today's broker: restored on an
// empty disk, its queues pulled from offset 0 and its keys queried from
// the bucket alone; the broker then adds segments in the new format
// beside the old ones, and both are read.
func TestBrokerReadsOldFormatBucket(t *testing.T) {
	bucket := tier.NewMem()
	indexObjectsForTest.Store(true)
	old, cl, stop := startTieredBroker(t, t.TempDir(), bucket)
	indexObjectsForTest.Store(false)
	const n = 400
	ts := produceKeyed(t, old, cl, "Keyed", n)
	stop() // drains: every segment and its index objects
	kinds, withSections := bucketKinds(t, bucket)
	if kinds[".seg"] < 3 || kinds[".idx"] != kinds[".seg"] || kinds[".kix"] != kinds[".seg"] || withSections != 0 {
		t.Fatalf("the old-format bucket holds %v, %d segment objects with sections; want each segment with its .idx and .kix objects", kinds, withSections)
	}

	// A new machine, today's format: an empty data dir, the same bucket.
	b, cl2, stop2 := startTieredBroker(t, t.TempDir(), bucket)
	if b.store.LocalMinPhysOffset() == 0 {
		t.Fatal("the broker's log starts at 0: not restored from the bucket")
	}
	resp := invoke(t, cl2, b.Addr().String(), pullNow("Keyed", 0, 0))
	if resp.Code != int32(remoting.Success) || len(resp.Body) == 0 {
		t.Fatalf("pull of Keyed from offset 0 (the old queue index objects): %d %s", resp.Code, resp.Remark)
	}
	checkKeyQueries(t, b, cl2, "Keyed", n, ts)

	// New segments go in the new format, beside the old objects.
	produceKeyed(t, b, cl2, "Later", 200)
	stop2()
	kinds2, withSections2 := bucketKinds(t, bucket)
	if kinds2[".idx"] != kinds[".idx"] || kinds2[".kix"] != kinds[".kix"] || withSections2 < 2 || kinds2[".seg"] != kinds[".seg"]+withSections2 {
		t.Fatalf("after the new broker: %v, %d with sections (before %v)", kinds2, withSections2, kinds)
	}
	m, _, err := upload.LoadManifest(context.Background(), bucket, "DefaultCluster/broker-a/"+upload.ManifestKey(""))
	if err != nil {
		t.Fatal(err)
	}
	if q, k := len(m.Indexes(upload.KindQueueIndex)), len(m.Indexes(upload.KindKeyIndex)); q != len(m.CommitLog()) || k != q {
		t.Fatalf("%d queue and %d key indexes for %d segments", q, k, len(m.CommitLog()))
	}
	b3, cl3, _ := startTieredBroker(t, t.TempDir(), bucket)
	checkKeyQueries(t, b3, cl3, "Keyed", n, ts)
	_, _, r := queryKey(t, b3, cl3, remoting.QueryMessageRequestHeader{Topic: "Later", Key: "k0", MaxNum: 64, EndTimestamp: math.MaxInt64})
	if r.Code != int32(remoting.Success) {
		t.Fatalf("a key of a new-format segment: %d %s", r.Code, r.Remark)
	}
}
