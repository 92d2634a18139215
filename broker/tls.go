package broker

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/stratamq/stratamq/infra/tlsconf"
	"github.com/stratamq/stratamq/remoting"
)

// TLS is the broker's TLS material (issue 14 item 3), built by cmd from
// the STRATAMQ_TLS_* settings. The zero value is plain TCP everywhere.
type TLS struct {
	// Server, with Mode permissive or enforcing, serves the broker port
	// and the HA port.
	Server *tls.Config
	Mode   remoting.TLSMode
	// Client, when set, makes the broker's own connections TLS: to the
	// name servers and a slave's to its master's HA port.
	Client *tls.Config
}

// haListener wraps the HA listener as the broker port is wrapped.
func (t TLS) haListener(ln net.Listener) net.Listener {
	return remoting.TLSListener(ln, t.Server, t.Mode, 0)
}

// haDial is a slave's dial of its master's HA port (over Deps.Net when
// set): TLS with Client set.
func (b *Broker) haDial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	if b.net == nil {
		return tlsconf.Dial(ctx, addr, b.tls.Client, timeout)
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, err := b.net.Dial(dctx, addr)
	if err != nil || b.tls.Client == nil {
		return nc, err
	}
	tc, err := tlsconf.Handshake(ctx, nc, addr, b.tls.Client, timeout)
	if err != nil {
		return nil, err // not a typed nil
	}
	return tc, nil
}

// Network is where a broker listens and dials (Deps.Net).
type Network interface {
	Listen(addr string) (net.Listener, error)
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// listener is the remoting and HA servers' Listener: nil (TCP) without
// Deps.Net.
func (b *Broker) listener() func(string) (net.Listener, error) {
	if b.net == nil {
		return nil
	}
	return b.net.Listen
}

// dialer is the broker's remoting client's Dial: nil (TCP) without
// Deps.Net.
func (b *Broker) dialer() func(context.Context, string) (net.Conn, error) {
	if b.net == nil {
		return nil
	}
	return b.net.Dial
}
