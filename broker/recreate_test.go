package broker

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/tier"
)

// TestBrokerRecreatedTopicAcrossRestore: a topic deleted and created again
// continues its queue offsets, and a broker restored on an empty disk from
// the bucket (whose queue indexes still hold the deleted incarnation)
// serves only the new incarnation's messages from the queue's min; a
// topic deleted and not created again stays gone after the restore, and
// when created later its offsets continue past the deleted ones (the
// tombstones ride in the bucket's checkpoint).
func TestBrokerRecreatedTopicAcrossRestore(t *testing.T) {
	t.Parallel()
	bucket := tier.NewMem()
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true, SegmentSize: 1 << 20,
		MaxMessageSize: 256 << 10, LeaseTTL: time.Second, CheckpointInterval: 200 * time.Millisecond}
	first, cl, stop := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	addr := first.Addr().String()
	produceTiered(t, first, cl, "Again", 200) // a sealed segment and more
	produceTiered(t, first, cl, "Gone", 30)
	oldMax, goneMax := first.store.MaxQueueOffset("Again", 0), first.store.MaxQueueOffset("Gone", 0)
	for _, topic := range []string{"Again", "Gone"} {
		if r := invoke(t, cl, addr, deleteTopicReq(topic)); r.Code != int32(remoting.Success) {
			t.Fatalf("delete %s: %d %s", topic, r.Code, r.Remark)
		}
	}
	var bodies [][]byte
	for i := range 150 {
		body := bytes.Repeat([]byte(fmt.Sprintf("new%06d|", i)), 900)
		r := invoke(t, cl, addr, sendReq("Again", 0, body, ""))
		if r.Code != int32(remoting.Success) {
			t.Fatalf("send %d to the re-created topic: %d %s", i, r.Code, r.Remark)
		}
		if off, _ := strconv.ParseInt(r.ExtFields["queueOffset"], 10, 64); off != oldMax+int64(i) {
			t.Fatalf("re-created topic: message %d at queue offset %d, want %d", i, off, oldMax+int64(i))
		}
		bodies = append(bodies, body)
	}
	stop() // graceful: everything uploaded, a clean checkpoint

	cfg.DataDir = t.TempDir()
	second, cl2, _ := runBroker(t, cfg, Deps{Logger: discardLogger(), Bucket: bucket})
	if mn, mx := second.store.MinQueueOffset("Again", 0), second.store.MaxQueueOffset("Again", 0); mn != oldMax || mx != oldMax+150 {
		t.Fatalf("restored Again/0 is [%d, %d), want [%d, %d)", mn, mx, oldMax, oldMax+150)
	}
	off, i := oldMax, 0
	for off < oldMax+150 {
		resp := invoke(t, cl2, second.Addr().String(), pullReq("reader", "Again", 0, off, 0, "*"))
		if resp.Code != int32(remoting.Success) {
			t.Fatalf("pull Again/0 at %d: %d %s", off, resp.Code, resp.Remark)
		}
		for body := resp.Body; len(body) > 0; i++ {
			rec := body[:int(binary.BigEndian.Uint32(body))]
			bl := int(binary.BigEndian.Uint32(rec[84:]))
			if !bytes.Equal(rec[88:88+bl], bodies[i]) {
				t.Fatalf("restored Again/0 message %d is not the re-created topic's (%.10q)", i, rec[88:88+min(bl, 10)])
			}
			body = body[len(rec):]
		}
		off, _ = strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64)
	}
	if mx := second.store.MaxQueueOffset("Gone", 0); mx != 0 {
		t.Fatalf("deleted topic Gone came back with max %d", mx)
	}
	r := invoke(t, cl2, second.Addr().String(), sendReq("Gone", 0, []byte("again"), ""))
	if got, _ := strconv.ParseInt(r.ExtFields["queueOffset"], 10, 64); r.Code != int32(remoting.Success) || got != goneMax {
		t.Fatalf("Gone created after the restore: %d %s at queue offset %d, want %d", r.Code, r.Remark, got, goneMax)
	}
}
