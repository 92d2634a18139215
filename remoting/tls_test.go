package remoting

import (
	"bytes"
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/tlsconf"
	"github.com/stratamq/stratamq/infra/tlsconf/tlstest"
)

// tlsPair is a server config and a client config that trusts it, from
// throwaway certificates.
func tlsPair(t *testing.T, mutual bool) (server, client, clientNoCert *tls.Config) {
	t.Helper()
	f := tlstest.Write(t, t.TempDir())
	so := tlsconf.ServerOptions{CertFile: f.Cert, KeyFile: f.Key}
	if mutual {
		so.ClientCAFile = f.CA
	}
	server, err := tlsconf.Server(so)
	if err != nil {
		t.Fatal(err)
	}
	client, err = tlsconf.Client(tlsconf.ClientOptions{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	clientNoCert, err = tlsconf.Client(tlsconf.ClientOptions{CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	return server, client, clientNoCert
}

// tlsRoundTrip sends one request with a body through a new client (TLS
// config tc, nil for plain) and reports whether the echo came back whole,
// and whether the conn was TLS.
func tlsRoundTrip(t *testing.T, addr string, tc *tls.Config, body []byte) (ok, wasTLS bool, err error) {
	t.Helper()
	cl := NewClient(ClientConfig{Logger: quiet, TLS: tc, DialTimeout: 3 * time.Second})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := cl.Conn(ctx, addr)
	if err != nil {
		return false, false, err
	}
	resp, err := c.Invoke(ctx, NewRequest(GetRouteinfoByTopic, map[string]string{"topic": "t"}, body))
	if err != nil {
		return false, false, err
	}
	st, isTLS := c.TLSState()
	if isTLS && st.Version < tls.VersionTLS12 {
		t.Errorf("negotiated TLS version %x, want 1.2 or later", st.Version)
	}
	return resp.Code == int32(Success) && bytes.Equal(resp.Body, body) && resp.ExtFields["topic"] == "t", isTLS, nil
}

// TestRemotingTLSModes: enforcing serves TLS clients and disconnects a
// plain one; permissive serves both on one port; disabled is plain only.
// Bodies of 1 MiB go through the TLS writer's coalescing path.
func TestRemotingTLSModes(t *testing.T) {
	checkLeaks(t)
	srvCfg, cliCfg, _ := tlsPair(t, false)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	for _, tc := range []struct {
		mode           TLSMode
		tlsOK, plainOK bool
		_, _           bool
	}{
		{TLSEnforcing, true, false, false, false},
		{TLSPermissive, true, true, true, false},
		{TLSDisabled, false, true, false, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			s := startServer(t, ServerConfig{TLS: srvCfg, TLSMode: tc.mode}, HandlerFunc(echo))
			addr := s.Addr().String()
			for _, body := range [][]byte{[]byte("small"), big} {
				ok, wasTLS, err := tlsRoundTrip(t, addr, cliCfg, body)
				if ok != tc.tlsOK || ok && !wasTLS {
					t.Fatalf("TLS client, %d-byte body: ok=%v tls=%v err=%v; want ok=%v", len(body), ok, wasTLS, err, tc.tlsOK)
				}
				ok, wasTLS, err = tlsRoundTrip(t, addr, nil, body)
				if ok != tc.plainOK || wasTLS {
					t.Fatalf("plain client, %d-byte body: ok=%v tls=%v err=%v; want ok=%v", len(body), ok, wasTLS, err, tc.plainOK)
				}
			}
		})
	}
}

// TestRemotingTLSMutual: with a client CA, a client without a certificate
// is refused and one with a certificate the CA signed is served.
func TestRemotingTLSMutual(t *testing.T) {
	checkLeaks(t)
	srvCfg, cliCfg, noCert := tlsPair(t, true)
	for _, mode := range []TLSMode{TLSEnforcing, TLSPermissive} {
		s := startServer(t, ServerConfig{TLS: srvCfg, TLSMode: mode}, HandlerFunc(echo))
		addr := s.Addr().String()
		if ok, _, err := tlsRoundTrip(t, addr, cliCfg, []byte("x")); !ok {
			t.Fatalf("%s: client with a certificate: %v", mode, err)
		}
		if ok, _, err := tlsRoundTrip(t, addr, noCert, []byte("x")); ok || err == nil {
			t.Fatalf("%s: client without a certificate was served (ok=%v, err=%v)", mode, ok, err)
		}
	}
}

// TestRemotingTLSSilentClient: a client that connects to a TLS port and
// sends nothing is disconnected after the handshake timeout, not the
// idle timeout; one that sends half a ClientHello too.
func TestRemotingTLSSilentClient(t *testing.T) {
	checkLeaks(t)
	srvCfg, _, _ := tlsPair(t, false)
	for _, mode := range []TLSMode{TLSEnforcing, TLSPermissive} {
		s := startServer(t, ServerConfig{TLS: srvCfg, TLSMode: mode, TLSHandshakeTimeout: 300 * time.Millisecond},
			HandlerFunc(echo))
		for _, prefix := range [][]byte{nil, {0x16, 0x03, 0x01}} {
			nc := dialRaw(t, s)
			if len(prefix) > 0 {
				if _, err := nc.Write(prefix); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			expectClosed(t, nc)
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("%s: silent client closed after %s", mode, d)
			}
		}
		waitConns(t, s, 0)
	}
}

// waitConns waits until s holds n conns.
func waitConns(t *testing.T, s *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Conns != n {
		if time.Now().After(deadline) {
			t.Fatalf("server holds %d conns, want %d", s.Stats().Conns, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRemotingParseTLSMode(t *testing.T) {
	for in, want := range map[string]TLSMode{"": TLSDisabled, "disabled": TLSDisabled, "permissive": TLSPermissive, "enforcing": TLSEnforcing} {
		if got, err := ParseTLSMode(in); err != nil || got != want {
			t.Errorf("ParseTLSMode(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseTLSMode("strict"); err == nil {
		t.Error("ParseTLSMode(strict) succeeded")
	}
}

// TestRemotingTLSIdleBufferRelease: a TLS conn that idles past the read
// buffer's release (a read deadline that fires between frames) keeps
// working: TLS read timeouts are not fatal to the conn.
func TestRemotingTLSIdleBufferRelease(t *testing.T) {
	checkLeaks(t)
	srvCfg, cliCfg, _ := tlsPair(t, false)
	s := startServer(t, ServerConfig{TLS: srvCfg, TLSMode: TLSPermissive, bufRelease: 20 * time.Millisecond}, HandlerFunc(echo))
	cl := NewClient(ClientConfig{Logger: quiet, TLS: cliCfg})
	defer cl.Close()
	ctx := ctxT(t)
	c, err := cl.Conn(ctx, s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		resp, err := c.Invoke(ctx, NewRequest(GetRouteinfoByTopic, nil, []byte{byte(i)}))
		if err != nil || resp.Code != int32(Success) || !bytes.Equal(resp.Body, []byte{byte(i)}) {
			t.Fatalf("request %d after idling: %v %v", i, resp, err)
		}
		time.Sleep(100 * time.Millisecond) // idle past bufRelease: the server's read deadline fires
	}
	if _, ok := c.TLSState(); !ok {
		t.Fatal("the conn is not TLS")
	}
}
