package proxy_test

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/proxy/apiv2"
)

// autoRenewInvisible is the tests' invisible time of auto_renew receives:
// short, so a deadline passes within a test, and long enough that a
// renewal due with a third of it left (1 s) is not missed on a loaded CI
// machine.
const autoRenewInvisible = 3 * time.Second

// autoRenewReceive is a PushConsumer's receive: auto_renew, no invisible
// duration, waiting up to wait.
func autoRenewReceive(group, topic string, batch int32, wait time.Duration) *apiv2.ReceiveMessageRequest {
	return &apiv2.ReceiveMessageRequest{Group: res(group), MessageQueue: &apiv2.MessageQueue{Topic: res(topic), Id: -1},
		FilterExpression: &apiv2.FilterExpression{Type: apiv2.FilterType_TAG, Expression: "*"}, BatchSize: batch,
		AutoRenew: true, LongPollingTimeout: durationpb.New(wait)}
}

// receivedHandles are the receipt handles of a receive's messages, and
// its status.
func receivedHandles(frames []*apiv2.ReceiveMessageResponse) (handles []string, attempts []int32, code apiv2.Code) {
	for _, f := range frames {
		if m := f.GetMessage(); m != nil {
			handles = append(handles, m.GetSystemProperties().GetReceiptHandle())
			attempts = append(attempts, m.GetSystemProperties().GetDeliveryAttempt())
		}
		if st := f.GetStatus(); st != nil {
			code = st.GetCode()
		}
	}
	return handles, attempts, code
}

// TestGRPCAutoRenewKeepsHandle: an auto_renew receive's messages stay
// invisible past their first deadline while the client's Telemetry
// session is open (a long poll spanning two invisible times gets
// nothing), and the client's ORIGINAL handles still work: one is acked,
// the other changed (its new handle then acked).
func TestGRPCAutoRenewKeepsHandle(t *testing.T) {
	e := startEnv(t, envOpts{proxy: func(c *proxy.Config) { c.AutoRenewInvisible = autoRenewInvisible }})
	if _, err := openTelemetry(callCtx(t, "c1"), e.cli); err != nil {
		t.Fatal(err)
	}
	remotingSend(t, e.b, "RenewT", 0, []byte("one"), "")
	remotingSend(t, e.b, "RenewT", 1, []byte("two"), "")
	handles, attempts, code := receivedHandles(receiveAll(t, e, autoRenewReceive("GRenew", "RenewT", 8, 0)))
	if code != apiv2.Code_OK || len(handles) != 2 || attempts[0] != 1 || attempts[1] != 1 {
		t.Fatalf("receive: %v %v %v", code, handles, attempts)
	}
	start := time.Now()
	// A long poll over more than two invisible times: an expired message
	// would be delivered to it.
	again, _, code := receivedHandles(receiveAll(t, e, autoRenewReceive("GRenew", "RenewT", 8, 3*autoRenewInvisible)))
	if code != apiv2.Code_MESSAGE_NOT_FOUND || len(again) != 0 {
		t.Fatalf("the renewed messages were delivered again: %v %v", code, again)
	}
	if el := time.Since(start); el < 2*autoRenewInvisible {
		t.Fatalf("the long poll ended after %s, before two invisible times", el)
	}
	ctx := callCtx(t, "c1")
	ack, err := e.cli.AckMessage(ctx, &apiv2.AckMessageRequest{Group: res("GRenew"), Topic: res("RenewT"),
		Entries: []*apiv2.AckMessageEntry{{MessageId: "a", ReceiptHandle: handles[0]}}})
	if err != nil || ack.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("ack with the original handle after renewals: %v %v", ack, err)
	}
	ch, err := e.cli.ChangeInvisibleDuration(ctx, &apiv2.ChangeInvisibleDurationRequest{Group: res("GRenew"), Topic: res("RenewT"),
		ReceiptHandle: handles[1], InvisibleDuration: durationpb.New(time.Minute)})
	if err != nil || ch.GetStatus().GetCode() != apiv2.Code_OK || ch.GetReceiptHandle() == "" {
		t.Fatalf("change with the original handle after renewals: %v %v", ch, err)
	}
	ack, err = e.cli.AckMessage(ctx, &apiv2.AckMessageRequest{Group: res("GRenew"), Topic: res("RenewT"),
		Entries: []*apiv2.AckMessageEntry{{MessageId: "b", ReceiptHandle: ch.GetReceiptHandle()}}})
	if err != nil || ack.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("ack with the changed handle: %v %v", ack, err)
	}
	if n := e.b.PopInflight("GRenew"); n != 0 {
		t.Fatalf("%d in flight after the acks", n)
	}
}

