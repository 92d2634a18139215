package broker

import (
	"context"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/remoting"
)

// checkACL answers a request the ACL refuses (NO_PERMISSION naming what
// was missing); nil lets it through. Without STRATAMQ_ACL_FILE every
// request goes through.
func (b *Broker) checkACL(c *remoting.Conn, req *remoting.Command) *remoting.Command {
	if b.auth2On() {
		return b.checkAuth2(c, req) // auth2.go
	}
	x := b.cfg.ACL
	if x == nil {
		return nil
	}
	return x.CheckBroker(c, req)
}

// checkStored checks the topic of a stored message a request reads by
// its offset (send-back, view by id) against the ACL: the header's topic,
// if any, is the client's word, the record's is not.
func (b *Broker) checkStored(c *remoting.Conn, req *remoting.Command, topic string, perm acl.Perm) *remoting.Command {
	if b.auth2On() {
		if resp, byUser := b.checkStored2(c, req, topic, perm); byUser {
			return resp
		}
	}
	x := b.cfg.ACL
	if x == nil {
		return nil
	}
	return x.CheckStored(c, req, topic, perm)
}

// credentials are what the broker signs its own requests with: the
// explicit ones (STRATAMQ_ACL_ACCESS_KEY and STRATAMQ_ACL_SECRET_KEY
// without an ACL file), else the account STRATAMQ_ACL_ACCESS_KEY names
// in the ACL file, else the file's first admin account; zero (unsigned)
// without either. They are looked up on every call, so a reloaded file's
// new secret is used at once.
func (b *Broker) credentials() acl.Credentials {
	if !b.cfg.ACLCredentials.IsZero() {
		return b.cfg.ACLCredentials
	}
	if x := b.cfg.ACL; x != nil {
		c, _ := x.Credentials(b.cfg.ACLAccessKey)
		return c
	}
	return acl.Credentials{}
}

// requestCredentials are what the broker signs its own requests to name
// servers and its master with: credentials, else, with ACL 2.0's
// authentication on, its initial user (STRATAMQ_INIT_AUTHENTICATION_USER,
// a Super user: a name server with ACL 2.0 takes its registration).
func (b *Broker) requestCredentials() acl.Credentials {
	if c := b.credentials(); !c.IsZero() {
		return c
	}
	if u := b.cfg.InitAuthenticationUser; u != nil && b.cfg.AuthenticationEnabled {
		return acl.Credentials{AccessKey: u.Username, SecretKey: acl.Secret(u.Password)}
	}
	return acl.Credentials{}
}

// invoke sends a request of the broker's own (to a name server, or a
// slave's to its master), signed when the broker has credentials.
func (b *Broker) invoke(ctx context.Context, addr string, req *remoting.Command) (*remoting.Command, error) {
	b.requestCredentials().Sign(req)
	return b.nsClient.Invoke(ctx, addr, req)
}

// aclOn reports whether requests are checked against an ACL (1.0 or 2.0).
func (b *Broker) aclOn() bool { return b.auth2On() || b.cfg.ACL != nil }
