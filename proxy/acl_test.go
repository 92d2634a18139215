package proxy_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/proxy/apiv2"
)

const testACL = `
accounts:
  - accessKey: grpc-admin
    secretKey: ADMIN-secret-1
    admin: true
  - accessKey: grpc-producer
    secretKey: PRODUCER-secret-2
    defaultTopicPerm: DENY
    topicPerms:
      - AclTopic=PUB
`

// signed is a call context signed as the 5.x clients sign: the
// authorization header's signature is hex HMAC-SHA1(secret,
// x-mq-date-time).
func signed(t *testing.T, ak, sk string) context.Context {
	t.Helper()
	return signedDate(t, ak, sk, time.Now().UTC().Format("20060102T150405Z"))
}

// signedDate is signed with x-mq-date-time date.
func signedDate(t *testing.T, ak, sk, date string) context.Context {
	t.Helper()
	mac := hmac.New(sha1.New, []byte(sk))
	mac.Write([]byte(date))
	auth := "MQv2-HMAC-SHA1 Credential=" + ak + ", SignedHeaders=x-mq-date-time, Signature=" + strings.ToUpper(hex.EncodeToString(mac.Sum(nil)))
	return metadata.AppendToOutgoingContext(callCtx(t, "acl-client"), "x-mq-date-time", date, "authorization", auth)
}

