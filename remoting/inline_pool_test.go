package remoting

import (
	"bufio"
	"context"
	"net"
	"sync"
	"testing"
	"time"
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
	s := startServer(t, ServerConfig{
		Pools:    map[PoolClass]PoolConfig{PoolSend: {Inline: true}},
		Classify: func(code RequestCode) PoolClass { return map[bool]PoolClass{true: PoolSend}[code == SendMessage] },
	}, h)
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const n = 200
	var out []byte
	for i := 1; i <= n; i++ {
		code := SendMessage
		if i%10 == 0 {
			code = HeartBeat // a worker-pool request in between
		}
		req := NewRequest(code, map[string]string{"k": "v"}, []byte("x"))
		req.Opaque = int32(i)
		if out, err = AppendFrame(out, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	seen := map[int32]bool{}
	for len(seen) < n {
		f, err := ReadFrame(br, nil, 1<<20)
		if err != nil {
			t.Fatalf("after %d responses: %v", len(seen), err)
		}
		resp, err := DecodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		seen[resp.Opaque] = true
	}
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
