package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
)

// createACL: a reader may read every topic but publish none, and use
// only its own group.
const createACL = `
accounts:
  - accessKey: grpc-admin
    secretKey: ADMIN-secret-1
    admin: true
  - accessKey: reader-app
    secretKey: READER-secret-5
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    groupPerms:
      - ReaderGroup=SUB
`

// consumerSettings is a simple consumer's settings command of group,
// subscribing topics.
func consumerSettings(group string, topics ...string) *apiv2.TelemetryCommand {
	ct := apiv2.ClientType_SIMPLE_CONSUMER
	sub := &apiv2.Subscription{Group: res(group)}
	for _, tp := range topics {
		sub.Subscriptions = append(sub.Subscriptions, &apiv2.SubscriptionEntry{Topic: res(tp),
			Expression: &apiv2.FilterExpression{Type: apiv2.FilterType_TAG, Expression: "*"}})
	}
	return &apiv2.TelemetryCommand{Command: &apiv2.TelemetryCommand_Settings{Settings: &apiv2.Settings{
		ClientType: &ct, PubSub: &apiv2.Settings_Subscription{Subscription: sub}}}}
}

// settingsStatus sends one settings command on a new stream and returns
// the answer's status.
func settingsStatus(t *testing.T, e *env, ctx context.Context, cmd *apiv2.TelemetryCommand) *apiv2.Status {
	t.Helper()
	s, err := e.cli.Telemetry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(cmd); err != nil {
		t.Fatal(err)
	}
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return r.GetStatus()
}

func hasGroup(e *env, name string) bool {
	for _, g := range e.b.ConsoleGroups() {
		if g.Name == name && g.Config {
			return true
		}
	}
	return false
}

