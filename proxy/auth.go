package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
)

// Transport headers of the v2 protocol (the clients' docs/transport.md).
const (
	hdrClientID      = "x-mq-client-id"
	hdrDateTime      = "x-mq-date-time"
	hdrAuthorization = "authorization"
	hdrNamespace     = "x-mq-namespace"
	hdrLanguage      = "x-mq-language"
	hdrClientVersion = "x-mq-client-version"

	authAlgorithm = "MQv2-HMAC-SHA1"

	// dateTimeLayout is x-mq-date-time's format (yyyyMMdd'T'HHmmss'Z', UTC).
	dateTimeLayout = "20060102T150405Z"
)

// MaxClockSkew is how far a signed request's x-mq-date-time may be from
// the broker's clock, either way: the signature covers only that header,
// so a captured request could be replayed for as long as its date is
// accepted. As S3 allows for SigV4 (15 minutes).
const MaxClockSkew = 15 * time.Minute

// clock is the time signed dates are checked against: time.Now, but for
// tests that move it (export_test.go).
var clockFunc atomic.Pointer[func() time.Time]

func clock() time.Time {
	if f := clockFunc.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

// checkDateTime is nil when date is an x-mq-date-time within MaxClockSkew
// of now, else why not.
func checkDateTime(date string, now time.Time) error {
	t, err := time.Parse(dateTimeLayout, date)
	if err != nil {
		return bad(apiv2.Code_UNAUTHORIZED, "ACL: x-mq-date-time %q is not of the form yyyyMMdd'T'HHmmss'Z' (UTC)", date)
	}
	skew := now.Sub(t).Truncate(time.Second)
	switch {
	case skew > MaxClockSkew:
		return bad(apiv2.Code_UNAUTHORIZED, "ACL: x-mq-date-time %s is %s behind the broker's clock (%s), more than the %s allowed: a replayed request, or the client's clock is wrong",
			date, skew, now.UTC().Format(dateTimeLayout), MaxClockSkew)
	case skew < -MaxClockSkew:
		return bad(apiv2.Code_UNAUTHORIZED, "ACL: x-mq-date-time %s is %s ahead of the broker's clock (%s), more than the %s allowed: the client's clock is wrong",
			date, -skew, now.UTC().Format(dateTimeLayout), MaxClockSkew)
	}
	return nil
}

// header is the first value of a metadata key ("" when absent).
func header(ctx context.Context, key string) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// clientID is the caller's x-mq-client-id.
func clientID(ctx context.Context) string { return header(ctx, hdrClientID) }

// peerAddr is the caller's IP address and port.
func peerAddr(ctx context.Context) netip.AddrPort {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	if t, ok := p.Addr.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, err := netip.ParseAddrPort(p.Addr.String())
	if err != nil {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	return ap
}

// authorization is a parsed authorization header:
//
//	MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1(secret, x-mq-date-time)>
type authorization struct {
	accessKey string
	signature string
	signed    string
}

// parseAuthorization reads the header; ok false for one that is not of
// that form.
func parseAuthorization(v string) (authorization, bool) {
	algo, rest, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || algo != authAlgorithm {
		return authorization{}, false
	}
	var a authorization
	for _, part := range strings.Split(rest, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return authorization{}, false
		}
		switch k {
		case "Credential":
			// A Credential may carry a scope after the key (key/date/...):
			// the key is its first element.
			a.accessKey, _, _ = strings.Cut(val, "/")
		case "SignedHeaders":
			a.signed = val
		case "Signature":
			a.signature = val
		}
	}
	if a.accessKey == "" || a.signature == "" {
		return authorization{}, false
	}
	return a, true
}

// authorize checks a request against the broker's ACL as the remoting
// request code with ext would be checked: the same accounts, white lists
// and per-topic and per-group permissions (acl.Rules.Verify). The 5.x
// clients sign x-mq-date-time (HMAC-SHA1, hex) instead of the request, so
// that signature is checked here, and the date must be within
// MaxClockSkew of the broker's clock (no replay of an old request); a
// request it passes is then checked as if signed by the account. nil: allowed (always, without an ACL).
func (s *Server) authorize(ctx context.Context, b Backend, code remoting.RequestCode, ext map[string]string) error {
	if done, err := s.authorize2(ctx, b, code, ext); done { // auth2.go
		return err
	}
	x := b.ACL()
	if x == nil {
		return nil
	}
	rules := x.Rules()
	if rules == nil {
		return nil
	}
	if ext == nil {
		ext = map[string]string{}
	}
	req := remoting.NewRequest(code, ext, nil)
	peer := peerAddr(ctx).Addr()
	raw := header(ctx, hdrAuthorization)
	if raw != "" {
		a, ok := parseAuthorization(raw)
		if !ok {
			return bad(apiv2.Code_UNAUTHORIZED, "ACL: the authorization header is not %q Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>", authAlgorithm)
		}
		creds, ok := rules.Credentials(a.accessKey)
		if !ok || creds.AccessKey != a.accessKey {
			req.ExtFields[acl.KeyAccessKey] = a.accessKey // unknown: Verify names it
		} else {
			date := header(ctx, hdrDateTime)
			mac := hmac.New(sha1.New, []byte(creds.SecretKey))
			mac.Write([]byte(date))
			want := mac.Sum(nil)
			got, err := hex.DecodeString(a.signature)
			if err != nil || !hmac.Equal(want, got) {
				if d := rules.Verify(peer, withKey(req, a.accessKey), true); d == nil {
					return nil // the account's white list lets the peer in unsigned
				}
				return bad(apiv2.Code_UNAUTHORIZED, "ACL: signature check failed for accessKey %q (wrong secretKey, or x-mq-date-time was changed)", a.accessKey)
			}
			// A valid signature of a date too far from now: refused as a
			// wrong signature is (a replay). A Telemetry stream's date was
			// checked when it opened: its headers are fixed for its life,
			// and the clients send their settings again on it every few
			// minutes, for hours.
			if err := checkDateTime(date, clock()); err != nil && !openedStream(ctx) {
				if d := rules.Verify(peer, withKey(req, a.accessKey), true); d == nil {
					return nil
				}
				return err
			}
			creds.Sign(req)
		}
	}
	if d := rules.Verify(peer, req, true); d != nil {
		code := apiv2.Code_FORBIDDEN
		if req.ExtFields[acl.KeyAccessKey] == "" || strings.Contains(d.Reason, "no account") {
			code = apiv2.Code_UNAUTHORIZED
		}
		return bad(code, "%s", d.Reason)
	}
	return nil
}

// withKey is req with an AccessKey and no signature.
func withKey(req *remoting.Command, key string) *remoting.Command {
	ext := make(map[string]string, len(req.ExtFields)+1)
	for k, v := range req.ExtFields {
		ext[k] = v
	}
	ext[acl.KeyAccessKey] = key
	return remoting.NewRequest(remoting.RequestCode(req.Code), ext, nil)
}

// authTopic is authorize for an RPC that writes (acl.Pub) or reads
// (acl.Sub) a topic, as a send or a pull of it would be checked.
func (s *Server) authTopic(ctx context.Context, b Backend, topic string, write bool) error {
	if write {
		return s.authorize(ctx, b, remoting.SendMessage, map[string]string{"topic": topic})
	}
	return s.authorize(ctx, b, remoting.GetMaxOffset, map[string]string{"topic": topic})
}

// AuthConsume is authorize for an RPC of a consumer group on a topic
// (SUB on both), as a pull is checked. For the consumer RPCs.
func (s *Server) AuthConsume(ctx context.Context, b Backend, group, topic string) error {
	return s.authorize(ctx, b, remoting.PullMessage, map[string]string{"topic": topic, "consumerGroup": group})
}

// authGroup is authorize for an RPC of a consumer group alone (SUB on the
// group), as a request naming only a group is checked.
func (s *Server) authGroup(ctx context.Context, b Backend, group string) error {
	return s.authorize(ctx, b, remoting.GetConsumerListByGroup, map[string]string{"consumerGroup": group})
}

// authAny checks only the caller's identity (signature, account): the
// RPCs that touch no resource (route, heartbeat, telemetry).
func (s *Server) authAny(ctx context.Context, b Backend) error {
	return s.authorize(ctx, b, authOnly, nil)
}

// authOnly is a request code no handler has: the ACL asks it for a valid
// signature and nothing more.
const authOnly remoting.RequestCode = -1

// streamOpened marks a stream's context once its caller was authorized
// when it opened (withOpenedStream).
type streamOpened struct{}

// withOpenedStream is ctx of a stream authorized at its opening: later
// checks on it (a Telemetry stream's settings) verify its signature and
// permissions again, but not its date's skew: the headers, and so the
// signed date, are those of the stream's opening.
func withOpenedStream(ctx context.Context) context.Context {
	return context.WithValue(ctx, streamOpened{}, true)
}

func openedStream(ctx context.Context) bool {
	v, _ := ctx.Value(streamOpened{}).(bool)
	return v
}

// caller is who makes a request: the account its authorization header
// names (authorize checked it; "" without an ACL, or from a white-listed
// peer that sent none) and its connection (the peer's address and port).
// A Telemetry session is bound to the caller that opened it (session.go).
type caller struct {
	account string
	conn    string
}

// callerOf is ctx's caller. Without an ACL every caller is of the same
// (empty) account: there is no identity to tell them apart.
func (s *Server) callerOf(ctx context.Context, b Backend) caller {
	c := caller{conn: peerAddr(ctx).String()}
	if st, _, _ := auth2Store(b); b == nil || st == nil && (b.ACL() == nil || b.ACL().Rules() == nil) {
		return c
	}
	if a, ok := parseAuthorization(header(ctx, hdrAuthorization)); ok {
		c.account = a.accessKey
	}
	return c
}
