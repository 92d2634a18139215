package remoting

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// recycler marks every SEND_MESSAGE for recycling (ReadBatch.Recycle) and
// answers it in EndBatch with the ext value it reads there. A batch whose
// requests carry "late" instead keeps them past EndBatch (KeepInFlight)
// and answers them only after the next round's requests were decoded
// (the test opens a gate), reading the ext values then. Requests with "keep" are never marked and
// are read again at the end. A header reused too early shows as a wrong
// answer or a changed kept value (under -race recycled headers are also
// poisoned at once).
type recycler struct {
	mu      sync.Mutex
	seen    int
	round   map[*Command]int // the round a command was first seen in
	reused  int              // requests decoded into a command an earlier round had
	kept    []*Command       // never marked: must stay intact
	keptExt []string
	late    sync.WaitGroup
	gate    chan struct{} // late batches answer once it is closed
}

func (h *recycler) ServeRemoting(ctx context.Context, c *Conn, req *Command) *Command {
	rb := ReadBatchFrom(ctx)
	if rb == nil {
		return NewResponse(req, SystemError, "not served in a read batch")
	}
	pend, _ := rb.Value.(*[]*Command)
	if pend == nil {
		pend = new([]*Command)
		rb.Value = pend
	}
	*pend = append(*pend, req)
	var r int
	_, _ = fmt.Sscanf(mustExt(req, "round"), "%d", &r)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen++
	if first, ok := h.round[req]; ok && first < r {
		h.reused++
	} else if !ok {
		h.round[req] = r
	}
	if v, _ := req.Ext("keep"); v != "" {
		h.kept = append(h.kept, req)
		h.keptExt = append(h.keptExt, strings.Clone(v))
	} else {
		rb.Recycle(req)
	}
	return nil
}

func mustExt(c *Command, k string) string { v, _ := c.Ext(k); return v }

func (h *recycler) RequestHints(RequestCode) (bool, bool) { return false, true }

func (h *recycler) EndBatch(rb *ReadBatch) {
	pend := rb.Value.(*[]*Command)
	reqs := append([]*Command(nil), *pend...)
	*pend = (*pend)[:0]
	answer := func() {
		for _, req := range reqs {
			_ = rb.Conn.Reply(req, NewResponse(req, Success, mustExt(req, "k")))
		}
	}
	if len(reqs) == 0 || mustExt(reqs[0], "late") == "" {
		answer()
		return
	}
	h.mu.Lock()
	gate := h.gate
	h.mu.Unlock()
	done := rb.KeepInFlight()
	h.late.Go(func() {
		defer done()
		<-gate // the test opens it once the next round was decoded
		answer()
	})
}

// answerSet collects a connection's answers (opaque → remark).
type answerSet struct {
	mu  sync.Mutex
	got map[int32]string
	err error
}

func (a *answerSet) read(br *bufio.Reader, nc net.Conn) {
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		f, err := ReadFrame(br, nil, 1<<20)
		var resp *Command
		if err == nil {
			resp, err = decodeAnswer(f)
		}
		a.mu.Lock()
		if err != nil {
			a.err = err
			a.mu.Unlock()
			return
		}
		a.got[resp.Opaque] = resp.Remark
		a.mu.Unlock()
	}
}

