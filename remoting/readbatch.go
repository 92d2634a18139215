package remoting

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"runtime/debug"
)

// BatchHandler is an optional interface of a Handler: it lets the handler of
// inline requests (PoolConfig.Inline) finish their work together, once per
// read batch, instead of once per request. A read batch is the run of
// requests a connection's reader serves from bytes it already has: the
// reader calls EndBatch before it would wait on the socket for more (and
// before a batch grows past maxBatchRequests, and when the connection
// ends).
//
// The broker uses it to store all the sends that arrived together with one
// write: with 64 sends in flight on a connection, one pwrite serves tens of
// them instead of one each.
//
// While an inline request is served within a batch, its context carries
// the batch (ReadBatchFrom). A handler that defers the request's work to
// EndBatch returns nil and answers later with c.WriteResponse (Reply
// fixes the response's opaque and flags). Until EndBatch returns, the
// request frames of the batch stay valid (Body included, even with
// RequestHints' reuseFrame) and the server counts the requests as in
// flight, so Shutdown waits for them.
type BatchHandler interface {
	Handler
	// EndBatch runs on the connection's reader goroutine with the batch
	// whose requests have all been served by ServeRemoting.
	EndBatch(b *ReadBatch)
}

// maxBatchRequests ends a read batch early: it bounds how many deferred
// requests (and held frames) one batch collects.
const maxBatchRequests = 256

// ReadBatch is one connection's current read batch. It is owned by the
// connection's reader goroutine: only ServeRemoting (called inline with
// the batch's context) and EndBatch may touch it.
type ReadBatch struct {
	// Conn is the connection the requests came on.
	Conn *Conn
	// Value is the handler's own per-connection state; the server never
	// reads it and keeps it across batches.
	Value any

	ctx  context.Context // c.ctx carrying this batch
	held []*Command      // served in this batch: frames and in-flight counts released after EndBatch
	srv  *Server
	// kept: KeepInFlight was called in this batch, so some answer comes
	// after EndBatch and refers to its request; no request is recycled.
	kept bool
}

// Recycle marks req, a request served in this batch, as one the handler is
// done with once EndBatch returns: nothing it keeps (maps, queues, answers
// still to be written) refers to req or to a string of req's header, whose
// bytes will be reused; copies (the store's, a string conversion) are
// fine. The server then reuses req's memory for a later request's header,
// unless KeepInFlight was called during the batch. A request that is not
// marked is left to the garbage collector, as before.
func (b *ReadBatch) Recycle(req *Command) { req.recycle = true }

// KeepInFlight keeps the server counting the batch as in flight after
// EndBatch returns, until done runs: for a handler that answers after
// EndBatch (sends acknowledged after the group commit's fdatasync, or
// after a slave's ack), so that Shutdown waits for those answers before it
// closes the connections. Call done exactly once, after the answers are
// queued (c.Reply).
func (b *ReadBatch) KeepInFlight() (done func()) {
	b.kept = true
	s := b.srv
	s.mu.Lock()
	s.mu.inflight++
	s.mu.Unlock()
	return s.doneInflight
}

type readBatchKey struct{}

// ReadBatchFrom returns the read batch an inline request is served in, or
// nil when the request is not part of one (a worker pool, a client
// connection, a handler without EndBatch).
func ReadBatchFrom(ctx context.Context) *ReadBatch {
	b, _ := ctx.Value(readBatchKey{}).(*ReadBatch)
	return b
}

// Reply queues resp as the answer to req (a request served earlier and
// answered late): opaque, response flag and serialization are set from req;
// nothing is sent for a oneway request.
func (c *Conn) Reply(req, resp *Command) error {
	if resp == nil || req.IsOneway() {
		return nil
	}
	resp.Opaque = req.Opaque
	resp.Flag |= FlagResponse
	resp.Serialize = req.Serialize
	return c.WriteResponse(resp)
}

// FrameBuffered reports whether br holds a whole frame, so reading it will
// not wait on the socket (a reader that batches work by read uses it). A
// length that cannot be a frame counts as buffered: reading it fails at
// once.
func FrameBuffered(br *bufio.Reader, max int) bool {
	n := br.Buffered()
	if n < 4 {
		return false
	}
	p, _ := br.Peek(4)
	l := int64(int32(binary.BigEndian.Uint32(p)))
	return l < 4 || l > int64(max) || int64(n) >= 4+l
}

// serveInBatch serves an inline request within c's read batch (see
// BatchHandler).
func (s *Server) serveInBatch(c *Conn, req *Command) {
	b := c.batch
	if b == nil {
		b = &ReadBatch{Conn: c, srv: s}
		b.ctx = context.WithValue(c.ctx, readBatchKey{}, b)
		c.batch = b
	}
	b.held = append(b.held, req)
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("remoting: handler panicked", "code", RequestCode(req.Code).String(), "panic", r,
				"stack", string(debug.Stack()))
			s.reply(c, req, NewResponse(req, SystemError, fmt.Sprintf("handler panic: %v", r)))
		}
	}()
	s.reply(c, req, s.h.ServeRemoting(b.ctx, c, req))
	if len(b.held) >= maxBatchRequests {
		s.endBatch(c)
	}
}

// endBatch ends c's read batch: the handler's EndBatch, then the frames
// go back to their pool and the requests stop counting as in flight.
func (s *Server) endBatch(c *Conn) {
	b := c.batch
	if b == nil || len(b.held) == 0 {
		return
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("remoting: EndBatch panicked", "panic", r, "requests", len(b.held),
					"stack", string(debug.Stack()))
				// The handler's state may still refer to the batch's
				// requests (its pending list was not cleared): none is
				// recycled.
				b.kept = true
			}
		}()
		// The batch's answers go out together, written by this reader
		// when nothing else is writing (no wakeup of the writer).
		c.HoldWrites()
		defer c.ReleaseWritesInline()
		s.h.(BatchHandler).EndBatch(b)
	}()
	n := len(b.held)
	for i, req := range b.held {
		req.handled(s.budget)
		if !b.kept {
			recycleHeader(req)
		}
		b.held[i] = nil
	}
	b.held, b.kept = b.held[:0], false
	s.doneInflightN(n)
}
