package remoting

import (
	"bufio"
	"context"
	"sync"
	"testing"
)

// TestRemotingInlinePoolServesInArrivalOrder: an inline pool runs its
// requests on the connection's reader, one after another in the order they
// arrived, and answers each; other classes still use workers.
func TestRemotingInlinePoolServesInArrivalOrder(t *testing.T) {
	var mu sync.Mutex
	var order []int32
	h := HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		if RequestCode(req.Code) == SendMessage {
			mu.Lock()
			order = append(order, req.Opaque)
			mu.Unlock()
		}
		return NewResponse(req, Success, "")
	})
	s := startServer(t, inlineSendConfig(), h)
	nc := dialRaw(t, s)
	const n = 200
	var out []byte
	for i := 1; i <= n; i++ {
		code := SendMessage
		if i%10 == 0 {
			code = HeartBeat // a worker-pool request in between
		}
		req := NewRequest(code, map[string]string{"k": "v"}, []byte("x"))
		req.Opaque = int32(i)
		var err error
		if out, err = AppendFrame(out, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	readAnswers(t, bufio.NewReader(nc), nc, n)
	mu.Lock()
	defer mu.Unlock()
	if len(order) != n-n/10 {
		t.Fatalf("inline handler ran %d times, want %d", len(order), n-n/10)
	}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("inline requests ran out of arrival order: %v", order)
		}
	}
}
