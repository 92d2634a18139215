package broker

import (
	"context"
	"hash/crc32"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/namesrv"
	"github.com/stratamq/stratamq/remoting"
)

// holdProxy forwards TCP between its clients and target until hold is set;
// then it stops forwarding in both directions and keeps every connection
// open, as a machine that vanished from the network (no FIN, no RST).
type holdProxy struct {
	ln   net.Listener
	hold atomic.Bool
	done chan struct{} // closed at cleanup
	wg   sync.WaitGroup
	mu   sync.Mutex
	conn []net.Conn
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conn = append(p.conn, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); p.pipe(u, c) }()
			go func() { defer p.wg.Done(); p.pipe(c, u) }()
		}
	}()
	t.Cleanup(func() {
		close(p.done)
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conn {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// pipe copies src to dst; once held it reads and drops nothing more: it
// stops reading, so the sender's bytes sit in the socket buffers.
func (p *holdProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for !p.hold.Load() {
		_ = src.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := src.Read(buf)
		if n > 0 && !p.hold.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil && !isTimeout(err) {
			return // closed (io.EOF and others)
		}
	}
	<-p.done // held: the conns stay open until the test ends
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestBrokerVanishedMasterFreesItsNameSoon: a master registers with a
// heartbeat timeout of three register intervals, so when its machine
// vanishes without closing its connection (a proxy stops forwarding),
// the name server refuses another address under its name and id only
// until then, and the slave that takes over is routed soon after. Before,
// the registration carried no timeout and the name server held the
// vanished master's name for its 120 s default.
func TestBrokerVanishedMasterFreesItsNameSoon(t *testing.T) {
	t.Parallel()
	ns := namesrv.New(namesrv.Config{Logger: discardLogger(), ScanInterval: 50 * time.Millisecond})
	srv := remoting.NewServer(remoting.ServerConfig{Addr: "127.0.0.1:0", OnClose: ns.OnConnClose, Logger: discardLogger()}, ns)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = srv.Serve(ctx) }()
	go func() { defer wg.Done(); _ = ns.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	nsAddr := srv.Addr().String()
	proxy := startHoldProxy(t, nsAddr)

	m, mcl, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Namesrv: proxy.ln.Addr().String(),
		AutoCreateTopic: true, RegisterInterval: 300 * time.Millisecond}, Deps{Logger: discardLogger()})
	if r := invoke(t, mcl, m.Addr().String(), createTopicReq("Vanish", 1)); r.Code != int32(remoting.Success) {
		t.Fatalf("create topic: %d %s", r.Code, r.Remark)
	}
	cl := remoting.NewClient(remoting.ClientConfig{Logger: discardLogger()})
	defer cl.Close()
	master := func() string {
		h := remoting.GetRouteInfoRequestHeader{Topic: "Vanish"}
		resp := invoke(t, cl, nsAddr, remoting.NewRequest(remoting.GetRouteinfoByTopic, h.Encode(), nil))
		if resp.Code != 0 {
			return ""
		}
		r, err := remoting.DecodeTopicRouteData(resp.Body)
		if err != nil || len(r.BrokerDatas) != 1 {
			return ""
		}
		return r.BrokerDatas[0].BrokerAddrs[0]
	}
	waitCond(t, 10*time.Second, "the master routed", func() bool { return master() == m.Addr().String() })

	// The promoted slave's registration: same name and id, another address.
	slave := func() *remoting.Command {
		body, err := (&remoting.RegisterBrokerBody{TopicConfigSerializeWrapper: m.topics.Wrapper()}).Encode()
		if err != nil {
			t.Fatal(err)
		}
		h := remoting.RegisterBrokerRequestHeader{BrokerName: m.cfg.BrokerName, BrokerAddr: "127.0.0.9:10911",
			ClusterName: m.cfg.Cluster, BrokerID: 0, BodyCrc32: int32(crc32.ChecksumIEEE(body) & 0x7FFFFFFF)}
		return invoke(t, cl, nsAddr, remoting.NewRequest(remoting.RegisterBroker, h.Encode(), body))
	}
	proxy.hold.Store(true)
	held := time.Now()
	if r := slave(); r.Code != int32(remoting.NoPermission) {
		t.Fatalf("another address under the live master's name: %d %s, want NO_PERMISSION", r.Code, r.Remark)
	}
	waitCond(t, 10*time.Second, "the vanished master's name free for its slave", func() bool { return slave().Code == int32(remoting.Success) })
	t.Logf("the slave was routed %v after the master vanished (register interval 300ms)", time.Since(held).Round(10*time.Millisecond))
	if got := master(); got != "127.0.0.9:10911" {
		t.Fatalf("route after the takeover: %q", got)
	}
}
