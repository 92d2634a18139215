package broker

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
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
	t.Parallel()
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

// TestBucketDurableEmptyDiskAfterAMissingUpload: the upload of the first
// commitlog segment keeps failing while later segments are put. A
// bucket-durable broker then loses its disk. The manifest never lists a
// segment above the missing one, so the broker on the empty disk starts
// where the listed log ends and takes every acknowledged message past it
// from the WAL objects. Run as older binaries listed (out of order) the
// same bucket lists the later segments past a hole, the restore starts at
// their end, and the messages of the missing segment are gone: the test
// tells the two apart.
func TestBucketDurableEmptyDiskAfterAMissingUpload(t *testing.T) {
	t.Parallel()
	for _, outOfOrder := range []bool{false, true} {
		t.Run(fmt.Sprintf("outOfOrder=%v", outOfOrder), func(t *testing.T) {
			mem := tier.NewMem()
			bucket := &faultBucket{Bucket: mem, match: func(key string) bool {
				return strings.Contains(key, "/commitlog/00000000000000000000.") && strings.HasSuffix(key, ".seg")
			}}
			bucket.down.Store(true)
			cfg := walConfig(t)
			cfg.TierCommitDelay = 10 * time.Millisecond
			first, cl, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket, listOutOfOrder: outOfOrder})
			var bodies [][]byte
			for i := range 40 { // 2.5 MiB: the 1 MiB segments 0 and 1 seal
				body := append([]byte(fmt.Sprintf("%04d|", i)), bytes.Repeat([]byte{'m'}, 64<<10)...)
				if r := invoke(t, cl, first.Addr().String(), sendReq("Gp", 0, body, "")); r.Code != int32(remoting.Success) {
					t.Fatalf("send %d: %d %s", i, r.Code, r.Remark)
				}
				bodies = append(bodies, body)
			}
			u := first.tier.Uploader()
			if outOfOrder {
				waitCond(t, 30*time.Second, "segment 1 listed past the missing segment 0", func() bool {
					m := u.Manifest()
					return m != nil && len(m.CommitLog()) > 0
				})
			} else {
				waitCond(t, 30*time.Second, "segment 1 put and held back", func() bool { return u.Stats().Held > 0 })
				if m := u.Manifest(); m != nil && len(m.CommitLog()) > 0 {
					t.Fatalf("the manifest lists %+v while segment 0 is missing", m.CommitLog())
				}
			}
			first.dur.StopWriting()
			expires := first.dur.Lease().ExpiresAt()
			waitCond(t, 20*time.Second, "the dead broker's lease expired", func() bool { return time.Now().After(expires.Add(100 * time.Millisecond)) })

			bucket.down.Store(false)
			cfg2 := cfg
			cfg2.DataDir = t.TempDir()
			second, cl2, _ := runBroker(t, cfg2, Deps{Logger: discardLogger(), Bucket: bucket})
			got, bad := readAll(t, second, cl2, "Gp", 0, len(bodies))
			lost := 0
			for i, body := range bodies {
				if i >= len(got) || !bytes.Equal(got[i], body) {
					lost++
				}
			}
			switch {
			case !outOfOrder && (bad != nil || lost > 0):
				t.Fatalf("%d of %d acknowledged messages not read back at their offsets (last answer %v)", lost, len(bodies), bad)
			case outOfOrder && lost == 0:
				t.Fatal("listed out of order, every message still came back: the test cannot tell the two apart")
			}
		})
	}
}
