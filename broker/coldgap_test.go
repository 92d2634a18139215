package broker

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// TestBrokerRestoredFromBucketWithGapReportsIt: the old master's segment
// 0 never reaches the manifest (its PUT keeps failing) while segment 1 is
// listed: the bucket's log has a gap at its start. The lagging slave that
// takes over restores from that bucket. A pull of offset 0 must say the
// offset is not available and send the consumer to the first offset the
// bucket holds (PULL_NOT_FOUND, nextBeginOffset), never answer with a
// message of segment 1; from there on every message comes back at its
// own queue offset, byte for byte what was sent.
func TestBrokerRestoredFromBucketWithGapReportsIt(t *testing.T) {
	mem := tier.NewMem()
	var all atomic.Bool
	cut := &faultBucket{Bucket: mem, match: func(key string) bool {
		return all.Load() || strings.HasSuffix(key, "commitlog/00000000000000000000.seg")
	}}
	cut.down.Store(true) // segment 0's object only, until all is set
	acfg, bcfg := failoverConfig(t, RoleAsyncMaster), failoverConfig(t, RoleSlave)
	a := runNode(t, acfg, Deps{Bucket: cut})
	b := runNode(t, bcfg, Deps{Bucket: mem})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	var sent [][]byte
	send := func(n *Node, body []byte) {
		t.Helper()
		r := invoke(t, cl, n.cfg.Listen, sendReq("GAP", 0, body, ""))
		if r.Code != int32(remoting.Success) {
			t.Fatalf("send to %s: %d %s", n.role(), r.Code, r.Remark)
		}
		sent = append(sent, body)
	}
	for i := range 5 {
		send(a, []byte(fmt.Sprintf("before-%d", i)))
	}
	waitCond(t, 20*time.Second, "the slave to catch up", func() bool {
		return b.Broker().store.MaxPhysOffset() == a.Broker().store.MaxPhysOffset()
	})
	b.Broker().hastat.slave.Load().Close() // the slave falls behind
	for i := range 40 {                    // 2.5 MiB: 1 MiB segments seal and upload
		send(a, append([]byte(fmt.Sprintf("lagged-%02d|", i)), bytes.Repeat([]byte{'x'}, 64<<10)...))
	}
	am := a.Broker()
	var seg1 int64
	waitCond(t, 30*time.Second, "segment 1 listed without segment 0", func() bool {
		am.tier.uploader.Flush()
		m := am.tier.uploader.Manifest()
		if m == nil {
			return false
		}
		cl := m.CommitLog()
		if len(cl) == 0 || cl[0].Base == 0 {
			return false
		}
		seg1 = cl[0].Base
		return cl[len(cl)-1].End() > b.Broker().store.MaxPhysOffset()
	})
	// The first queue offset of GAP/0 past the gap, as the old master has it.
	var first int64 = -1
	for i := int64(0); i < int64(len(sent)); i++ {
		if p, _, _, ok, err := am.store.QueueEntry("GAP", 0, i); err == nil && ok && p >= seg1 {
			first = i
			break
		}
	}
	if first <= 0 {
		t.Fatalf("no message of GAP/0 past segment 0 (first %d)", first)
	}
	all.Store(true)
	waitCond(t, 30*time.Second, "the lagging slave to take over", func() bool { return b.role() == RoleAsyncMaster })
	nb := b.Broker()
	for _, off := range []int64{0, first - 1} {
		r := invoke(t, cl, nb.Addr().String(), pullReq("reader", "GAP", 0, off, 0, "*"))
		if r.Code == int32(remoting.Success) {
			qo := int64(binary.BigEndian.Uint64(r.Body[20:]))
			t.Fatalf("pull of offset %d, in segment 0 the bucket lacks: a message at queue offset %d", off, qo)
		}
		if r.Code != int32(remoting.PullNotFound) || r.ExtFields["nextBeginOffset"] != fmt.Sprint(first) {
			t.Fatalf("pull of offset %d: %d %s next %s, want PULL_NOT_FOUND next %d", off, r.Code, r.Remark, r.ExtFields["nextBeginOffset"], first)
		}
	}
	// From the first offset past the gap: every message at its own offset.
	n := 0
	for off := first; ; {
		r := invoke(t, cl, nb.Addr().String(), pullReq("reader", "GAP", 0, off, 0, "*"))
		if r.Code != int32(remoting.Success) {
			break
		}
		i := off
		for body := r.Body; len(body) > 0; i++ {
			size := int(binary.BigEndian.Uint32(body))
			if qo := int64(binary.BigEndian.Uint64(body[20:])); qo != i {
				t.Fatalf("pull from %d: message at queue offset %d in place of %d", off, qo, i)
			}
			bl := int(binary.BigEndian.Uint32(body[84:]))
			if i >= int64(len(sent)) || !bytes.Equal(body[88:88+bl], sent[i]) {
				t.Fatalf("offset %d read back differs from what was sent", i)
			}
			body = body[size:]
			n++
		}
		fmt.Sscan(r.ExtFields["nextBeginOffset"], &off)
	}
	if n == 0 {
		t.Fatal("nothing readable past the gap")
	}
	all.Store(false)
	cut.down.Store(false)
	waitCond(t, 30*time.Second, "the old master to rejoin as a slave", func() bool { return a.role() == RoleSlave })
}
