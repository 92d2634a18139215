package proxy_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/proxy/apiv2"
)

// twoAccountsACL: a victim account that publishes VictimTx and an
// attacker account that may publish only its own topic.
const twoAccountsACL = `
accounts:
  - accessKey: grpc-admin
    secretKey: ADMIN-secret-1
    admin: true
  - accessKey: victim-app
    secretKey: VICTIM-secret-3
    defaultTopicPerm: DENY
    topicPerms:
      - VictimTx=PUB|SUB
  - accessKey: attacker-app
    secretKey: ATTACKER-secret-4
    defaultTopicPerm: DENY
    topicPerms:
      - AttackerTopic=PUB|SUB
`

// signedAs is a call context of client id signed as account ak, dated
// date (now when empty).
func signedAs(t *testing.T, ak, sk, id, date string) context.Context {
	t.Helper()
	if date == "" {
		date = time.Now().UTC().Format("20060102T150405Z")
	}
	mac := hmac.New(sha1.New, []byte(sk))
	mac.Write([]byte(date))
	auth := "MQv2-HMAC-SHA1 Credential=" + ak + ", SignedHeaders=x-mq-date-time, Signature=" + hex.EncodeToString(mac.Sum(nil))
	return metadata.AppendToOutgoingContext(callCtx(t, id), "x-mq-date-time", date, "authorization", auth)
}

func aclEnv(t *testing.T, rulesYAML string) *env {
	t.Helper()
	rules, err := acl.Parse([]byte(rulesYAML))
	if err != nil {
		t.Fatal(err)
	}
	x := acl.NewStatic(rules, acl.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return startEnv(t, envOpts{cfg: func(c *broker.Config) { c.ACL = x }})
}

// producerSettings is a producer's settings command publishing topics.
func producerSettings(topics ...string) *apiv2.TelemetryCommand {
	ct := apiv2.ClientType_PRODUCER
	p := &apiv2.Publishing{}
	for _, tp := range topics {
		p.Topics = append(p.Topics, res(tp))
	}
	return &apiv2.TelemetryCommand{Command: &apiv2.TelemetryCommand_Settings{Settings: &apiv2.Settings{
		ClientType: &ct, PubSub: &apiv2.Settings_Publishing{Publishing: p}}}}
}

// TestGRPCSessionBoundToAccount: a Telemetry session belongs to the
// account and connection that opened it. Another account reusing its
// client id is refused with a clear error and its stream ends with
// nothing more (no transaction check of the victim's half messages);
// its heartbeat and NotifyClientTermination under that id are FORBIDDEN,
// and so is a termination by the victim's own account from another
// connection. The victim keeps its session: the check of its half message
// comes to it, and its own termination on its connection works.
func TestGRPCSessionBoundToAccount(t *testing.T) {
	e := aclEnv(t, twoAccountsACL)
	const id = "victim-client"
	victim := func() context.Context { return signedAs(t, "victim-app", "VICTIM-secret-3", id, "") }
	attacker := func() context.Context { return signedAs(t, "attacker-app", "ATTACKER-secret-4", id, "") }

	vs, err := e.cli.Telemetry(victim())
	if err != nil {
		t.Fatal(err)
	}
	if err := vs.Send(producerSettings("VictimTx")); err != nil {
		t.Fatal(err)
	}
	if r, err := vs.Recv(); err != nil || r.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("victim's settings: %v %v", r, err)
	}

	// The attacker opens a stream under the victim's client id.
	as, err := e.cli.Telemetry(attacker())
	if err != nil {
		t.Fatal(err)
	}
	_ = as.Send(producerSettings("AttackerTopic"))
	r, err := as.Recv()
	if err != nil || r.GetStatus().GetCode() != apiv2.Code_FORBIDDEN || !strings.Contains(r.GetStatus().GetMessage(), "another account") {
		t.Fatalf("attacker's stream under the victim's client id: %v %v, want FORBIDDEN naming another account", r, err)
	}
	if r, err := as.Recv(); err != io.EOF {
		t.Fatalf("attacker's stream after the refusal: %v %v, want its end", r, err)
	}

	hb, err := e.cli.Heartbeat(attacker(), &apiv2.HeartbeatRequest{ClientType: apiv2.ClientType_PRODUCER})
	if err != nil || hb.GetStatus().GetCode() != apiv2.Code_FORBIDDEN {
		t.Errorf("attacker's heartbeat under the victim's id: %v %v, want FORBIDDEN", hb.GetStatus(), err)
	}
	term, err := e.cli.NotifyClientTermination(attacker(), &apiv2.NotifyClientTerminationRequest{})
	if err != nil || term.GetStatus().GetCode() != apiv2.Code_FORBIDDEN {
		t.Fatalf("attacker's termination of the victim: %v %v, want FORBIDDEN", term.GetStatus(), err)
	}
	// The victim's own account, but another connection.
	conn2, err := grpc.NewClient(e.srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	term, err = apiv2.NewMessagingServiceClient(conn2).NotifyClientTermination(victim(), &apiv2.NotifyClientTerminationRequest{})
	if err != nil || term.GetStatus().GetCode() != apiv2.Code_FORBIDDEN {
		t.Fatalf("termination from another connection: %v %v, want FORBIDDEN", term.GetStatus(), err)
	}

	// The victim's half message, never ended: its check goes to the
	// victim's stream.
	m := textMsg("VictimTx", "01VICTIMTX", "secret body")
	m.SystemProperties.MessageType = apiv2.MessageType_TRANSACTION
	sr, err := e.cli.SendMessage(victim(), &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
	if err != nil || sr.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("victim's half message: %v %v", sr, err)
	}
	for {
		r, err := vs.Recv()
		if err != nil {
			t.Fatalf("victim's stream ended before the transaction check: %v", err)
		}
		if c := r.GetRecoverOrphanedTransactionCommand(); c != nil {
			if c.GetMessage().GetSystemProperties().GetMessageId() != "01VICTIMTX" {
				t.Fatalf("check of %v", c.GetMessage())
			}
			break
		}
	}
	term, err = e.cli.NotifyClientTermination(victim(), &apiv2.NotifyClientTerminationRequest{})
	if err != nil || term.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("the victim's own termination: %v %v", term.GetStatus(), err)
	}
}