// TestGRPCAutoRenewStopsWithSession: once the client's Telemetry stream
// ends, its handles are renewed no more: the message expires and is
// delivered again (attempt 2), and the original handle is refused.
func TestGRPCAutoRenewStopsWithSession(t *testing.T) {
	e := startEnv(t, envOpts{proxy: func(c *proxy.Config) { c.AutoRenewInvisible = autoRenewInvisible }})
	tctx, cancel := context.WithCancel(callCtx(t, "c1"))
	defer cancel()
	tel, err := openTelemetry(tctx, e.cli)
	if err != nil {
		t.Fatal(err)
	}
	remotingSend(t, e.b, "RenewT", 0, []byte("one"), "")
	handles, _, code := receivedHandles(receiveAll(t, e, autoRenewReceive("GRenew", "RenewT", 8, 0)))
	if code != apiv2.Code_OK || len(handles) != 1 {
		t.Fatalf("receive: %v %v", code, handles)
	}
	// End the session; the server has dropped it once the stream ends.
	if err := tel.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := tel.Recv(); err != nil {
			if err != io.EOF {
				t.Fatalf("telemetry stream end: %v", err)
			}
			break
		}
	}
	again, attempts, code := receivedHandles(receiveAll(t, e, autoRenewReceive("GRenew", "RenewT", 8, 5*autoRenewInvisible)))
	if code != apiv2.Code_OK || len(again) != 1 || attempts[0] != 2 {
		t.Fatalf("after the session ended: %v %v %v, want the message again (attempt 2)", code, again, attempts)
	}
	ack, err := e.cli.AckMessage(callCtx(t, "c1"), &apiv2.AckMessageRequest{Group: res("GRenew"), Topic: res("RenewT"),
		Entries: []*apiv2.AckMessageEntry{{MessageId: "a", ReceiptHandle: handles[0]}}})
	if err != nil || ack.GetStatus().GetCode() != apiv2.Code_INVALID_RECEIPT_HANDLE {
		t.Fatalf("ack of the expired original handle: %v %v", ack, err)
	}
}

// TestGRPCAutoRenewSurvivesForeignAck: an ack of an auto_renew handle
// under another group (refused: the handle is not of that group) does not
// stop the handle's renewal: the message stays invisible past two
// invisible times, and its own group acks it with the original handle.
func TestGRPCAutoRenewSurvivesForeignAck(t *testing.T) {
	e := startEnv(t, envOpts{proxy: func(c *proxy.Config) { c.AutoRenewInvisible = autoRenewInvisible }})
	if _, err := openTelemetry(callCtx(t, "c1"), e.cli); err != nil {
		t.Fatal(err)
	}
	remotingSend(t, e.b, "RenewT", 0, []byte("one"), "")
	handles, _, code := receivedHandles(receiveAll(t, e, autoRenewReceive("GRenew", "RenewT", 8, 0)))
	if code != apiv2.Code_OK || len(handles) != 1 {
		t.Fatalf("receive: %v %v", code, handles)
	}
	ack, err := e.cli.AckMessage(callCtx(t, "intruder"), &apiv2.AckMessageRequest{Group: res("GOther"), Topic: res("RenewT"),
		Entries: []*apiv2.AckMessageEntry{{MessageId: "a", ReceiptHandle: handles[0]}}})
	if err != nil || ack.GetStatus().GetCode() == apiv2.Code_OK {
		t.Fatalf("ack under another group: %v %v, want a refusal", ack.GetStatus(), err)
	}
	again, _, code := receivedHandles(receiveAll(t, e, autoRenewReceive("GRenew", "RenewT", 8, 3*autoRenewInvisible)))
	if code != apiv2.Code_MESSAGE_NOT_FOUND || len(again) != 0 {
		t.Fatalf("after another group's ack the message was delivered again: %v %v (its renewal stopped)", code, again)
	}
	ack, err = e.cli.AckMessage(callCtx(t, "c1"), &apiv2.AckMessageRequest{Group: res("GRenew"), Topic: res("RenewT"),
		Entries: []*apiv2.AckMessageEntry{{MessageId: "a", ReceiptHandle: handles[0]}}})
	if err != nil || ack.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("ack by its own group: %v %v", ack.GetStatus(), err)
	}
}
