package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/stratamq/stratamq/infra/tlsconf"
	"github.com/stratamq/stratamq/remoting"
)

// newClient is the remoting client of an admin command (and of replay's
// republisher): TLS when STRATAMQ_TLS_CLIENT is set in its environment.
func (e *adminEnv) newClient() (*remoting.Client, error) {
	tc, err := clientTLSFromEnv(e.environ, false)
	if err != nil {
		return nil, err
	}
	return remoting.NewClient(remoting.ClientConfig{DialTimeout: e.timeout, TLS: tc}), nil
}

// benchTLS is bench's --tls flags.
type benchTLS struct {
	on, insecure bool
	ca           string
	cfg          *tls.Config // built by load; nil: plain
}

func (t *benchTLS) flags(fs *flag.FlagSet) {
	fs.BoolVar(&t.on, "tls", false, "connect with TLS (a broker and name server with STRATAMQ_TLS_MODE permissive or enforcing)")
	fs.StringVar(&t.ca, "tls-ca", "", "with --tls: PEM CA bundle that verifies the broker's certificate (default: the system's roots)")
	fs.BoolVar(&t.insecure, "tls-insecure-skip-verify", false, "with --tls: accept any server certificate (tests only)")
}

func (t *benchTLS) load() error {
	if !t.on {
		if t.ca != "" || t.insecure {
			return fmt.Errorf("--tls-ca and --tls-insecure-skip-verify need --tls")
		}
		return nil
	}
	cfg, err := tlsconf.Client(tlsconf.ClientOptions{CAFile: t.ca, InsecureSkipVerify: t.insecure})
	if err != nil {
		return fmt.Errorf("--tls-ca=%q: %v", t.ca, err)
	}
	t.cfg = cfg
	return nil
}

// dial connects to addr, with TLS when --tls is set.
func (t *benchTLS) dial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	return tlsconf.Dial(ctx, addr, t.cfg, timeout)
}
