package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/tier/bucketurl"
)

// cutProxy forwards loopback TCP connections to upstream until cut: then
// it drops every open connection and every new one at once (a network
// partition between its clients and upstream), until healed.
type cutProxy struct {
	ln    net.Listener
	down  atomic.Bool
	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startCutProxy(t *testing.T, upstream string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.down.Load() {
				c.Close()
				continue
			}
			p.wg.Go(func() { p.serve(c, upstream) })
		}
	})
	t.Cleanup(func() { ln.Close(); p.cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down.Load() {
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *cutProxy) serve(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	if !p.track(c, u) {
		return
	}
	done := make(chan struct{})
	go func() { io.Copy(c, u); c.Close(); close(done) }()
	io.Copy(u, c)
	u.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// cut partitions: every connection through the proxy is closed, and new
// ones are closed at accept, until heal.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down.Store(true)
	for c := range p.conns {
		c.Close()
	}
}

func (p *cutProxy) heal() { p.down.Store(false) }

// storeHostOfMsgID is the "ip:port" an offset msg id names: the broker
// that stored (and acknowledged) the message.
func storeHostOfMsgID(t *testing.T, id string) string {
	t.Helper()
	b, err := hex.DecodeString(id)
	if err != nil || len(b) != 16 {
		t.Fatalf("offset msg id %q", id)
	}
	return fmt.Sprintf("%d.%d.%d.%d:%d", b[0], b[1], b[2], b[3], binary.BigEndian.Uint32(b[4:8]))
}

// TestE2EPartitionedMasterIsFenced (issue 10, "Fencing", with the real
// binaries): the sync_master reaches versitygw only through a proxy the
// test cuts — a partition between the old master and the bucket, while
// its clients and its slave still reach it. Under load from the official
// client it stops acknowledging, the slave takes the lease over and is
// routed as master; every SEND_OK the old master gave arrived before the
// new epoch's lease was acquired. Healed, the old master rejoins as the
// new master's slave, and every SEND_OK is read back at its offset.
func TestE2EPartitionedMasterIsFenced(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	var proxy *cutProxy
	p := startFOPairWith(t, map[string]string{
		"STRATAMQ_LEASE_TTL": "2s", "STRATAMQ_CHECKPOINT_INTERVAL": "300ms", "STRATAMQ_HA_ACK_TIMEOUT": "2s",
	}, func(i int, env map[string]string) {
		if i != 0 {
			return
		}
		u, err := url.Parse(env["STRATAMQ_BUCKET"])
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		ep, err := url.Parse(q.Get("endpoint"))
		if err != nil {
			t.Fatal(err)
		}
		proxy = startCutProxy(t, ep.Host)
		q.Set("endpoint", "http://"+proxy.ln.Addr().String())
		u.RawQuery = q.Encode()
		env["STRATAMQ_BUCKET"] = u.String()
	})
	a, b := p.nodes[0], p.nodes[1]
	topic := uniqueName(t, "PF")
	const queues = 4
	createTopicOn(t, p.ns, a.addr(), topic, queues)
	p.healthy(topic, a, b, 60*time.Second)
	l := startFOLoad(newClientProducer(t, p.ns), topic, 4, 20000, 90*time.Second)
	defer l.end()
	p.waitFor(60*time.Second, "300 acknowledged sends to the master", func() bool { return l.count() >= 300 })

	proxy.cut()
	p.waitFor(30*time.Second, "the slave routed as master", func() bool { return masterOf(p.ns, topic) == b.addr() })

	// The new epoch's lease, read from the bucket.
	// The credentials go to the bucket directly, not through the
	// environment: t.Setenv would keep the test from running in parallel.
	bucket, err := bucketurl.Open(context.Background(), b.env["STRATAMQ_BUCKET"],
		bucketurl.Options{AccessKey: b.env["AWS_ACCESS_KEY_ID"], SecretKey: b.env["AWS_SECRET_ACCESS_KEY"]})
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	key := "DefaultCluster/broker-a/" + offsets.LeaseKey
	attrs, err := bucket.Stat(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, attrs.Size)
	if err := bucket.ReadAt(context.Background(), key, raw, 0); err != nil {
		t.Fatal(err)
	}
	var rec offsets.LeaseRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Instance == "" || rec.Epoch < 2 {
		t.Fatalf("lease after the takeover: %+v", rec)
	}

	proxy.heal()
	p.healthy(topic, b, a, 60*time.Second)
	p.waitFor(60*time.Second, "acknowledged sends to the new master with the old one as its slave", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for id, a := range l.acks {
			if a.sent.After(rec.AcquiredAt) && storeHostOfMsgID(t, l.msgID[id]) == b.addr() {
				return true
			}
		}
		return false
	})
	l.end()
	fromOld := 0
	for id, k := range l.acks {
		if storeHostOfMsgID(t, l.msgID[id]) != a.addr() {
			continue
		}
		fromOld++
		if !k.at.Before(rec.AcquiredAt) {
			t.Fatalf("the partitioned old master acknowledged message %s at %v, after the new epoch's lease was acquired at %v",
				id, k.at, rec.AcquiredAt)
		}
	}
	if fromOld < 300 {
		t.Fatalf("%d acknowledgements from the old master; want the 300 before the partition", fromOld)
	}
	l.verify(p, masterOf(p.ns, topic), queues)
	t.Logf("%d sends acknowledged (%d by the old master, all before the new epoch began); not OK: %s", len(l.acks), fromOld, l.notOKString())
	for _, n := range []*foNode{a, b} { // the slave first: no takeover while stopping
		n.proc.stopClean(t, 60*time.Second)
	}
}
