package broker

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/tlsconf"
	"github.com/stratamq/stratamq/infra/tlsconf/tlstest"
	"github.com/stratamq/stratamq/remoting"
)

// TestBrokerHAOverTLS (issue 14 item 3): with TLS enforcing, a sync_master
// streams to a slave over a TLS HA connection (a send is acknowledged only
// once the slave holds it), serves TLS clients on its remoting port, and
// disconnects plain-text peers on both ports.
func TestBrokerHAOverTLS(t *testing.T) {
	t.Parallel()
	f := tlstest.Write(t, t.TempDir())
	srv, err := tlsconf.Server(tlsconf.ServerOptions{CertFile: f.Cert, KeyFile: f.Key})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := tlsconf.Client(tlsconf.ClientOptions{CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	haAddr := haTestAddr(t)
	m, _, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20, AutoCreateTopic: true,
		Role: RoleSyncMaster, HAListen: haAddr, HATimeout: 5 * time.Second},
		Deps{Logger: discardLogger(), TLS: TLS{Server: srv, Mode: remoting.TLSEnforcing, Client: cli}})
	s, _, _ := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", SegmentSize: 8 << 20,
		Role: RoleSlave, HAMaster: haAddr, BrokerID: 1}, Deps{Logger: discardLogger(), TLS: TLS{Client: cli}})
	waitCond(t, 20*time.Second, "the TLS slave to connect", func() bool {
		hm := m.repl.Master() // set by Run
		return hm != nil && len(hm.Slaves()) == 1
	})

	tcl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second, TLS: cli, Logger: discardLogger()})
	defer tcl.Close()
	addr := m.Addr().String()
	for i := range 5 {
		resp := invoke(t, tcl, addr, sendReq("TLSHA", i%2, []byte("replicated "+strconv.Itoa(i)), ""))
		if resp.Code != int32(remoting.Success) {
			t.Fatalf("send %d over TLS: code %d (%s)", i, resp.Code, resp.Remark)
		}
		if got, want := s.Store().MaxPhysOffset(), m.Store().MaxPhysOffset(); got < want {
			t.Fatalf("send %d acknowledged with the slave at %d, the master at %d", i, got, want)
		}
	}

	for _, a := range []string{addr, haAddr} {
		nc, err := net.DialTimeout("tcp", a, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = nc.Write([]byte{0, 0, 0, 20, 0, 0, 0, 4}) // a plain frame's (or hello's) first bytes
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, nc)
		nc.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s kept a plain-text peer connected", a)
		}
	}
	pcl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second, Logger: discardLogger()})
	defer pcl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := pcl.Invoke(ctx, addr, sendReq("TLSHA", 0, []byte("plain"), "")); err == nil {
		t.Fatalf("a plain client was answered %d in enforcing mode", resp.Code)
	}
}
