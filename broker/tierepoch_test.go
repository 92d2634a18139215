package broker

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/upload"
)

// checkBucketLog checks that the bucket's manifest lists the commitlog
// without overlap, from 0 to end without a gap, and that every byte of it
// reads back from the bucket as b's store holds it.
func checkBucketLog(t *testing.T, b *Broker, end int64) {
	t.Helper()
	ctx := context.Background()
	m, _, err := upload.LoadManifest(ctx, b.scoped, upload.ManifestKey(""))
	if err != nil {
		t.Fatalf("read the manifest: %v", err)
	}
	r, err := coldread.New(coldread.Config{Bucket: b.scoped}, coldread.CommitLogObjects(m))
	if err != nil {
		t.Fatalf("the bucket's log is not readable: %v", err)
	}
	defer r.Close()
	run := m.Contiguous(nil)
	if len(run) == 0 || run[0].Base != 0 || run[len(run)-1].End() != end {
		t.Fatalf("the manifest lists %d contiguous objects %v; want [0, %d) without a gap", len(run), objectRanges(run), end)
	}
	for _, o := range run {
		want := make([]byte, o.Length)
		if _, err := b.store.ReadLog(ctx, o.Base, want); err != nil {
			t.Fatalf("read the log at %d: %v", o.Base, err)
		}
		got := make([]byte, o.Length)
		if _, err := r.ReadAt(ctx, o.Base, got); err != nil {
			t.Fatalf("read object %s: %v", o.Key, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("object %s [%d, %d) differs from the log", o.Key, o.Base, o.End())
		}
	}
}

func objectRanges(objs []upload.Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, fmt.Sprintf("%s[%d,%d)", o.Key, o.Base, o.End()))
	}
	return out
}

// TestBrokerPromotedSlaveContinuesTheUploadedLog (issue 29 item 4): the
// master seals by age (STRATAMQ_SEGMENT_MAX_AGE) and uploads; its slave
// never seals by age, so its one segment straddles the end of what the
// master uploaded. The slave takes over: it uploads only what the
// manifest lacks (an object starting at the manifest's end), never
// replaces an object of the old master, and its clean drain completes.
// The bucket's log then reads back from 0 to the end without overlap,
// and a slave on an empty disk boots from the bucket and serves every
// message. On 8aa1300 the new master re-uploaded its segment under the
// old master's key, the manifest listed overlapping objects, the cold
// reader refused them and nothing was ever marked uploaded.
func TestBrokerPromotedSlaveContinuesTheUploadedLog(t *testing.T) {
	t.Parallel()
	mem := tier.NewMem()
	cut := &faultBucket{Bucket: mem}
	acfg, bcfg := failoverConfig(t, RoleAsyncMaster), failoverConfig(t, RoleSlave)
	acfg.SegmentMaxAge, bcfg.SegmentMaxAge = time.Second, time.Hour
	a := runNode(t, acfg, Deps{Bucket: cut})
	b := runNode(t, bcfg, Deps{Bucket: mem})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	var sent []string
	send := func(n *Node) {
		t.Helper()
		body := fmt.Sprintf("ep-%04d|%s", len(sent), strings.Repeat("x", 200))
		if r := invoke(t, cl, n.cfg.Listen, sendReq("EP", 0, []byte(body), "")); r.Code != int32(remoting.Success) {
			t.Fatalf("send %d to %s: %d %s", len(sent), n.role(), r.Code, r.Remark)
		}
		sent = append(sent, body)
	}
	caughtUp := func() bool {
		return b.Broker().store.MaxPhysOffset() == a.Broker().store.MaxPhysOffset()
	}
	waitCond(t, 20*time.Second, "the slave to follow the master", func() bool { return a.Broker().haSlaves() == 1 })
	for range 20 {
		send(a)
	}
	var uploaded int64
	waitCond(t, 30*time.Second, "the master to seal by age and upload", func() bool {
		a.Broker().tier.Uploader().Flush()
		m := a.Broker().tier.Uploader().Manifest()
		if m == nil {
			return false
		}
		for _, o := range m.CommitLog() {
			uploaded = max(uploaded, o.End())
		}
		return uploaded > 0
	})
	for range 20 {
		send(a)
	}
	waitCond(t, 20*time.Second, "the slave to catch up", caughtUp)
	before := a.Broker().tier.Uploader().Manifest().CommitLog()
	cut.down.Store(true) // the master loses the bucket; the slave takes over
	for _, o := range before {
		uploaded = max(uploaded, o.End())
	}
	straddles := false
	for _, s := range b.Broker().store.LocalSegments() {
		straddles = straddles || s.Base < uploaded && uploaded < s.Base+s.Length
	}
	if !straddles {
		t.Fatalf("no local segment of the slave straddles the uploaded end %d: %+v", uploaded, b.Broker().store.LocalSegments())
	}

	waitCond(t, 30*time.Second, "the slave to take over", func() bool { return b.role() == RoleAsyncMaster })
	for range 5 {
		send(b)
	}
	nb := b.Broker()
	if err := nb.store.SealActive(); err != nil {
		t.Fatal(err)
	}
	nb.tier.Uploader().Notify()
	waitCond(t, 30*time.Second, "the new master to upload its whole log", func() bool {
		nb.tier.Uploader().Flush()
		pending, err := nb.tier.Sealed(context.Background())
		return err == nil && len(pending) == 0
	})
	for _, o := range nb.tier.Uploader().Manifest().CommitLog() {
		if o.Base < uploaded && !slices.ContainsFunc(before, func(p upload.Object) bool { return p.Key == o.Key && p.Size == o.Size }) {
			t.Fatalf("the new master listed %s [%d, %d) below the old master's uploaded end %d; the old master listed %v",
				o.Key, o.Base, o.End(), uploaded, objectRanges(before))
		}
	}
	checkBucketLog(t, nb, nb.store.MaxPhysOffset())

	// A slave on an empty disk boots from the bucket and serves it all.
	c := runNode(t, failoverConfig(t, RoleSlave), Deps{Bucket: mem})
	waitCond(t, 30*time.Second, "the new slave to catch up", func() bool {
		s := c.Broker()
		return s != nil && c.role() == RoleSlave && s.store.MaxPhysOffset() == nb.store.MaxPhysOffset()
	})
	got, bad := readAll(t, c.Broker(), cl, "EP", 0, len(sent))
	if bad != nil {
		t.Fatalf("pull from the slave booted from the bucket: %d %s", bad.Code, bad.Remark)
	}
	for i, body := range got {
		if string(body) != sent[i] {
			t.Fatalf("offset %d: %.12q, want %.12q", i, body, sent[i])
		}
	}
	if len(got) != len(sent) {
		t.Fatalf("read %d messages, sent %d", len(got), len(sent))
	}
	cut.down.Store(false)
	waitCond(t, 30*time.Second, "the old master to rejoin as a slave", func() bool { return a.role() == RoleSlave })
}

// segmentKeyAt is the key of broker-a's segment object at base ("" if
// none): commitlog/<20-digit base>.seg, or with the lease epoch that
// wrote it, commitlog/<base>.<epoch>.seg.
func segmentKeyAt(t *testing.T, bucket tier.Bucket, base int64) string {
	t.Helper()
	var key string
	err := bucket.List(context.Background(), fmt.Sprintf("DefaultCluster/broker-a/commitlog/%020d.", base), func(k string, _ int64) error {
		if strings.HasSuffix(k, ".seg") {
			key = k
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return key
}
