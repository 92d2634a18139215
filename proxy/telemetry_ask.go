package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"

	"github.com/stratamq/stratamq/proxy/apiv2"
)

// Commands the server sends a client over its Telemetry stream and waits
// for the answer to, matched by nonce: the thread stack of a client
// (PrintThreadStackTraceCommand → ThreadStackTrace) and a message
// verification (VerifyMessageCommand → VerifyMessageResult; a client that
// cannot verify echoes the command with a status, as the Node.js client
// does with NOT_IMPLEMENTED).

// ErrNoSession: the client has no Telemetry stream open here.
var ErrNoSession = errors.New("proxy: the client has no telemetry session on this endpoint")

// maxPending bounds the questions waiting for answers.
const maxPending = 1024

// pendingAnswers are the questions in flight, by nonce.
type pendingAnswers struct {
	mu sync.Mutex
	m  map[string]chan *apiv2.TelemetryCommand
}

func (p *pendingAnswers) add(nonce string) (chan *apiv2.TelemetryCommand, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]chan *apiv2.TelemetryCommand{}
	}
	if len(p.m) >= maxPending {
		return nil, false
	}
	ch := make(chan *apiv2.TelemetryCommand, 1)
	p.m[nonce] = ch
	return ch, true
}

func (p *pendingAnswers) drop(nonce string) {
	p.mu.Lock()
	delete(p.m, nonce)
	p.mu.Unlock()
}

// answer hands cmd to the question with nonce, if one waits.
func (p *pendingAnswers) answer(nonce string, cmd *apiv2.TelemetryCommand) bool {
	p.mu.Lock()
	ch, ok := p.m[nonce]
	delete(p.m, nonce)
	p.mu.Unlock()
	if ok {
		ch <- cmd // buffered, one answer per nonce
	}
	return ok
}

func newNonce() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ask sends cmd (built with a fresh nonce) to the client and waits for the
// answer with that nonce until ctx ends.
func (s *Server) ask(ctx context.Context, clientID string, build func(nonce string) *apiv2.TelemetryCommand) (*apiv2.TelemetryCommand, error) {
	se := s.svc.sessions.get(clientID)
	if se == nil {
		return nil, ErrNoSession
	}
	nonce := newNonce()
	ch, ok := s.svc.pending.add(nonce)
	if !ok {
		return nil, errors.New("proxy: too many telemetry questions in flight")
	}
	defer s.svc.pending.drop(nonce)
	if !se.offer(build(nonce)) {
		return nil, errors.New("proxy: the client's telemetry queue is full or closed")
	}
	select {
	case ans := <-ch:
		return ans, nil
	case <-se.done:
		return nil, ErrNoSession
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ThreadStack asks a client for its thread stack traces.
func (s *Server) ThreadStack(ctx context.Context, clientID string) (string, error) {
	ans, err := s.ask(ctx, clientID, func(nonce string) *apiv2.TelemetryCommand {
		return &apiv2.TelemetryCommand{Command: &apiv2.TelemetryCommand_PrintThreadStackTraceCommand{
			PrintThreadStackTraceCommand: &apiv2.PrintThreadStackTraceCommand{Nonce: nonce}}}
	})
	if err != nil {
		return "", err
	}
	return ans.GetThreadStackTrace().GetThreadStackTrace(), nil
}

// VerifyMessage asks a consumer whether it can consume msg; the answer's
// status (OK when it could, NOT_IMPLEMENTED from a client that cannot
// verify).
func (s *Server) VerifyMessage(ctx context.Context, clientID string, msg *apiv2.Message) (*apiv2.Status, error) {
	ans, err := s.ask(ctx, clientID, func(nonce string) *apiv2.TelemetryCommand {
		return &apiv2.TelemetryCommand{Command: &apiv2.TelemetryCommand_VerifyMessageCommand{
			VerifyMessageCommand: &apiv2.VerifyMessageCommand{Nonce: nonce, Message: msg}}}
	})
	if err != nil {
		return nil, err
	}
	if ans.GetStatus() == nil {
		return okStatus(), nil
	}
	return ans.GetStatus(), nil
}
