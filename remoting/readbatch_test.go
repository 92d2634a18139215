package remoting

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// batchRecorder defers every SEND_MESSAGE to EndBatch: it keeps the
// requests (bodies aliasing their pooled frames) and answers them there,
// with the body it saw, so a recycled frame would show as a wrong answer.
type batchRecorder struct {
	mu      sync.Mutex
	batches []int // requests per EndBatch
	block   chan struct{}
}

type pendingReq struct{ req *Command }

func (h *batchRecorder) ServeRemoting(ctx context.Context, c *Conn, req *Command) *Command {
	rb := ReadBatchFrom(ctx)
	if rb == nil || rb.Conn != c {
		return NewResponse(req, SystemError, "not served in a read batch")
	}
	pend, _ := rb.Value.(*[]pendingReq)
	if pend == nil {
		pend = new([]pendingReq)
		rb.Value = pend
	}
	*pend = append(*pend, pendingReq{req})
	return nil
}

func (h *batchRecorder) RequestHints(RequestCode) (bool, bool) { return false, true }

func (h *batchRecorder) EndBatch(rb *ReadBatch) {
	if h.block != nil {
		<-h.block
	}
	pend := rb.Value.(*[]pendingReq)
	h.mu.Lock()
	h.batches = append(h.batches, len(*pend))
	h.mu.Unlock()
	for _, p := range *pend {
		_ = rb.Conn.Reply(p.req, NewResponse(p.req, Success, string(p.req.Body)))
	}
	*pend = (*pend)[:0]
}

func sendFrames(t *testing.T, nc net.Conn, from, n int) {
	t.Helper()
	var out []byte
	var err error
	for i := from; i < from+n; i++ {
		req := NewRequest(SendMessage, map[string]string{"k": "v"}, fmt.Appendf(nil, "body-%04d-%s", i, bytes.Repeat([]byte{'x'}, 900)))
		req.Opaque = int32(i)
		if out, err = AppendFrame(out, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
}

func readAnswers(t *testing.T, br *bufio.Reader, nc net.Conn, n int) map[int32]string {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := map[int32]string{}
	for len(got) < n {
		f, err := ReadFrame(br, nil, 1<<20)
		if err != nil {
			t.Fatalf("after %d answers: %v", len(got), err)
		}
		resp, err := DecodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Code != int32(Success) {
			t.Fatalf("opaque %d: code %d %q", resp.Opaque, resp.Code, resp.Remark)
		}
		got[resp.Opaque] = resp.Remark
	}
	return got
}

func inlineSendConfig() ServerConfig {
	return ServerConfig{
		Pools:    map[PoolClass]PoolConfig{PoolSend: {Inline: true}},
		Classify: func(code RequestCode) PoolClass { return map[bool]PoolClass{true: PoolSend}[code == SendMessage] },
	}
}

// TestRemotingReadBatchDefersToEndBatch: requests written together are
// served as one read batch; a handler that answers them only in EndBatch
// still finds every body intact (frames are not recycled before), and
// every request is answered.
func TestRemotingReadBatchDefersToEndBatch(t *testing.T) {
	h := &batchRecorder{}
	s := startServer(t, inlineSendConfig(), h)
	nc := dialRaw(t, s)
	br := bufio.NewReader(nc)
	const n = 40 // ~37 KiB: fits the reader's buffer, so usually one or two batches
	sendFrames(t, nc, 1, n)
	got := readAnswers(t, br, nc, n)
	for i := 1; i <= n; i++ {
		want := fmt.Sprintf("body-%04d-", i)
		if r := got[int32(i)]; len(r) < len(want) || r[:len(want)] != want {
			t.Fatalf("opaque %d answered with body %.12q, want prefix %q", i, r, want)
		}
	}
	h.mu.Lock()
	batches := append([]int(nil), h.batches...)
	h.mu.Unlock()
	total := 0
	for _, b := range batches {
		total += b
	}
	if total != n {
		t.Fatalf("EndBatch saw %d requests in %v, want %d", total, batches, n)
	}
	// 40 frames written at once cannot need 40 reads: some batch must have
	// held more than one request.
	if len(batches) >= n {
		t.Fatalf("every request ended its own batch: %v", batches)
	}
}

// TestRemotingReadBatchEndsWhenConnCloses: a client that writes requests
// and closes at once still has them served: EndBatch runs when the reader
// exits.
func TestRemotingReadBatchEndsWhenConnCloses(t *testing.T) {
	h := &batchRecorder{}
	s := startServer(t, inlineSendConfig(), h)
	nc := dialRaw(t, s)
	const n = 10
	sendFrames(t, nc, 1, n)
	nc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		total := 0
		for _, b := range h.batches {
			total += b
		}
		h.mu.Unlock()
		if total == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("EndBatch saw %d of %d requests after the client closed", total, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRemotingReadBatchShutdownWaits: requests deferred to EndBatch count
// as in flight, so Shutdown waits for their EndBatch.
func TestRemotingReadBatchShutdownWaits(t *testing.T) {
	h := &batchRecorder{block: make(chan struct{})}
	s := startServer(t, inlineSendConfig(), h)
	nc := dialRaw(t, s)
	sendFrames(t, nc, 1, 3)
	// Wait until the reader is inside EndBatch (blocked).
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		inflight := s.mu.inflight
		s.mu.Unlock()
		if inflight == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in flight %d, want 3", inflight)
		}
		time.Sleep(time.Millisecond)
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while EndBatch still held 3 requests", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(h.block)
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.batches) == 0 {
		t.Fatal("EndBatch never finished")
	}
}

// TestRemotingReadBatchSpansTLSRecords: over TLS, requests that arrived
// together are one read batch even when they span several TLS records
// (crypto/tls hands out one record of at most 16 KiB per Read). 40 frames
// of ~1 KiB are three records; the first batch is held in EndBatch until
// the client has written them all, so the records after it are waiting
// at the socket: the next batch must take more than one record's worth
// (a record holds at most 17 of these frames, counting one straddling its
// start).
func TestRemotingReadBatchSpansTLSRecords(t *testing.T) {
	srvCfg, cliCfg, _ := tlsPair(t, false)
	h := &batchRecorder{block: make(chan struct{})}
	cfg := inlineSendConfig()
	cfg.TLS, cfg.TLSMode = srvCfg, TLSEnforcing
	s := startServer(t, cfg, h)
	nc, err := tls.Dial("tcp", s.Addr().String(), cliCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	const n = 40
	sendFrames(t, nc, 1, n)
	close(h.block)
	readAnswers(t, bufio.NewReader(nc), nc, n)
	h.mu.Lock()
	batches := append([]int(nil), h.batches...)
	h.mu.Unlock()
	if most := slices.Max(batches); most <= 17 {
		t.Fatalf("batches %v: none spans two TLS records", batches)
	}
}
