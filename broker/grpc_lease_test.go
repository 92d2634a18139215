package broker

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stratamq/stratamq/ha/hatest"
	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/tier"
)

// TestGRPCSyncMasterSendChecksLeaseAfterSlaveAck: a sync_master's gRPC
// send (through the real endpoint, package proxy) whose slave ack comes
// after the bucket lease lapsed is refused, not answered OK: the lease is
// checked right before the answer, after the slave's ack, as the remoting
// path does. Once the lease is renewed, a send is answered OK again.
func TestGRPCSyncMasterSendChecksLeaseAfterSlaveAck(t *testing.T) {
	t.Parallel()
	haAddr := haTestAddr(t)
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 8 << 20,
		Role: RoleSyncMaster, HAListen: haAddr, HATimeout: time.Minute,
		LeaseTTL: 1500 * time.Millisecond, CheckpointInterval: 200 * time.Millisecond}
	m, _, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: tier.NewMem()})
	srv, err := proxy.New(proxy.Config{Addr: "127.0.0.1:0", Logger: discardLogger(), Backend: func() proxy.Backend { return m }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		srv.Stop(5 * time.Second)
		cancel()
		<-served
	})
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cli := apiv2.NewMessagingServiceClient(conn)
	send := func(id string) (*apiv2.SendMessageResponse, error) {
		call, done := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "lease"), time.Minute)
		defer done()
		msg := &apiv2.Message{Topic: &apiv2.Resource{Name: "GRPCLease"}, Body: []byte("body " + id),
			SystemProperties: &apiv2.SystemProperties{MessageId: id, MessageType: apiv2.MessageType_NORMAL,
				BornTimestamp: timestamppb.Now(), QueueId: 0}}
		return cli.SendMessage(call, &apiv2.SendMessageRequest{Messages: []*apiv2.Message{msg}})
	}
	ack := func(sl *hatest.Slave) {
		t.Helper()
		if err := sl.ReadUntil(m.Store().MaxPhysOffset(), 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := sl.AckRead(); err != nil {
			t.Fatal(err)
		}
	}
	sl := toldSlave(t, m, haAddr)

	type answer struct {
		resp *apiv2.SendMessageResponse
		err  error
	}
	// A first send, acknowledged with the lease held: OK (the topic is
	// created and checkpointed on the way).
	first := make(chan answer, 1)
	go func() { r, err := send("01C0A0"); first <- answer{r, err} }()
	waitCond(t, 30*time.Second, "the first send stored and sent to the slave", func() bool {
		st := m.repl.Listener().Slaves()
		return m.Store().MaxPhysOffset() > 0 && len(st) == 1 && st[0].Sent == m.Store().MaxPhysOffset()
	})
	ack(sl)
	if a := <-first; a.err != nil || a.resp.GetStatus().GetCode() != apiv2.Code_OK {
		t.Fatalf("a send acknowledged with the lease held: %v %v", a.resp.GetStatus(), a.err)
	}

	// The second send is stored and waits for the slave; meanwhile the
	// lease lapses (renewals stopped); then the slave acknowledges.
	before := m.Store().MaxPhysOffset()
	second := make(chan answer, 1)
	go func() { r, err := send("01C0A1"); second <- answer{r, err} }()
	waitCond(t, 30*time.Second, "the second send stored and sent to the slave", func() bool {
		st := m.repl.Listener().Slaves()
		return m.Store().MaxPhysOffset() > before && len(st) == 1 && st[0].Sent == m.Store().MaxPhysOffset()
	})
	release := m.dur.HoldRenewals() // no more renewals
	locked := true
	defer func() {
		if locked {
			release()
		}
	}()
	waitCond(t, 10*time.Second, "the lease lapsed", func() bool { _, err := m.dur.Writable(); return err != nil })
	select {
	case a := <-second:
		t.Fatalf("the send was answered (%v %v) before its slave acknowledged it", a.resp.GetStatus(), a.err)
	default:
	}
	ack(sl)
	a := <-second
	if a.err != nil {
		t.Fatal(a.err)
	}
	if code := a.resp.GetStatus().GetCode(); code == apiv2.Code_OK {
		t.Fatalf("a sync_master send whose slave ack came after the lease lapsed was answered OK: %v", a.resp.GetStatus())
	}
	if e := a.resp.GetEntries(); len(e) != 1 || e[0].GetStatus().GetCode() == apiv2.Code_OK {
		t.Fatalf("entries %v, want one refused", e)
	}
	locked = false
	release()
	waitCond(t, 30*time.Second, "the lease renewed", func() bool { _, err := m.dur.Writable(); return err == nil })
}