// TestGRPCACL: the ACL's accounts and permissions apply to the 5.x
// clients' authorization header: unsigned and wrongly signed calls are
// UNAUTHORIZED, a signed send to a topic without PUB is FORBIDDEN naming
// it, one with PUB is stored; a transaction's end needs PUB on the half's
// own topic.
func TestGRPCACL(t *testing.T) {
	rules, err := acl.Parse([]byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	x := acl.NewStatic(rules, acl.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	e := startEnv(t, envOpts{cfg: func(c *broker.Config) { c.ACL = x }})
	send := func(ctx context.Context, topic string) *apiv2.Status {
		t.Helper()
		resp, err := e.cli.SendMessage(ctx, &apiv2.SendMessageRequest{Messages: []*apiv2.Message{textMsg(topic, "01ACL", "b")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	f := func(name string, ctx context.Context, topic string, code apiv2.Code, says string) {
		t.Helper()
		st := send(ctx, topic)
		if st.GetCode() != code || !strings.Contains(st.GetMessage(), says) {
			t.Errorf("%s: %v, want %v saying %q", name, st, code, says)
		}
		if strings.Contains(st.GetMessage(), "secret-") {
			t.Errorf("%s: the status names a secret: %q", name, st.GetMessage())
		}
	}
	f("unsigned", callCtx(t, "c"), "AclTopic", apiv2.Code_UNAUTHORIZED, "not signed")
	f("wrong secret", signed(t, "grpc-producer", "WRONG-secret"), "AclTopic", apiv2.Code_UNAUTHORIZED, "signature check failed")
	f("unknown key", signed(t, "nobody", "x"), "AclTopic", apiv2.Code_UNAUTHORIZED, "no account")
	f("no PUB", signed(t, "grpc-producer", "PRODUCER-secret-2"), "OtherTopic", apiv2.Code_FORBIDDEN, "OtherTopic")
	f("PUB", signed(t, "grpc-producer", "PRODUCER-secret-2"), "AclTopic", apiv2.Code_OK, "")
	f("admin", signed(t, "grpc-admin", "ADMIN-secret-1"), "OtherTopic", apiv2.Code_OK, "")

	bad := metadata.AppendToOutgoingContext(callCtx(t, "c"), "authorization", "Basic abc")
	if resp, err := e.cli.QueryRoute(bad, &apiv2.QueryRouteRequest{Topic: res("AclTopic")}); err != nil || resp.GetStatus().GetCode() != apiv2.Code_UNAUTHORIZED {
		t.Errorf("a malformed authorization header: %v %v", resp.GetStatus(), err)
	}

	// A half message of OtherTopic (sent by the admin) cannot be committed
	// by the producer account, whatever topic its request names.
	m := textMsg("OtherTopic", "01TXACL", "tx")
	m.SystemProperties.MessageType = apiv2.MessageType_TRANSACTION
	resp, err := e.cli.SendMessage(signed(t, "grpc-admin", "ADMIN-secret-1"), &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
	if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("half message: %v %v", resp, err)
	}
	txID := resp.Entries[0].GetTransactionId()
	for _, topic := range []string{"OtherTopic", "AclTopic"} {
		end, err := e.cli.EndTransaction(signed(t, "grpc-producer", "PRODUCER-secret-2"), &apiv2.EndTransactionRequest{
			Topic: res(topic), MessageId: "01TXACL", TransactionId: txID, Resolution: apiv2.TransactionResolution_COMMIT})
		if err != nil || end.GetStatus().GetCode() == apiv2.Code_OK {
			t.Errorf("EndTransaction naming %s by an account without PUB on OtherTopic: %v %v", topic, end.GetStatus(), err)
		}
	}
	end, err := e.cli.EndTransaction(signed(t, "grpc-admin", "ADMIN-secret-1"), &apiv2.EndTransactionRequest{
		Topic: res("OtherTopic"), MessageId: "01TXACL", TransactionId: txID, Resolution: apiv2.TransactionResolution_COMMIT})
	if err != nil || end.GetStatus().GetCode() != apiv2.Code_OK {
		t.Errorf("EndTransaction by the admin: %v %v", end.GetStatus(), err)
	}
}

// TestGRPCACLDateTimeSkew: a correctly signed x-mq-date-time more than
// proxy.MaxClockSkew (15 minutes) from the broker's clock is UNAUTHORIZED,
// naming the skew (a replayed request); one within it is accepted; a date
// not of the clients' format is UNAUTHORIZED naming it.
func TestGRPCACLDateTimeSkew(t *testing.T) {
	rules, err := acl.Parse([]byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	x := acl.NewStatic(rules, acl.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	e := startEnv(t, envOpts{cfg: func(c *broker.Config) { c.ACL = x }})
	at := func(d time.Duration) string { return time.Now().Add(d).UTC().Format("20060102T150405Z") }
	for _, c := range []struct {
		name, date string
		code       apiv2.Code
		says       string
	}{
		{"an hour old", at(-time.Hour), apiv2.Code_UNAUTHORIZED, "is 1h0m"},
		{"16 minutes old", at(-16 * time.Minute), apiv2.Code_UNAUTHORIZED, "behind the broker's clock"},
		{"16 minutes ahead", at(16 * time.Minute), apiv2.Code_UNAUTHORIZED, "ahead of the broker's clock"},
		{"14 minutes old", at(-14 * time.Minute), apiv2.Code_OK, ""},
		{"14 minutes ahead", at(14 * time.Minute), apiv2.Code_OK, ""},
		{"not the clients' format", time.Now().UTC().Format(time.RFC3339), apiv2.Code_UNAUTHORIZED, "is not of the form"},
	} {
		ctx := signedDate(t, "grpc-producer", "PRODUCER-secret-2", c.date)
		resp, err := e.cli.SendMessage(ctx, &apiv2.SendMessageRequest{Messages: []*apiv2.Message{textMsg("AclTopic", "01SKEW", "b")}})
		if err != nil {
			t.Fatal(err)
		}
		if st := resp.GetStatus(); st.GetCode() != c.code || !strings.Contains(st.GetMessage(), c.says) {
			t.Errorf("%s (%s): %v, want %v saying %q", c.name, c.date, st, c.code, c.says)
		}
		// The identity-only RPCs are checked alike.
		route, err := e.cli.QueryRoute(ctx, &apiv2.QueryRouteRequest{Topic: res("AclTopic")})
		if err != nil || route.GetStatus().GetCode() != c.code {
			t.Errorf("%s: QueryRoute %v %v, want %v", c.name, route.GetStatus(), err, c.code)
		}
	}
	if proxy.MaxClockSkew != 15*time.Minute {
		t.Errorf("MaxClockSkew %s, want S3's 15m", proxy.MaxClockSkew)
	}
}
