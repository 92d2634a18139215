package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/proxy/nodetest"
)

// TestGRPCNodeTelemetryCommands: over the official Node.js client's open
// Telemetry stream the server asks for its thread stack (the client
// answers with a ThreadStackTrace of the same nonce) and for a message
// verification (the Node client cannot verify and echoes the command with
// NOT_IMPLEMENTED); a client with no session is ErrNoSession.
func TestGRPCNodeTelemetryCommands(t *testing.T) {
	nodetest.Need(t)
	e := startEnv(t, envOpts{})
	plan := map[string]any{"endpoints": e.srv.Addr().String(), "topic": "TelemetryTopic", "hold": true,
		"timeoutMs": 60000, "messages": []map[string]any{{"kind": "normal", "body": "x"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := nodetest.Command(ctx, t, "producer.js", plan)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	clientID := ""
	sc := bufio.NewScanner(stdout)
	for clientID == "" && sc.Scan() {
		var ev struct{ Event, ClientID string }
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == "ready" {
			clientID = ev.ClientID
		}
	}
	if clientID == "" {
		t.Fatalf("the Node producer never got ready: %v\n%s", sc.Err(), stderr.String())
	}
	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer acancel()
	stack, err := e.srv.ThreadStack(actx, clientID)
	if err != nil || stack == "" {
		t.Fatalf("thread stack: %q, %v", stack, err)
	}
	st, err := e.srv.VerifyMessage(actx, clientID, &apiv2.Message{Topic: res("TelemetryTopic"), Body: []byte("v"),
		SystemProperties: &apiv2.SystemProperties{MessageId: "01V"}})
	if err != nil || st.GetCode() != apiv2.Code_NOT_IMPLEMENTED {
		t.Fatalf("verify message: %v, %v; want the Node client's NOT_IMPLEMENTED", st, err)
	}
	if _, err := e.srv.ThreadStack(actx, "no-such-client"); err != proxy.ErrNoSession {
		t.Fatalf("a client without a session: %v", err)
	}
}
