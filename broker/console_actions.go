package broker

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/remoting"
)

// The web console's writes and signed reads (package console): a signed-in
// user's action is the request an admin client would send, signed with the
// user's secret and served by this broker's own remoting server over an
// in-memory connection whose peer address is the browser's, so the ACL
// (ACL 1.0 or 2.0, with its source-IP conditions) decides it exactly as it
// decides a client's.

// ErrConsoleLogin is a refused console sign-in: it names neither the
// secret nor which of user and secret was wrong.
var ErrConsoleLogin = errors.New("unknown user or wrong secret")

// ConsoleACL reports whether the broker checks requests (ACL 1.0's
// STRATAMQ_ACL_FILE, or ACL 2.0): the console then needs a signed-in
// user for its writes and its message browser.
func (b *Broker) ConsoleACL() bool { return b.cfg.ACL != nil || b.auth2On() }

// ConsoleAuthenticate checks a console sign-in against the broker's
// accounts: ACL 2.0's users when it is on, else STRATAMQ_ACL_FILE's
// accounts. It answers in constant time in the secret's length and
// never logs or returns the secret.
func (b *Broker) ConsoleAuthenticate(user, secret string) error {
	if user == "" || secret == "" {
		return ErrConsoleLogin
	}
	var want acl.Secret
	var ok bool
	switch {
	case b.auth2On():
		want, ok = b.auth.Password(user)
	case b.cfg.ACL != nil:
		var c acl.Credentials
		c, ok = b.cfg.ACL.Credentials(user)
		want = c.SecretKey
	default:
		return errors.New("the broker has no accounts (no ACL): there is nobody to sign in as")
	}
	// Compared as HMACs under a per-call key: the same work whether the
	// user exists or the lengths differ.
	var key [32]byte
	_, _ = rand.Read(key[:])
	mac := func(s string) []byte {
		m := hmac.New(sha256.New, key[:])
		m.Write([]byte(s))
		return m.Sum(nil)
	}
	if !ok {
		want = "\x00 no such user \x00"
	}
	if subtle.ConstantTimeCompare(mac(string(want)), mac(secret)) != 1 || !ok {
		return ErrConsoleLogin
	}
	return nil
}

// ConsoleInvoke sends req to this broker as a client at remote sends it:
// signed as user with secret when the broker checks requests (unsigned
// when it does not), over an in-memory connection to its own remoting
// server. The answer is the broker's, whatever it is (a refusal too).
func (b *Broker) ConsoleInvoke(ctx context.Context, remote netip.AddrPort, user, secret string, req *remoting.Command) (*remoting.Command, error) {
	if b.ConsoleACL() {
		if err := b.ConsoleAuthenticate(user, secret); err != nil {
			return nil, err
		}
		acl.Credentials{AccessKey: user, SecretKey: acl.Secret(secret)}.Sign(req)
	}
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: 5 * time.Second, Logger: b.log,
		Dial: func(ctx context.Context, _ string) (net.Conn, error) {
			client, server := net.Pipe()
			b.server.ServeConn(peerConn{Conn: server, remote: net.TCPAddrFromAddrPort(remote)})
			return client, nil
		}})
	defer cl.Close()
	resp, err := cl.Invoke(ctx, "console", req)
	if err != nil {
		return nil, fmt.Errorf("console request %s: %w", remoting.RequestCode(req.Code), err)
	}
	return resp, nil
}

// peerConn is one end of a net.Pipe that says it comes from remote.
type peerConn struct {
	net.Conn
	remote *net.TCPAddr
}

func (p peerConn) RemoteAddr() net.Addr { return p.remote }