func (a *answerSet) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		a.mu.Lock()
		got, err := len(a.got), a.err
		a.mu.Unlock()
		if got >= n {
			return
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("%d of %d answers: %v", got, n, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRemotingReadBatchRecyclesHeaders: request headers a handler marks
// are reused for later requests, never while anything can still read
// them: not before EndBatch, not in a batch kept in flight, and never
// when unmarked. JSON and binary headers both.
func TestRemotingReadBatchRecyclesHeaders(t *testing.T) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		t.Run(fmt.Sprint(st), func(t *testing.T) {
			h := &recycler{round: map[*Command]int{}}
			s := startServer(t, inlineSendConfig(), h)
			nc := dialRaw(t, s)
			ans := &answerSet{got: map[int32]string{}}
			go ans.read(bufio.NewReader(nc), nc)
			value := func(i int) string { return fmt.Sprintf("value-%05d-x\x01y\x02z", i) }
			const rounds, per = 20, 40
			decoded := func(n int) {
				deadline := time.Now().Add(20 * time.Second)
				for {
					h.mu.Lock()
					seen := h.seen
					h.mu.Unlock()
					if seen >= n {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d of %d requests decoded", seen, n)
					}
					time.Sleep(time.Millisecond)
				}
			}
			var gate chan struct{}
			for r := range rounds {
				late := r%4 == 1
				if late {
					gate = make(chan struct{})
					h.mu.Lock()
					h.gate = gate
					h.mu.Unlock()
				}
				var out []byte
				for i := r * per; i < (r+1)*per; i++ {
					ext := map[string]string{"k": value(i), "round": fmt.Sprint(r)}
					if i%37 == 0 {
						ext["keep"] = fmt.Sprintf("kept-%05d", i)
					}
					if late {
						ext["late"] = "1"
					}
					req := NewRequest(SendMessage, ext, []byte("b"))
					req.Opaque, req.Serialize = int32(i), st
					var err error
					if out, err = AppendFrame(out, req); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := nc.Write(out); err != nil {
					t.Fatal(err)
				}
				if late {
					continue // the next round is decoded while this one is held
				}
				decoded((r + 1) * per)
				if gate != nil {
					close(gate)
					gate = nil
				}
				ans.waitFor(t, (r+1)*per)
			}
			ans.waitFor(t, rounds*per)
			h.late.Wait()
			ans.mu.Lock()
			for i := range rounds * per {
				if got := ans.got[int32(i)]; got != value(i) {
					ans.mu.Unlock()
					t.Fatalf("request %d answered %q, want %q: its header was reused while it was served", i, got, value(i))
				}
			}
			ans.mu.Unlock()
			h.mu.Lock()
			defer h.mu.Unlock()
			for i, req := range h.kept {
				if v := mustExt(req, "keep"); v != h.keptExt[i] {
					t.Fatalf("an unmarked request's header changed: %q, want %q", v, h.keptExt[i])
				}
			}
			// Recycling works: rounds after the first decode into commands
			// earlier rounds gave back (sync.Pool drops some Puts under
			// -race, and a collection may empty it: a tenth is plenty).
			if h.reused < rounds*per/10 {
				t.Fatalf("%d of %d requests reused an earlier round's command: headers are not recycled", h.reused, rounds*per)
			}
			t.Logf("%d requests, %d reused an earlier round's command", rounds*per, h.reused)
		})
	}
}

// decodeAnswer decodes a response frame with the decoders that allocate
// their own command: the fast ones would take headers from the pool the
// server under test gives its recycled ones to.
func decodeAnswer(f []byte) (*Command, error) {
	if len(f) < 4 {
		return nil, fmt.Errorf("frame of %d bytes", len(f))
	}
	word := binary.BigEndian.Uint32(f)
	hl := int(word & maxHeaderLen)
	if hl > len(f)-4 {
		return nil, fmt.Errorf("header length %d in a frame of %d bytes", hl, len(f))
	}
	if SerializeType(word>>24) == SerializeRocketMQ {
		return decodeBinaryHeader(f[4 : 4+hl])
	}
	return decodeJSONHeaderSlow(f[4 : 4+hl])
}

// panicRecycler is the broker's send pattern (a plain send joins the
// batch's pending list in rb.Value, is marked Recycle, and is answered
// from that list in EndBatch) with an EndBatch that panics once before it
// has cleared the list, as the broker's would if anything under
// store.Put (OnDispatch: pull-hold wakeups, pop, HA notify) or the
// answering panicked.
type panicRecycler struct {
	mu       sync.Mutex
	panicked bool
	ended    chan struct{} // closed when the panicking EndBatch ran
}

func (h *panicRecycler) ServeRemoting(ctx context.Context, c *Conn, req *Command) *Command {
	rb := ReadBatchFrom(ctx)
	pend, _ := rb.Value.(*[]*Command)
	if pend == nil {
		pend = new([]*Command)
		rb.Value = pend
	}
	*pend = append(*pend, req)
	rb.Recycle(req)
	return nil
}

func (h *panicRecycler) RequestHints(RequestCode) (bool, bool) { return false, true }

func (h *panicRecycler) EndBatch(rb *ReadBatch) {
	pend := rb.Value.(*[]*Command)
	h.mu.Lock()
	first := !h.panicked
	h.panicked = true
	h.mu.Unlock()
	if first {
		defer close(h.ended)
		panic("EndBatch failed before clearing its pending list")
	}
	for _, req := range *pend {
		_ = rb.Conn.Reply(req, NewResponse(req, Success, mustExt(req, "k")))
	}
	*pend = (*pend)[:0]
}

// TestRemotingReadBatchPanicRecyclesNothing: when EndBatch panics, the
// handler's state may still hold the batch's requests (as a pending list
// it had not cleared yet), so none of them is recycled: the next batch,
// which answers them late, still reads their own headers.
func TestRemotingReadBatchPanicRecyclesNothing(t *testing.T) {
	h := &panicRecycler{ended: make(chan struct{})}
	s := startServer(t, inlineSendConfig(), h)
	nc := dialRaw(t, s)
	br := bufio.NewReader(nc)
	send := func(op int32, v string) {
		req := NewRequest(SendMessage, map[string]string{"k": v}, []byte("b"))
		req.Opaque = op
		writeCmd(t, nc, req)
	}
	send(1, "value-of-request-1")
	select { // batch 1 ends (EndBatch panics) before request 2 is sent
	case <-h.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("EndBatch did not run")
	}
	send(2, "value-of-request-2")
	_ = nc.SetReadDeadline(time.Now().Add(3 * time.Second))
	got := map[int32]string{}
	var answers []string
	for len(answers) < 2 {
		f, err := ReadFrame(br, nil, 1<<20)
		if err != nil {
			break
		}
		resp, err := decodeAnswer(f)
		if err != nil {
			t.Fatal(err)
		}
		got[resp.Opaque] = resp.Remark
		answers = append(answers, fmt.Sprintf("opaque %d: %q", resp.Opaque, resp.Remark))
	}
	if got[1] != "value-of-request-1" || got[2] != "value-of-request-2" {
		t.Logf("answers: %v", answers)
		t.Fatalf("request 1 answered %q, request 2 %q, after request 1's EndBatch panicked: its header was recycled while the handler still held it", got[1], got[2])
	}
}
