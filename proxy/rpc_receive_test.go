package proxy_test

import (
	"io"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stratamq/stratamq/proxy/apiv2"
)

// receiveAll runs a ReceiveMessage and returns its frames.
func receiveAll(t *testing.T, e *env, req *apiv2.ReceiveMessageRequest) []*apiv2.ReceiveMessageResponse {
	t.Helper()
	st, err := e.cli.ReceiveMessage(callCtx(t, "c1"), req)
	if err != nil {
		t.Fatal(err)
	}
	var out []*apiv2.ReceiveMessageResponse
	for {
		r, err := st.Recv()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
}

// TestGRPCConsumerRPCs: the consumer RPCs' frames and status codes as the
// clients act on them: MESSAGE_NOT_FOUND for an empty receive, then the
// delivery timestamp, the messages (receipt handle, attempt, invisible
// duration) and OK; INVALID_RECEIPT_HANDLE for a forged or replaced
// handle; ILLEGAL_INVISIBLE_TIME; one assignment (queue -1) per broker.
func TestGRPCConsumerRPCs(t *testing.T) {
	e := startEnv(t, envOpts{})
	group, topic := &apiv2.Resource{Name: "GR"}, &apiv2.Resource{Name: "RpcT"}
	recv := &apiv2.ReceiveMessageRequest{Group: group, MessageQueue: &apiv2.MessageQueue{Topic: topic, Id: 0},
		FilterExpression: &apiv2.FilterExpression{Type: apiv2.FilterType_TAG, Expression: "*"}, BatchSize: 8,
		InvisibleDuration: durationpb.New(30 * time.Second), LongPollingTimeout: durationpb.New(0)}
	// The topic exists once a message went to it.
	remotingSend(t, e.b, "RpcT", 0, []byte("first"), "")
	remotingSend(t, e.b, "RpcT", 1, []byte("second"), "")
	frames := receiveAll(t, e, recv)
	if len(frames) != 4 || frames[0].GetDeliveryTimestamp() == nil || frames[3].GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("frames %v", frames)
	}
	var handles []string
	for _, f := range frames[1:3] {
		m := f.GetMessage()
		sp := m.GetSystemProperties()
		if sp.GetReceiptHandle() == "" || sp.GetDeliveryAttempt() != 1 || sp.GetInvisibleDuration().AsDuration() != 30*time.Second {
			t.Fatalf("message %v", sp)
		}
		handles = append(handles, sp.GetReceiptHandle())
	}
	if f := receiveAll(t, e, recv); len(f) != 1 || f[0].GetStatus().GetCode() != apiv2.Code_MESSAGE_NOT_FOUND {
		t.Fatalf("empty receive: %v", f)
	}
	// A long poll ends with MESSAGE_NOT_FOUND at its timeout.
	poll := proto.Clone(recv).(*apiv2.ReceiveMessageRequest)
	poll.LongPollingTimeout = durationpb.New(300 * time.Millisecond)
	start := time.Now()
	if f := receiveAll(t, e, poll); len(f) != 1 || f[0].GetStatus().GetCode() != apiv2.Code_MESSAGE_NOT_FOUND || time.Since(start) > 5*time.Second {
		t.Fatalf("long poll: %v after %s", f, time.Since(start))
	}
	bad := proto.Clone(recv).(*apiv2.ReceiveMessageRequest)
	bad.InvisibleDuration = durationpb.New(-time.Second)
	if f := receiveAll(t, e, bad); len(f) != 1 || f[0].GetStatus().GetCode() != apiv2.Code_ILLEGAL_INVISIBLE_TIME {
		t.Fatalf("negative invisible duration: %v", f)
	}

	ctx := callCtx(t, "c1")
	ch, err := e.cli.ChangeInvisibleDuration(ctx, &apiv2.ChangeInvisibleDurationRequest{Group: group, Topic: topic,
		ReceiptHandle: handles[0], InvisibleDuration: durationpb.New(time.Minute)})
	if err != nil || ch.GetStatus().GetCode() != apiv2.Code_OK || ch.GetReceiptHandle() == handles[0] {
		t.Fatalf("change invisible duration: %v %v", ch, err)
	}
	ack, err := e.cli.AckMessage(ctx, &apiv2.AckMessageRequest{Group: group, Topic: topic, Entries: []*apiv2.AckMessageEntry{
		{MessageId: "a", ReceiptHandle: handles[0]}, {MessageId: "b", ReceiptHandle: "forged"},
		{MessageId: "c", ReceiptHandle: ch.GetReceiptHandle()}, {MessageId: "d", ReceiptHandle: handles[1]}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []apiv2.Code{apiv2.Code_INVALID_RECEIPT_HANDLE, apiv2.Code_INVALID_RECEIPT_HANDLE, apiv2.Code_OK, apiv2.Code_OK}
	for i, en := range ack.GetEntries() {
		if en.GetStatus().GetCode() != want[i] {
			t.Fatalf("ack entry %d: %v, want %v", i, en.GetStatus(), want[i])
		}
	}
	if ack.GetStatus().GetCode() != apiv2.Code_INVALID_RECEIPT_HANDLE || len(ack.GetEntries()) != 4 {
		t.Fatalf("ack status %v", ack.GetStatus())
	}
	if n := e.b.PopInflight("GR"); n != 0 {
		t.Fatalf("%d in flight after the acks", n)
	}
	fw, err := e.cli.ForwardMessageToDeadLetterQueue(ctx, &apiv2.ForwardMessageToDeadLetterQueueRequest{Group: group, Topic: topic,
		ReceiptHandle: handles[1]})
	if err != nil || fw.GetStatus().GetCode() != apiv2.Code_INVALID_RECEIPT_HANDLE {
		t.Fatalf("forward an acked message: %v %v", fw, err)
	}
	qa, err := e.cli.QueryAssignment(ctx, &apiv2.QueryAssignmentRequest{Group: group, Topic: topic})
	if err != nil || qa.GetStatus().GetCode() != apiv2.Code_OK || len(qa.GetAssignments()) != 1 || qa.GetAssignments()[0].GetMessageQueue().GetId() != -1 {
		t.Fatalf("query assignment: %v %v", qa, err)
	}
	for q := int32(0); q < 2; q++ {
		off, err := e.cli.GetOffset(ctx, &apiv2.GetOffsetRequest{Group: group, MessageQueue: &apiv2.MessageQueue{Topic: topic, Id: q}})
		if err != nil || off.GetStatus().GetCode() != apiv2.Code_OK || off.GetOffset() != 1 {
			t.Fatalf("queue %d: get offset %v %v", q, off, err)
		}
	}
}
