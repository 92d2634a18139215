package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"

	"github.com/stratamq/stratamq/acl2"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
)

// auth2Backend is a Backend with ACL 2.0 (package acl2): its users and
// ACLs, whether authentication and authorization are on, and its cluster
// name.
type auth2Backend interface {
	Auth2() (store *acl2.Store, authentication, authorization bool, cluster string)
}

// auth2Store is b's ACL 2.0 when it is on (nil otherwise).
func auth2Store(b Backend) (st *acl2.Store, authorization bool, cluster string) {
	ab, ok := b.(auth2Backend)
	if !ok {
		return nil, false, ""
	}
	st, authn, authz, cluster := ab.Auth2()
	if st == nil || !authn && !authz {
		return nil, false, ""
	}
	return st, authz, cluster
}

// authorize2 is authorize with ACL 2.0 on: a request whose authorization
// header names a user is checked by the user's password (the 5.x
// clients' signature of x-mq-date-time, within MaxClockSkew) and, with
// authorization on, by its policies, as the remoting request code with
// ext would be. done false: not a user's request, for ACL 1.0 to decide
// (when the broker has an ACL file).
func (s *Server) authorize2(ctx context.Context, b Backend, code remoting.RequestCode, ext map[string]string) (done bool, err error) {
	st, authz, cluster := auth2Store(b)
	if st == nil {
		return false, nil
	}
	raw := header(ctx, hdrAuthorization)
	a, parsed := parseAuthorization(raw)
	pw, isUser := st.Password(a.accessKey)
	if !parsed || !isUser {
		if x := b.ACL(); x != nil && x.Rules() != nil {
			return false, nil
		}
		switch {
		case raw == "":
			return true, bad(apiv2.Code_UNAUTHORIZED, "ACL: the request is not signed; sign it as a user (AccessKey: the username, SecretKey: its password)")
		case !parsed:
			return true, bad(apiv2.Code_UNAUTHORIZED, "ACL: the authorization header is not %q Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>", authAlgorithm)
		}
		return true, bad(apiv2.Code_UNAUTHORIZED, "%s", st.CheckUser(a.accessKey).Reason)
	}
	date := header(ctx, hdrDateTime)
	mac := hmac.New(sha1.New, []byte(pw))
	mac.Write([]byte(date))
	got, herr := hex.DecodeString(a.signature)
	if herr != nil || !hmac.Equal(mac.Sum(nil), got) {
		return true, bad(apiv2.Code_UNAUTHORIZED, "ACL: signature check failed for User:%s (wrong password, or x-mq-date-time was changed)", a.accessKey)
	}
	if err := checkDateTime(date, clock()); err != nil && !openedStream(ctx) {
		return true, err
	}
	if d := st.CheckUser(a.accessKey); d != nil {
		return true, bad(apiv2.Code_FORBIDDEN, "%s", d.Reason)
	}
	if !authz {
		return true, nil
	}
	pairs := make([]remoting.ExtField, 0, len(ext))
	for k, v := range ext {
		pairs = append(pairs, remoting.ExtField{Key: k, Value: v})
	}
	ip := peerAddr(ctx).Addr()
	for _, n := range acl2.Needs(code, pairs, nil, cluster) {
		if d := st.Decide(acl2.Request{Username: a.accessKey, Resource: n.Resource, Actions: n.Actions, SourceIP: ip}); d != nil {
			return true, bad(apiv2.Code_FORBIDDEN, "%s", d.Reason)
		}
	}
	return true, nil
}
