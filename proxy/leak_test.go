package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
)

// leakACL: a snooping account may use every topic but one.
const leakACL = `
accounts:
  - accessKey: grpc-admin
    secretKey: ADMIN-secret-1
    admin: true
  - accessKey: snoop-app
    secretKey: SNOOP-secret-6
    defaultTopicPerm: PUB|SUB
    topicPerms:
      - SecretTopicXYZ=DENY
`

// TestRefusalsNameNothingAtChosenOffsets: END_TRANSACTION and
// VIEW_MESSAGE_BY_ID (remoting) and EndTransaction (gRPC) read the record
// at an offset the caller chose; their refusals to an account without
// permission on its topic name neither that topic nor the half's producer
// group (which the 5.x clients set to the topic).
func TestRefusalsNameNothingAtChosenOffsets(t *testing.T) {
	e := aclEnv(t, leakACL)
	const secret = "SecretTopicXYZ"
	admin := func() context.Context { return signedAs(t, "grpc-admin", "ADMIN-secret-1", "admin", "") }
	snoop := func() context.Context { return signedAs(t, "snoop-app", "SNOOP-secret-6", "snoop", "") }
	send := func(m *apiv2.Message) *apiv2.SendResultEntry {
		t.Helper()
		r, err := e.cli.SendMessage(admin(), &apiv2.SendMessageRequest{Messages: []*apiv2.Message{m}})
		if err != nil || r.GetStatus().GetCode() != apiv2.Code_OK {
			t.Fatalf("send: %v %v", r, err)
		}
		return r.Entries[0]
	}
	send(textMsg(secret, "01PLAIN", "plain"))
	half := textMsg(secret, "01HALF", "half")
	half.SystemProperties.MessageType = apiv2.MessageType_TRANSACTION
	txID := send(half).GetTransactionId()
	halfPhys, err := strconv.ParseInt(txID[:16], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	var plainPhys int64 = -1
	for q := int32(0); q < 16 && plainPhys < 0; q++ {
		if e.b.Store().MaxQueueOffset(secret, q) == 0 {
			continue
		}
		plainPhys = queueBodies(t, e.b, secret, q)[0].PhysOffset
	}
	if plainPhys < 0 {
		t.Fatal("the plain message is not stored")
	}

	check := func(what, msg string, refused bool) {
		t.Helper()
		if !refused {
			t.Errorf("%s: not refused (%q)", what, msg)
		}
		if strings.Contains(msg, secret) {
			t.Errorf("%s: the refusal names the topic at the offset: %q", what, msg)
		}
	}
	remotingCall := func(req *remoting.Command) *remoting.Command {
		t.Helper()
		acl.Credentials{AccessKey: "snoop-app", SecretKey: "SNOOP-secret-6"}.Sign(req)
		cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
		defer cl.Close()
		resp, err := cl.Invoke(callCtx(t, "x"), e.b.Addr().String(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, at := range []struct {
		name string
		phys int64
	}{{"a plain message", plainPhys}, {"a half message", halfPhys}} {
		end := remoting.EndTransactionRequestHeader{ProducerGroup: "snoop-pg", CommitLogOffset: at.phys,
			CommitOrRollback: 12, MsgID: "x"}
		resp := remotingCall(remoting.NewRequest(remoting.EndTransaction, end.Encode(), nil))
		check("remoting END_TRANSACTION at "+at.name, resp.Remark, resp.Code != int32(remoting.Success))
		view := remoting.ViewMessageRequestHeader{Offset: at.phys}
		resp = remotingCall(remoting.NewRequest(remoting.ViewMessageByID, view.Encode(), nil))
		check("VIEW_MESSAGE_BY_ID at "+at.name, resp.Remark, resp.Code != int32(remoting.Success))
		for _, topic := range []string{"SnoopTopic", secret} {
			r, err := e.cli.EndTransaction(snoop(), &apiv2.EndTransactionRequest{Topic: res(topic),
				TransactionId: fmt.Sprintf("%016X%016X", at.phys, 0), Resolution: apiv2.TransactionResolution_ROLLBACK})
			if err != nil {
				t.Fatal(err)
			}
			msg := r.GetStatus().GetMessage()
			if topic == secret { // the caller named it: its own word may come back
				msg = strings.ReplaceAll(msg, "topic "+secret, "")
			}
			check("gRPC EndTransaction at "+at.name+" naming "+topic, msg, r.GetStatus().GetCode() != apiv2.Code_OK)
		}
	}
}