// TestGRPCCreationFollowsACL: over gRPC a topic is created only for an
// account with PUB on it, as a first send over remoting: a reader's
// QueryRoute of an unknown topic is TOPIC_NOT_FOUND saying why (and the
// topic is not created), its QueryAssignment creates none either; once
// the admin created it, the reader reads its route. A consumer group is
// created by settings only with SUB on it, even when the settings
// subscribe no topic.
func TestGRPCCreationFollowsACL(t *testing.T) {
	e := aclEnv(t, createACL)
	reader := func() context.Context { return signedAs(t, "reader-app", "READER-secret-5", "reader", "") }
	admin := func() context.Context { return signedAs(t, "grpc-admin", "ADMIN-secret-1", "admin", "") }
	route := func(ctx context.Context, topic string) *apiv2.Status {
		t.Helper()
		r, err := e.cli.QueryRoute(ctx, &apiv2.QueryRouteRequest{Topic: res(topic)})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	for range 2 { // the first query created nothing
		if st := route(reader(), "ReaderMadeTopic"); st.GetCode() != apiv2.Code_TOPIC_NOT_FOUND || !strings.Contains(st.GetMessage(), "PUB") {
			t.Fatalf("reader's route of an unknown topic: %v, want TOPIC_NOT_FOUND naming PUB", st)
		}
	}
	qa, err := e.cli.QueryAssignment(reader(), &apiv2.QueryAssignmentRequest{Topic: res("ReaderMadeTopic2"), Group: res("ReaderGroup")})
	if err != nil || qa.GetStatus().GetCode() != apiv2.Code_TOPIC_NOT_FOUND {
		t.Fatalf("reader's assignment of an unknown topic: %v %v, want TOPIC_NOT_FOUND", qa.GetStatus(), err)
	}
	if st := route(reader(), "ReaderMadeTopic2"); st.GetCode() != apiv2.Code_TOPIC_NOT_FOUND {
		t.Fatalf("the assignment created the topic: %v", st)
	}
	if st := route(admin(), "ReaderMadeTopic"); st.GetCode() != apiv2.Code_OK {
		t.Fatalf("admin's route: %v", st)
	}
	if st := route(reader(), "ReaderMadeTopic"); st.GetCode() != apiv2.Code_OK {
		t.Fatalf("reader's route of an existing topic: %v", st)
	}

	if st := settingsStatus(t, e, reader(), consumerSettings("StolenGroup")); st.GetCode() != apiv2.Code_FORBIDDEN || !strings.Contains(st.GetMessage(), "StolenGroup") {
		t.Fatalf("reader's settings of a denied group, no subscription: %v, want FORBIDDEN naming it", st)
	}
	if hasGroup(e, "StolenGroup") {
		t.Fatal("the denied group was created")
	}
	if st := settingsStatus(t, e, reader(), consumerSettings("ReaderGroup", "ReaderMadeTopic")); st.GetCode() != apiv2.Code_OK {
		t.Fatalf("reader's settings of its group: %v", st)
	}
}

// TestGroupCapRefusesNewGroups: past STRATAMQ_MAX_GROUPS a new group is
// refused with a remark naming the setting, over gRPC (settings) and
// remoting (heartbeat); existing groups go on working.
func TestGroupCapRefusesNewGroups(t *testing.T) {
	const limit = 5
	e := startEnv(t, envOpts{cfg: func(c *broker.Config) { c.MaxGroups = limit }})
	n := len(e.b.ConsoleGroups())
	for i := n; i < limit; i++ {
		if st := settingsStatus(t, e, callCtx(t, "c"), consumerSettings(fmt.Sprintf("CapGroup%d", i))); st.GetCode() != apiv2.Code_OK {
			t.Fatalf("group %d of %d: %v", i+1, limit, st)
		}
	}
	st := settingsStatus(t, e, callCtx(t, "c"), consumerSettings("OneTooMany"))
	if st.GetCode() == apiv2.Code_OK || !strings.Contains(st.GetMessage(), "STRATAMQ_MAX_GROUPS") {
		t.Fatalf("a group past the cap over gRPC: %v, want a refusal naming STRATAMQ_MAX_GROUPS", st)
	}
	if st := settingsStatus(t, e, callCtx(t, "c"), consumerSettings(fmt.Sprintf("CapGroup%d", limit-1))); st.GetCode() != apiv2.Code_OK {
		t.Fatalf("an existing group past the cap: %v", st)
	}
	hb := remoting.HeartbeatData{ClientID: "remoting-client", ConsumerDataSet: []remoting.ConsumerData{{
		GroupName: "OneTooManyRemoting", ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING"}}}
	body, _ := json.Marshal(hb)
	cl := remoting.NewClient(remoting.ClientConfig{})
	defer cl.Close()
	resp, err := cl.Invoke(callCtx(t, "x"), e.b.Addr().String(), remoting.NewRequest(remoting.HeartBeat, nil, body))
	if err != nil || resp.Code != int32(remoting.SystemError) || !strings.Contains(resp.Remark, "STRATAMQ_MAX_GROUPS") {
		t.Fatalf("a group past the cap over remoting: %v %v, want SYSTEM_ERROR naming STRATAMQ_MAX_GROUPS", resp, err)
	}
	if len(e.b.ConsoleGroups()) > limit {
		t.Fatalf("%d groups, the cap is %d", len(e.b.ConsoleGroups()), limit)
	}
}

// TestGRPCUpdateOffsetRefusesUnknownQueues: as UPDATE_CONSUMER_OFFSET over
// remoting, an offset of a topic the broker does not have is
// TOPIC_NOT_FOUND and one of a queue the topic does not have BAD_REQUEST;
// neither is stored. A queue of the topic takes its offset.
func TestGRPCUpdateOffsetRefusesUnknownQueues(t *testing.T) {
	e := startEnv(t, envOpts{})
	remotingSend(t, e.b, "OffTopic", 0, []byte("m"), "")
	update := func(topic string, q int32) *apiv2.Status {
		t.Helper()
		r, err := e.cli.UpdateOffset(callCtx(t, "c"), &apiv2.UpdateOffsetRequest{Group: res("OffGroup"),
			MessageQueue: &apiv2.MessageQueue{Topic: res(topic), Id: q}, Offset: 7})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	committed := func(topic string, q int32) apiv2.Code {
		t.Helper()
		r, err := e.cli.GetOffset(callCtx(t, "c"), &apiv2.GetOffsetRequest{Group: res("OffGroup"),
			MessageQueue: &apiv2.MessageQueue{Topic: res(topic), Id: q}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus().GetCode()
	}
	if st := update("NoSuchTopic", 0); st.GetCode() != apiv2.Code_TOPIC_NOT_FOUND || !strings.Contains(st.GetMessage(), "NoSuchTopic") {
		t.Errorf("offset of an unknown topic: %v, want TOPIC_NOT_FOUND naming it", st)
	}
	if st := update("OffTopic", 999); st.GetCode() != apiv2.Code_BAD_REQUEST || !strings.Contains(st.GetMessage(), "999") {
		t.Errorf("offset of an unknown queue: %v, want BAD_REQUEST naming it", st)
	}
	if c := committed("NoSuchTopic", 0); c != apiv2.Code_OFFSET_NOT_FOUND {
		t.Errorf("the unknown topic's offset was stored: %v", c)
	}
	if c := committed("OffTopic", 999); c != apiv2.Code_OFFSET_NOT_FOUND {
		t.Errorf("the unknown queue's offset was stored: %v", c)
	}
	if st := update("OffTopic", 0); st.GetCode() != apiv2.Code_OK {
		t.Fatalf("offset of queue 0: %v", st)
	}
	if c := committed("OffTopic", 0); c != apiv2.Code_OK {
		t.Fatalf("queue 0's offset: %v", c)
	}
}
