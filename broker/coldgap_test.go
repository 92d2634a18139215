package broker

import (
	"bytes"
	"context"
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
//
// The slave's copy holds the first messages, which the bucket lacks: it is
// set aside only because STRATAMQ_ACCEPT_LOSS says so (without it the
// takeover refuses: TestBrokerPromotedSlaveKeepsWhatTheBucketLacks).
func TestBrokerRestoredFromBucketWithGapReportsIt(t *testing.T) {
	t.Parallel()
	bcfg := failoverConfig(t, RoleSlave)
	bcfg.AcceptLoss = true
	var b *Node
	g := gapTakeover(t, bcfg, func(cfg Config, deps Deps) *Node { b = runNode(t, cfg, deps); return b })
	first, sent, all := g.first, g.sent, g.all
	a, cut, cl := g.a, g.cut, g.cl
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

// TestBrokerPromotedSlaveKeepsWhatTheBucketLacks: the same takeover
// without STRATAMQ_ACCEPT_LOSS. The lagging slave's copy holds the first
// messages, acknowledged by the old master, that no bucket object holds:
// it refuses to set that copy aside (and to start as master), naming the
// range, rather than lose them.
func TestBrokerPromotedSlaveKeepsWhatTheBucketLacks(t *testing.T) {
	t.Parallel()
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The old master's shutdown reports its un-uploaded segment 0 (no
	// broker took over): its error is expected here.
	oldMaster := func(t *testing.T, cfg Config, deps Deps) *Node {
		deps.Logger = discardLogger()
		n := NewNode(cfg, deps, nil)
		stopped := make(chan struct{})
		go func() { _ = n.Run(ctx); close(stopped) }()
		t.Cleanup(func() { cancel(); <-stopped })
		waitCond(t, 30*time.Second, "the master's first broker", func() bool { return n.Broker() != nil })
		return n
	}
	g := gapTakeoverWith(t, failoverConfig(t, RoleSlave), func(cfg Config, deps Deps) *Node {
		deps.Logger = discardLogger()
		n := NewNode(cfg, deps, nil)
		go func() { done <- n.Run(ctx) }()
		waitCond(t, 30*time.Second, "the slave's first broker", func() bool { return n.Broker() != nil })
		return n
	}, oldMaster)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "offsets no bucket object holds") {
			t.Fatalf("the takeover ended with %v, want a refusal naming what the bucket lacks", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the lagging slave neither took over nor refused")
	}
	g.all.Store(false)
	g.cut.down.Store(false)
}

// gapSetup is a master (listing out of order, as older binaries did)
// whose segment 0 never reaches the bucket while segment 1 is listed, and a slave (started by start) that holds the first
// messages and then lags; the master's bucket then fails altogether, so
// the slave takes over.
type gapSetup struct {
	a     *Node
	cut   *faultBucket
	all   *atomic.Bool
	cl    *remoting.Client
	sent  [][]byte
	first int64 // GAP/0's first queue offset past segment 0
}

func gapTakeover(t *testing.T, bcfg Config, start func(Config, Deps) *Node) *gapSetup {
	return gapTakeoverWith(t, bcfg, start, runNode)
}

// gapTakeoverWith is gapTakeover with the old master started by startA.
func gapTakeoverWith(t *testing.T, bcfg Config, start func(Config, Deps) *Node, startA func(*testing.T, Config, Deps) *Node) *gapSetup {
	t.Helper()
	mem := tier.NewMem()
	all := new(atomic.Bool)
	cut := &faultBucket{Bucket: mem, match: func(key string) bool {
		return all.Load() || strings.Contains(key, "commitlog/00000000000000000000.") && strings.HasSuffix(key, ".seg")
	}}
	cut.down.Store(true) // segment 0's object only, until all is set
	acfg := failoverConfig(t, RoleAsyncMaster)
	// The old master lists out of order, as binaries before ordered
	// listing did: this one's never lists past a missing segment, and the
	// hole these tests read comes from a manifest such a binary wrote.
	a := startA(t, acfg, Deps{Bucket: cut, listOutOfOrder: true})
	b := start(bcfg, Deps{Bucket: mem})
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	t.Cleanup(func() { cl.Close() })
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
	b.Broker().repl.Slave().Close() // the slave falls behind
	for i := range 40 {             // 2.5 MiB: 1 MiB segments seal and upload
		send(a, append([]byte(fmt.Sprintf("lagged-%02d|", i)), bytes.Repeat([]byte{'x'}, 64<<10)...))
	}
	am := a.Broker()
	var seg1 int64
	waitCond(t, 30*time.Second, "segment 1 listed without segment 0", func() bool {
		am.tier.Uploader().Flush()
		m := am.tier.Uploader().Manifest()
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
	return &gapSetup{a: a, cut: cut, all: all, cl: cl, sent: sent, first: first}
}
