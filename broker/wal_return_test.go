package broker

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// TestWALReturningDataDirTail: a broker (STRATAMQ_DURABILITY=local, one
// topic with durability=bucket) dies with records stored past the end of
// the bucket WAL (its WAL objects held back); another machine takes over
// from the bucket, writes past those offsets (its WAL objects then cover
// them with its own records) and stops; the first machine comes back on
// its disk.
// When every record in its tail past the WAL's end is a bucket-durable
// send (never acknowledged), the tail is set aside and the broker restores
// from the bucket (it used to refuse to start for ever, as if the tail
// might hold acknowledged messages). When the tail holds a local topic's
// acknowledged message, the start is still refused, naming the range (it
// used to be set aside silently once the other machine's WAL objects
// covered its offsets).
func TestWALReturningDataDirTail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		localInTail bool
		noneShipped bool // the WAL never held a byte of this run: the next broker resumes past a restore gap
	}{
		{"bucket-durable sends only: set aside", false, false},
		{"a local ack in the tail: refused", true, false},
		{"nothing shipped, the next broker resumed past a gap: set aside", false, true},
		{"nothing shipped, a local ack in the gap: refused", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newWalGate(tier.NewMem())
			cfg := walConfig(t)
			cfg.Durability = DurabilityLocal
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
			var acked []string
			if tc.noneShipped {
				g.close()
			}
			for i := range 5 {
				if tc.noneShipped {
					break
				}
				body := "acked-" + string(rune('a'+i))
				if r := invoke(t, cl, addr, sendReq("Rt", 0, []byte(body), "")); r.Code != int32(remoting.Success) {
					t.Fatalf("send %d: %d %s", i, r.Code, r.Remark)
				}
				acked = append(acked, body)
			}
			// The WAL's data objects are held back: what is sent now is
			// stored past the WAL's end and not answered.
			g.close()
			ma := a.n.Broker()
			go func() { // answered only once the WAL holds it: never, here
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, _ = cl.Invoke(ctx, addr, sendReq("Rt", 0, []byte("never-acked"), ""))
			}()
			waitCond(t, 10*time.Second, "the unanswered send stored", func() bool { return ma.store.MaxQueueOffset("Rt", 0) == int64(len(acked)+1) })
			if tc.localInTail {
				if r := invoke(t, cl, addr, sendReq("Loc", 0, []byte("local-ack"), "")); r.Code != int32(remoting.Success) {
					t.Fatalf("local send: %d %s", r.Code, r.Remark)
				}
			}
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

			// Another machine takes over from the bucket, and stops.
			cfgB := cfg
			cfgB.DataDir = t.TempDir()
			b, clB, stopB := runBroker(t, cfgB, Deps{Logger: discardLogger(), Bucket: g})
			readBack(t, b, clB, "Rt", bytesOf(acked))
			// Its WAL objects then cover the offsets of the first
			// machine's tail with its own records.
			tailEnd := ma.store.MaxPhysOffset()
			for i := 0; b.store.MaxPhysOffset() <= tailEnd; i++ {
				body := "taken-over-" + strings.Repeat("x", 100) + string(rune('a'+i))
				if r := invoke(t, clB, b.Addr().String(), sendReq("Rt", 0, []byte(body), "")); r.Code != int32(remoting.Success) {
					t.Fatalf("send to the second machine: %d %s", r.Code, r.Remark)
				}
				acked = append(acked, body)
			}
			stopB()

			// The first machine comes back on its disk.
			cfgA := restartConfig(t, cfg)
			if tc.localInTail {
				_, err := New(cfgA, Deps{FS: img, Bucket: g, Logger: discardLogger(), BootID: "boot-a"})
				if err == nil || !strings.Contains(err.Error(), "holds offsets the bucket lacks") {
					t.Fatalf("a returning data dir whose tail holds a local topic's acknowledged message started: %v", err)
				}
				return
			}
			a2, cl2, _ := runBroker(t, cfgA, Deps{FS: img, Bucket: g, Logger: discardLogger(), BootID: "boot-a"})
			readBack(t, a2, cl2, "Rt", bytesOf(acked))
			r := invoke(t, cl2, a2.Addr().String(), sendReq("Rt", 0, []byte("after"), ""))
			if off, _ := strconv.Atoi(r.ExtFields["queueOffset"]); r.Code != int32(remoting.Success) || off < len(acked) {
				t.Fatalf("send after the return: %d %s at queue offset %s, want at least %d", r.Code, r.Remark, r.ExtFields["queueOffset"], len(acked))
			}
		})
	}
}

func bytesOf(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}
