package broker

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// A bucket-durable broker whose whole log is in listed segments (the WAL
// holds nothing past them) loses its disk: the broker on the empty disk
// serves every message and takes bucket-durable sends again, at offsets
// past the restored ones.
func TestBucketDurableEmptyDiskAfterSegmentsListed(t *testing.T) {
	bucket := tier.NewMem()
	cfg := walConfig(t)
	cfg.SegmentMaxAge = 200 * time.Millisecond
	cfg.TierCommitDelay = 10 * time.Millisecond
	first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	var bodies [][]byte
	for i := range 20 {
		body := bytes.Repeat([]byte(fmt.Sprintf("%04d|", i)), 50)
		if r := invoke(t, cl, first.Addr().String(), sendReq("Sl", 0, body, "")); r.Code != int32(remoting.Success) {
			t.Fatalf("send %d: %d %s", i, r.Code, r.Remark)
		}
		bodies = append(bodies, body)
	}
	end := first.store.MaxPhysOffset()
	waitCond(t, 30*time.Second, "the manifest to list the whole log", func() bool {
		return uploadedEnd(nil, first.tier) >= end
	})
	first.dur.StopWriting()
	expires := first.dur.Lease().ExpiresAt()
	waitCond(t, 20*time.Second, "the dead broker's lease expired", func() bool { return time.Now().After(expires.Add(100 * time.Millisecond)) })

	cfg2 := cfg
	cfg2.DataDir = t.TempDir()
	second, cl2, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: bucket})
	readBack(t, second, cl2, "Sl", bodies)
	r := invoke(t, cl2, second.Addr().String(), sendReq("Sl", 0, []byte("after"), ""))
	if r.Code != int32(remoting.Success) {
		t.Fatalf("a bucket-durable send after the restore: %d %s", r.Code, r.Remark)
	}
	if got, _ := strconv.Atoi(r.ExtFields["queueOffset"]); got < len(bodies) {
		t.Fatalf("the send after the restore got queue offset %d, below the %d restored", got, len(bodies))
	}
}
