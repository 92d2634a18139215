package tlsconf

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"
)

// Handshake runs a client TLS handshake on nc within timeout, closing nc
// when it fails. cfg's ServerName defaults to addr's host. The conn
// gathers each Write's records into one socket write (Conn).
func Handshake(ctx context.Context, nc net.Conn, addr string, cfg *tls.Config, timeout time.Duration) (*Conn, error) {
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	tc := NewClientConn(nc, cfg)
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	return tc, nil
}

// Dial connects to addr over TCP within timeout and, when cfg is not nil,
// runs a client TLS handshake on it (Handshake).
func Dial(ctx context.Context, addr string, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || cfg == nil {
		return nc, err
	}
	tc, err := Handshake(ctx, nc, addr, cfg, timeout)
	if err != nil {
		return nil, err // not a typed nil
	}
	return tc, nil
}
