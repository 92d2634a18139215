package broker

import (
	"context"
	"testing"

	"github.com/stratamq/stratamq/remoting"
)

// sendAllocBudget is the allocations one SEND_MESSAGE costs the broker, as
// counted by TestBrokerSendAllocations: the frame's decode, the handler
// (header, properties, store.Put, metrics) and the response's encode. A
// change that adds one fails the test: lower the budget when a change
// removes some, raise it only with the reason in the commit.
const sendAllocBudget = 4 // at fd222d9: the decoded request (decodeJSONFrameHeader), the store's batch (appendBatch), storeAndAck's result and the response (newSendResponse)

// TestBrokerSendAllocations (issue 15 item 4): allocations per send on the
// server's path, counted, not timed, so it can run in CI: a SEND_MESSAGE
// frame as rocketmq-client-go writes it (JSON header, UNIQ_KEY, TAGS and
// KEYS properties, 1 KiB body) decoded as the server does, handled, and
// its response header encoded.
func TestBrokerSendAllocations(t *testing.T) {
	if raceEnabled || testing.CoverMode() != "" {
		t.Skip("allocation counts differ under -race and -cover")
	}
	b, cl, stop := runBroker(t, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopic: true}, Deps{Logger: discardLogger()})
	defer stop()
	props := "UNIQ_KEY\x01C0A8000100002A9F000000000000000A\x02TAGS\x01TagA\x02KEYS\x01order-42\x02WAIT\x01true\x02"
	body := make([]byte, 1024)
	if r := invoke(t, cl, b.Addr().String(), sendReq("Allocs", 0, body, props)); r.Code != int32(remoting.Success) {
		t.Fatalf("warm-up send: %d %s", r.Code, r.Remark)
	}
	req := sendReq("Allocs", 0, body, props)
	req.Language = remoting.LanguageGo
	frame, err := remoting.AppendFrame(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	raw := frame[4:]
	ctx := context.Background()
	out := make([]byte, 0, 4096)
	n := testing.AllocsPerRun(500, func() {
		d, err := remoting.DecodeFramePairs(raw)
		if err != nil {
			t.Fatal(err)
		}
		resp := b.ServeRemoting(ctx, nil, d)
		if resp == nil || resp.Code != int32(remoting.Success) {
			t.Fatalf("send: %+v", resp)
		}
		if out, err = remoting.AppendFrameHeader(out[:0], resp); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.1f allocations per send (budget %d)", n, sendAllocBudget)
	if n > sendAllocBudget+0.5 {
		t.Fatalf("%.1f allocations per send, over the budget of %d", n, sendAllocBudget)
	}
}
