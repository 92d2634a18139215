package proxy

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stratamq/stratamq/proxy/apiv2"
)

// Telemetry is a client's session stream. The client sends its Settings
// (and again every few minutes); each is answered with the settings the
// server holds for it (the clients wait for the first answer before they
// start). The server sends RecoverOrphanedTransactionCommand when a
// transaction check needs a producer of the topic; the client's answers
// to verify-message and thread-stack commands are accepted and logged.
//
// One goroutine owns the stream: this one. A reader goroutine only
// receives and hands each command over; everything sent goes out from
// here, so sends never race.
func (svc *service) Telemetry(stream apiv2.MessagingService_TelemetryServer) error {
	ctx := stream.Context()
	b, err := svc.s.backend()
	if err == nil {
		err = svc.s.authAny(ctx, b)
	}
	if err != nil {
		return stream.Send(&apiv2.TelemetryCommand{Status: statusOf(err)})
	}
	id := clientID(ctx)
	if id == "" {
		return stream.Send(&apiv2.TelemetryCommand{Status: statusOf(bad(apiv2.Code_CLIENT_ID_REQUIRED, "the %s header is missing", hdrClientID))})
	}
	// The session is bound to this caller: another account's stream with
	// the same client id is refused, here and (a race) when it is added.
	owner := svc.s.callerOf(ctx, b)
	if svc.sessions.get(id) != nil && svc.sessions.of(owner, id) == nil {
		return stream.Send(&apiv2.TelemetryCommand{Status: statusOf(errClientIDTaken(id))})
	}
	ctx = withOpenedStream(ctx)
	se := &session{clientID: id, owner: owner, out: make(chan *apiv2.TelemetryCommand, DefaultTelemetryQueue), done: make(chan struct{}), seen: time.Now()}
	defer close(se.done)
	defer func() {
		if svc.sessions.remove(se) {
			// The session ended: its auto_renew handles expire as they are.
			svc.renew.dropClient(id)
		}
	}()

	in := make(chan *apiv2.TelemetryCommand)
	recvErr := make(chan error, 1)
	go func() {
		for {
			cmd, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case in <- cmd:
			case <-se.done:
				return
			}
		}
	}()
	for {
		select {
		case cmd := <-in:
			reply, end := svc.telemetryCommand(ctx, se, cmd)
			if reply != nil {
				if err := stream.Send(reply); err != nil {
					return err
				}
			}
			if end {
				return nil
			}
		case cmd := <-se.out:
			if err := stream.Send(cmd); err != nil {
				return err
			}
		case <-recvErr:
			// The client closed its side (EOF) or went away: the session
			// ends; nothing is owed to it.
			return nil
		case <-svc.done:
			return status.Error(codes.Unavailable, "the server is shutting down")
		case <-ctx.Done():
			return nil
		}
	}
}

// telemetryCommand handles one command from the client and returns the
// answer to send, if any, and whether the stream ends after it.
func (svc *service) telemetryCommand(ctx context.Context, se *session, cmd *apiv2.TelemetryCommand) (*apiv2.TelemetryCommand, bool) {
	switch c := cmd.GetCommand().(type) {
	case *apiv2.TelemetryCommand_Settings:
		b, err := svc.s.backend()
		if err != nil {
			return &apiv2.TelemetryCommand{Status: statusOf(err)}, false
		}
		out, err := svc.settingsFor(ctx, b, c.Settings)
		if err != nil {
			return &apiv2.TelemetryCommand{Status: statusOf(err)}, false
		}
		se.mu.Lock()
		se.settings = proto.Clone(c.Settings).(*apiv2.Settings)
		se.mu.Unlock()
		if err := svc.sessions.add(se); err != nil {
			// Another account's session took the client id meanwhile.
			return &apiv2.TelemetryCommand{Status: statusOf(err)}, true
		}
		return &apiv2.TelemetryCommand{Status: okStatus(), Command: &apiv2.TelemetryCommand_Settings{Settings: out}}, false
	case *apiv2.TelemetryCommand_VerifyMessageResult:
		if !svc.pending.answer(c.VerifyMessageResult.GetNonce(), cmd) {
			svc.s.log.Debug("verify message result nobody waits for", "client", se.clientID, "nonce", c.VerifyMessageResult.GetNonce())
		}
	case *apiv2.TelemetryCommand_ThreadStackTrace:
		if !svc.pending.answer(c.ThreadStackTrace.GetNonce(), cmd) {
			svc.s.log.Debug("thread stack trace nobody waits for", "client", se.clientID, "nonce", c.ThreadStackTrace.GetNonce())
		}
	case *apiv2.TelemetryCommand_VerifyMessageCommand:
		// A client that cannot verify echoes the command with a status
		// (the Node.js client: NOT_IMPLEMENTED).
		if !svc.pending.answer(c.VerifyMessageCommand.GetNonce(), cmd) {
			svc.s.log.Debug("verify message answer nobody waits for", "client", se.clientID, "status", cmd.GetStatus().GetCode().String())
		}
	case nil:
		// A status alone (a client reporting an error): logged.
		svc.s.log.Debug("telemetry status from client", "client", se.clientID, "status", cmd.GetStatus().GetCode().String(), "message", cmd.GetStatus().GetMessage())
	default:
		svc.s.log.Debug("telemetry command ignored", "client", se.clientID)
	}
	return nil, false
}

// Default retry policy handed to clients that sent none: exponential
// backoff from 1 s to 60 s, doubling.
var defaultBackoff = &apiv2.ExponentialBackoff{
	Initial: durationpb.New(time.Second), Max: durationpb.New(60 * time.Second), Multiplier: 2,
}

// settingsFor is the server's answer to a client's settings: the client's
// own, with what the server decides filled in. Producers get the broker's
// body limit; consumers what subscriptionSettings decides.
func (svc *service) settingsFor(ctx context.Context, b Backend, in *apiv2.Settings) (*apiv2.Settings, error) {
	out := proto.Clone(in).(*apiv2.Settings)
	if out.BackoffPolicy == nil || out.BackoffPolicy.GetExponentialBackoff() == nil && out.BackoffPolicy.GetCustomizedBackoff() == nil {
		attempts := out.GetBackoffPolicy().GetMaxAttempts()
		if attempts <= 0 {
			attempts = 3
		}
		out.BackoffPolicy = &apiv2.RetryPolicy{MaxAttempts: attempts,
			Strategy: &apiv2.RetryPolicy_ExponentialBackoff{ExponentialBackoff: proto.Clone(defaultBackoff).(*apiv2.ExponentialBackoff)}}
	}
	switch ps := out.PubSub.(type) {
	case *apiv2.Settings_Publishing:
		for _, t := range ps.Publishing.GetTopics() {
			if err := svc.s.authTopic(ctx, b, resourceName(t), true); err != nil {
				return nil, err
			}
		}
		ps.Publishing.MaxBodySize = int32(min(b.MaxMessageSize(), 1<<31-1))
		// The endpoint checks the type itself (msgtype.go), so every client
		// gets the Proxy's code, not a client-side error of its own.
		ps.Publishing.ValidateMessageType = false
	case *apiv2.Settings_Subscription:
		if err := svc.subscriptionSettings(ctx, b, out, ps.Subscription); err != nil {
			return nil, err
		}
	}
	return out, nil
}
