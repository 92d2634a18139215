package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// TestWALReturningDataDirLocalAcks: as TestWALReturningDataDirTail, a
// broker dies with records stored past the end of the bucket WAL (its
// data objects held back), another machine takes over from the bucket and
// writes past those offsets, and the first comes back on its disk. Here
// its tail holds a record a client got an OK for from this disk alone,
// which the record-by-record rule (bucketOnlyOf) takes for a bucket-durable
// send never answered:
//   - a CONSUMER_SEND_MSG_BACK of a bucket-durable topic's message,
//     answered SUCCESS once the retry is in the local log (its record is
//     judged by RETRY_TOPIC, the bucket-durable topic);
//   - a local topic's send whose topic became bucket-durable after it was
//     answered (the topic table read is the last run's);
//   - a send to a topic without the attribute, answered with
//     STRATAMQ_DURABILITY=local, the broker coming back with
//     STRATAMQ_DURABILITY=bucket;
//   - a send to a topic with durability=local on a broker whose default is
//     bucket.
//
// Whenever that OK was given, the returning broker must not set the tail
// aside and start: it refuses, naming the range.
func TestWALReturningDataDirLocalAcks(t *testing.T) {
	// Serial: a send-back held by the WAL gate stays in flight past the
	// kill; beside the parallel tests under -race (CI), the broker that
	// took over then missed its shutdown deadline once.
	for _, tc := range []struct {
		name       string
		durability string // the first run's STRATAMQ_DURABILITY
		returnWith string // the returning run's
		setup      func(t *testing.T, cl *remoting.Client, addr string)
		inTail     func(t *testing.T, b *Broker, cl *remoting.Client, addr string) bool // reports whether an OK was given
		killB      bool                                                                 // the machine that took over is killed, not stopped (its log is not all uploaded)
		open       string                                                               // a known loss not fixed yet: skipped, naming it
	}{
		{name: "a send-back answered SUCCESS", durability: DurabilityLocal, returnWith: DurabilityLocal,
			inTail: func(t *testing.T, b *Broker, cl *remoting.Client, addr string) bool {
				phys, _, _, ok, err := b.store.QueueEntry("Rt", 0, 0)
				if err != nil || !ok {
					t.Fatalf("the acknowledged message's entry: %v %v", ok, err)
				}
				h := remoting.ConsumerSendMsgBackRequestHeader{Offset: phys, Group: "G", DelayLevel: 1, OriginTopic: "Rt"}
				ans := make(chan *remoting.Command, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					r, err := cl.Invoke(ctx, addr, remoting.NewRequest(remoting.ConsumerSendMsgBack, h.Encode(), nil))
					if err == nil {
						ans <- r
					}
				}()
				select {
				case r := <-ans:
					return r.Code == int32(remoting.Success)
				case <-time.After(3 * time.Second): // not answered while the WAL is held
					return false
				}
			}},
		{name: "a local topic turned bucket-durable after its send was answered", durability: DurabilityLocal, returnWith: DurabilityLocal,
			inTail: func(t *testing.T, b *Broker, cl *remoting.Client, addr string) bool {
				ok := invoke(t, cl, addr, sendReq("Loc", 0, []byte("local-ack"), "")).Code == int32(remoting.Success)
				create := remoting.NewRequest(remoting.UpdateAndCreateTopic, (&remoting.CreateTopicRequestHeader{Topic: "Loc",
					ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, Attributes: "+durability=bucket"}).Encode(), nil)
				if r := invoke(t, cl, addr, create); r.Code != int32(remoting.Success) {
					t.Fatalf("make Loc bucket-durable: %d %s", r.Code, r.Remark)
				}
				return ok
			}},
		{name: "STRATAMQ_DURABILITY local, then bucket", durability: DurabilityLocal, returnWith: DurabilityBucket,
			inTail: func(t *testing.T, b *Broker, cl *remoting.Client, addr string) bool {
				return invoke(t, cl, addr, sendReq("Loc", 0, []byte("local-ack"), "")).Code == int32(remoting.Success)
			}},
		{name: "a durability=local topic on a bucket-default broker", durability: DurabilityBucket, returnWith: DurabilityBucket, killB: true,
			setup: func(t *testing.T, cl *remoting.Client, addr string) {
				create := remoting.NewRequest(remoting.UpdateAndCreateTopic, (&remoting.CreateTopicRequestHeader{Topic: "Loc",
					ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, Attributes: "+durability=local"}).Encode(), nil)
				if r := invoke(t, cl, addr, create); r.Code != int32(remoting.Success) {
					t.Fatalf("create a local topic: %d %s", r.Code, r.Remark)
				}
			},
			inTail: func(t *testing.T, b *Broker, cl *remoting.Client, addr string) bool {
				return invoke(t, cl, addr, sendReq("Loc", 0, []byte("local-ack"), "")).Code == int32(remoting.Success)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.open != "" {
				t.Skip("open: " + tc.open)
			}
			g := newWalGate(tier.NewMem())
			cfg := walConfig(t)
			cfg.Durability = tc.durability
			cfg.WALAckTimeout = time.Hour
			a := startLossNode(t, cfg, vfs.NewMem(), g, "boot-a")
			cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
			defer cl.Close()
			addr := a.n.Broker().Addr().String()
			create := remoting.NewRequest(remoting.UpdateAndCreateTopic, (&remoting.CreateTopicRequestHeader{Topic: "Rt",
				ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, Attributes: "+durability=bucket"}).Encode(), nil)
			if r := invoke(t, cl, addr, create); r.Code != int32(remoting.Success) {
				t.Fatalf("create a bucket-durable topic: %d %s", r.Code, r.Remark)
			}
			if tc.setup != nil {
				tc.setup(t, cl, addr)
			}
			acked := []string{"acked-a"}
			if r := invoke(t, cl, addr, sendReq("Rt", 0, []byte(acked[0]), "")); r.Code != int32(remoting.Success) {
				t.Fatalf("send: %d %s", r.Code, r.Remark)
			}
			// The WAL's data objects are held back: what is stored now is
			// past the WAL's end.
			g.close()
			ma := a.n.Broker()
			okGiven := tc.inTail(t, ma, cl, addr)
			t.Logf("an OK given from this disk alone: %v", okGiven)
			expires := ma.dur.Lease().ExpiresAt()
			img := a.kill(false)
			select {
			case <-a.done:
				a.dead = true
			case <-time.After(30 * time.Second):
				t.Fatal("the killed broker did not stop")
			}
			g.release()
			waitCond(t, 20*time.Second, "the dead broker's lease expired", func() bool { return time.Now().After(expires.Add(100 * time.Millisecond)) })

			// Another machine takes over from the bucket, writes past the
			// first one's tail, and stops.
			cfgB := cfg
			cfgB.DataDir = t.TempDir()
			var b *Broker
			var clB *remoting.Client
			var stopB func()
			if tc.killB {
				nb := startLossNode(t, cfgB, vfs.NewMem(), g, "boot-b")
				b = nb.n.Broker()
				clB = remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
				defer clB.Close()
				stopB = func() {
					expiresB := b.dur.Lease().ExpiresAt()
					nb.kill(false)
					select {
					case <-nb.done:
						nb.dead = true
					case <-time.After(30 * time.Second):
						t.Fatal("the killed second machine did not stop")
					}
					waitCond(t, 20*time.Second, "the second machine's lease expired", func() bool { return time.Now().After(expiresB.Add(100 * time.Millisecond)) })
				}
			} else {
				b, clB, stopB = runBroker(t, cfgB, Deps{Logger: discardLogger(), Bucket: g})
			}
			readBack(t, b, clB, "Rt", bytesOf(acked))
			tailEnd := ma.store.MaxPhysOffset()
			for i := 0; b.store.MaxPhysOffset() <= tailEnd; i++ {
				body := "taken-over-" + strings.Repeat("x", 100) + string(rune('a'+i))
				if r := invoke(t, clB, b.Addr().String(), sendReq("Rt", 0, []byte(body), "")); r.Code != int32(remoting.Success) {
					t.Fatalf("send to the second machine: %d %s", r.Code, r.Remark)
				}
			}
			stopB()

			// The first machine comes back on its disk.
			cfgA := restartConfig(t, cfg)
			cfgA.Durability = tc.returnWith
			a2, err := New(cfgA, Deps{FS: img, Bucket: g, Logger: discardLogger(), BootID: "boot-a"})
			if a2 != nil {
				_ = a2.Close()
			}
			t.Logf("the returning start: %v", err)
			refused := err != nil && strings.Contains(err.Error(), "holds offsets the bucket lacks")
			if okGiven && !refused {
				t.Fatalf("a returning data dir whose tail holds a record answered OK from its disk alone started (set aside): %v", err)
			}
			if !okGiven && err != nil {
				t.Fatalf("nothing in the tail was answered, yet the start failed: %v", err)
			}
		})
	}
}