// TestGRPCSessionReopenedBySameAccount: a client that opens its stream
// again (reconnecting) under its own account takes its session over.
func TestGRPCSessionReopenedBySameAccount(t *testing.T) {
	e := aclEnv(t, twoAccountsACL)
	for range 2 {
		s, err := e.cli.Telemetry(signedAs(t, "victim-app", "VICTIM-secret-3", "c-re", ""))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(producerSettings("VictimTx")); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Recv(); err != nil || r.GetStatus().GetCode() != apiv2.Code_OK {
			t.Fatalf("settings: %v %v", r, err)
		}
	}
}

// TestGRPCTelemetryResyncPastSkewWindow: with the ACL on, a Telemetry
// stream's settings sent again after more than proxy.MaxClockSkew (the
// clients re-sync on the same stream, whose signed date is that of its
// opening) are answered OK; a new call with that old date is still
// refused (no replay).
func TestGRPCTelemetryResyncPastSkewWindow(t *testing.T) {
	var shift atomic.Int64 // how far the broker's clock is moved on
	restore := proxy.SetClock(func() time.Time { return time.Now().Add(time.Duration(shift.Load())) })
	t.Cleanup(restore) // after the env's cleanup: its server is stopped
	e := aclEnv(t, twoAccountsACL)
	date := time.Now().UTC().Format("20060102T150405Z")
	ctx := signedAs(t, "victim-app", "VICTIM-secret-3", "c-resync", date)
	s, err := e.cli.Telemetry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(producerSettings("VictimTx")); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Recv(); err != nil || r.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("settings: %v %v", r, err)
	}
	shift.Store(int64(proxy.MaxClockSkew + 5*time.Minute))
	if err := s.Send(producerSettings("VictimTx")); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Recv(); err != nil || r.GetStatus().GetCode() != apiv2.Code_OK || r.GetSettings() == nil {
		t.Fatalf("settings re-sync %s after the stream opened: %v %v, want OK", time.Duration(shift.Load()), r.GetStatus(), err)
	}
	// Permissions still apply on the old stream.
	if err := s.Send(producerSettings("AttackerTopic")); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Recv(); err != nil || r.GetStatus().GetCode() != apiv2.Code_FORBIDDEN {
		t.Fatalf("settings naming a topic without PUB: %v %v, want FORBIDDEN", r.GetStatus(), err)
	}
	// A new call with the stream's date is a replay.
	hb, err := e.cli.Heartbeat(signedAs(t, "victim-app", "VICTIM-secret-3", "c-resync", date), &apiv2.HeartbeatRequest{})
	if err != nil || hb.GetStatus().GetCode() != apiv2.Code_UNAUTHORIZED {
		t.Fatalf("a new call with the old date: %v %v, want UNAUTHORIZED", hb.GetStatus(), err)
	}
	// So is a new stream.
	s2, err := e.cli.Telemetry(signedAs(t, "victim-app", "VICTIM-secret-3", "c-resync2", date))
	if err != nil {
		t.Fatal(err)
	}
	_ = s2.Send(producerSettings("VictimTx"))
	if r, err := s2.Recv(); err != nil || r.GetStatus().GetCode() != apiv2.Code_UNAUTHORIZED {
		t.Fatalf("a new stream with the old date: %v %v, want UNAUTHORIZED", r.GetStatus(), err)
	}
}
