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

// haDial is a slave's dial of its master's HA port: TLS with Client set.
func (t TLS) haDial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	return tlsconf.Dial(ctx, addr, t.Client, timeout)
}
