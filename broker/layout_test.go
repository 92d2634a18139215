package broker

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// TestBrokerSingleQueueReplayReadsItsOwnBytes (issue 12 item 4): with
// STRATAMQ_TIER_LAYOUT=queue (the default) each uploaded segment stores
// each queue's records together, so a consumer replaying one queue of 8
// from the bucket (a broker restored on an empty disk) fetches at most
// twice the bytes it is served, although the producer interleaved the
// queues message by message; with the log's order it fetches most of the
// topic. Every message reads back byte-identical either way.
func TestBrokerSingleQueueReplayReadsItsOwnBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		layout   string
		min, max float64
	}{{"queue", 0, 2}, {"log", 3, 1e9}} {
		t.Run(tc.layout, func(t *testing.T) {
			bucket := tier.NewMem()
			cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
				MaxMessageSize: 256 << 10, LocalRetention: 0, TierLayout: tc.layout}
			b, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
			const queues, n = 8, 4000
			if r := invoke(t, cl, b.Addr().String(), createTopicReq("Wide", queues)); r.Code != int32(remoting.Success) {
				t.Fatalf("create topic: %d %s", r.Code, r.Remark)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			bodies := make([][][]byte, queues)
			for i := range n {
				body := make([]byte, 1000)
				for j := range body {
					body[j] = byte(rng.Uint32())
				}
				q := i % queues
				if r := invoke(t, cl, b.Addr().String(), sendReq("Wide", q, body, "")); r.Code != int32(remoting.Success) {
					t.Fatalf("send %d: %d %s", i, r.Code, r.Remark)
				}
				bodies[q] = append(bodies[q], body)
			}
			stop() // graceful: every segment uploaded

			cfg.DataDir = t.TempDir()
			r, cl2, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
			before := r.tier.Cold().Stats()
			const q = 3
			var delivered int64
			got := 0
			for off := int64(0); off < int64(len(bodies[q])); {
				resp := invoke(t, cl2, r.Addr().String(), pullReq("replay", "Wide", q, off, 0, "*"))
				if resp.Code != int32(remoting.Success) {
					t.Fatalf("pull Wide/%d at %d: %d %s", q, off, resp.Code, resp.Remark)
				}
				for body := resp.Body; len(body) > 0; got++ {
					rec := body[:binary.BigEndian.Uint32(body)]
					bl := int(binary.BigEndian.Uint32(rec[84:]))
					if string(rec[88:88+bl]) != string(bodies[q][got]) {
						t.Fatalf("message %d of Wide/%d differs after the bucket round trip", got, q)
					}
					delivered += int64(len(rec))
					body = body[len(rec):]
				}
				off, _ = strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64)
			}
			after := r.tier.Cold().Stats()
			fetched := after.GetBytes - before.GetBytes
			amp := float64(fetched) / float64(delivered)
			t.Logf("layout %s: delivered %d bytes of Wide/%d, fetched %d from the bucket (%.2f×), %d GETs",
				tc.layout, delivered, q, fetched, amp, after.Gets-before.Gets)
			if got != len(bodies[q]) || amp < tc.min || amp > tc.max {
				t.Fatalf("layout %s: %d of %d messages, amplification %.2f, want [%v, %v]", tc.layout, got, len(bodies[q]), amp, tc.min, tc.max)
			}
		})
	}
}
