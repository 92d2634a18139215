package remoting

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrConnClosed is returned by writes and invocations on a closed Conn, and
// by Invoke when the conn closes before the response arrives.
var ErrConnClosed = errors.New("remoting: connection closed")

const (
	// DefaultMaxFrameSize is Java's 16 MiB frame limit plus room for a header.
	DefaultMaxFrameSize = 16<<20 + 64<<10
	// DefaultIdleTimeout closes a conn with no inbound bytes for this long
	// (Java servers and client-go both use 120 s).
	DefaultIdleTimeout = 120 * time.Second

	writeTimeout       = 30 * time.Second        // one batched write to a peer that stopped reading
	closeFlushTimeout  = time.Second             // flushing queued frames when a conn closes
	maxQueuedBytes     = 2 * DefaultMaxFrameSize // more queued than this: the peer is too slow, close
	inlineBodyMax      = 4 << 10                 // bodies up to this are copied next to the header
	inlineBodyTotalMax = 64 << 10                // ... unless the whole body is larger: then nothing is copied
	readBufferSize     = 64 << 10
	// firstReadBufferSize is a conn's read buffer from its first byte
	// until a frame has arrived whole: a slowloris or a bare length
	// declaration holds this much, not readBufferSize.
	firstReadBufferSize = 4 << 10
)

var connIDs atomic.Uint64

// connOwner is the server or client a Conn belongs to.
type connOwner interface {
	// dispatch handles one inbound request; it runs on the reader
	// goroutine and must not block.
	dispatch(c *Conn, req *Command)
	// connClosed runs once, after the conn's goroutines have finished
	// with the socket.
	connClosed(c *Conn)
	// requestHints says how to decode an inbound request: build the
	// ExtFields map or not, and whether its frame buffer may be recycled
	// after it is served (see RequestHinter).
	requestHints(code RequestCode) (extMap, reuseFrame bool)
	// endReadBatch runs on the reader goroutine before it may wait on
	// the socket, and when it exits (see BatchHandler).
	endReadBatch(c *Conn)
	// readPaused runs on the reader goroutine when it stops reading
	// because the read budget is used up.
	readPaused(c *Conn, b *readBudget)
}

// Conn is one remoting connection, accepted by a Server or dialled by a
// Client. One goroutine reads frames; another writes queued frames in
// batches. It is safe for concurrent use.
type Conn struct {
	id       uint64
	nc       net.Conn
	owner    connOwner
	log      *slog.Logger
	maxFrame int
	idle     time.Duration // 0: no idle timeout

	ctx    context.Context // canceled when the conn starts closing
	cancel context.CancelFunc

	closeOnce  sync.Once
	closing    chan struct{} // closed by Close
	writerDone chan struct{}
	wake       chan struct{} // cap 1: the writer has frames to send

	opaque atomic.Int32

	lenBuf     [4]byte    // the reader's scratch for frame lengths
	poolFrames bool       // read request frames into pooled buffers (server conns)
	batch      *ReadBatch // the reader's current read batch (BatchHandler); nil until used

	budget        *readBudget   // the server's read budget; nil: none (client conns)
	frameTimeout  time.Duration // a frame must arrive whole within this of its first byte; 0: no limit
	frameDeadline time.Time     // the reader's: the current frame's deadline, zero while none is set
	deadlineSet   bool          // the reader's: a read deadline is armed on nc
	tlsKind       int8          // the reader's: 0 not known yet, 1 TLS, 2 plain
	bufRelease    time.Duration // idle this long between frames: drop the read buffer; 0: never
	ip            netip.Addr    // the remote IP the server's per-IP cap counts this conn under

	// mu guards the write queue and the pending invocations. It is never
	// held across I/O.
	//
	// The queue is buf, the encoded frames (headers and small bodies)
	// back to back, plus parts: bodies written without copying, each to go
	// out after buf[:at]. The writer swaps both for its spares, so in
	// steady state queuing a frame allocates nothing.
	mu struct {
		sync.Mutex
		closed   bool
		buf      []byte
		parts    []outPart
		outBytes int
		held     int // HoldWrites nesting: while > 0 queuing does not wake the writer
		pending  map[int32]chan *Command
		// writing: a goroutine holds the write token, the right to write
		// to nc: the writer, a reader flushing its batch's answers itself
		// (ReleaseWritesInline), or a ReleaseWritesNoWait. One holder at a
		// time keeps the frames in queue order. A ReleaseWritesNoWait
		// whose write the socket did not take whole keeps the token set
		// and leaves the rest in handoff: the writer takes both over.
		writing bool
		// handoff: the rest of a queue ReleaseWritesNoWait could not
		// write at once, handed to the writer with the write token; the
		// writer writes it before anything queued after it.
		handoff handoff
		// nb: nc's socket for ReleaseWritesNoWait's non-blocking writes,
		// resolved on its first call (nbKnown); nil: none (TLS, not a
		// socket, not a unix system). Its write state is the token
		// holder's.
		nb      *nbWriter
		nbKnown bool
		// The spares the token holder swaps the queue for: distinct
		// arrays from the queue's, so queuing allocates nothing in steady
		// state.
		spareBuf   []byte
		spareParts []outPart
	}

	// Owned by the write token's holder.
	wdeadline time.Time // the write deadline set last
	iov       [][]byte
}

// outPart is a body queued without copying: it goes out after buf[:at].
type outPart struct {
	at int
	p  []byte
}

// handoff is a queue taken with takeQueueLocked that ReleaseWritesNoWait
// wrote only up to off; buf is nil when there is none. It holds no parts
// (ReleaseWritesNoWait writes only queues without), only the parts array
// to keep as the spare.
type handoff struct {
	buf   []byte
	off   int
	parts []outPart
}

func newConn(nc net.Conn, owner connOwner, parent context.Context, log *slog.Logger, maxFrame int, idle time.Duration) *Conn {
	c := &Conn{
		id:         connIDs.Add(1),
		nc:         nc,
		owner:      owner,
		maxFrame:   maxFrame,
		idle:       idle,
		closing:    make(chan struct{}),
		writerDone: make(chan struct{}),
		wake:       make(chan struct{}, 1),
	}
	c.log = log.With("conn", c.id, "remote", nc.RemoteAddr().String())
	c.ctx, c.cancel = context.WithCancel(parent)
	c.mu.pending = make(map[int32]chan *Command)
	return c
}

// ID is unique among the conns of this process.
func (c *Conn) ID() uint64 { return c.id }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// LocalAddr is this side's address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// Done is closed when the conn starts closing.
func (c *Conn) Done() <-chan struct{} { return c.closing }

// Context is canceled when the conn starts closing; handlers get it (or a
// child of it).
func (c *Conn) Context() context.Context { return c.ctx }

func (c *Conn) String() string {
	return fmt.Sprintf("conn %d %s", c.id, c.nc.RemoteAddr())
}

// Close starts closing the conn: frames already queued are flushed (for at
// most a second), then the socket is closed. It does not wait.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.mu.closed = true
		c.mu.Unlock()
		c.cancel()
		close(c.closing)
		// Unblock a write stuck on a peer that does not read.
		_ = c.nc.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
	})
	return nil
}

func (c *Conn) isClosed() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// WriteResponse queues a frame. It is safe from any goroutine; the frame
// goes out with the writer's next batch. The header is encoded before it
// returns, so the Command itself may be reused at once; Body and BodyParts
// must not be modified until the conn is done with them (they are written
// without copying when large).
func (c *Conn) WriteResponse(resp *Command) error { return c.enqueue(resp) }

func (c *Conn) enqueue(cmd *Command) error {
	n := cmd.bodyLen()
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return ErrConnClosed
	}
	if c.mu.outBytes+n > maxQueuedBytes && c.mu.outBytes > 0 {
		c.mu.Unlock()
		c.log.Warn("remoting: peer too slow, closing", "queued_bytes", c.mu.outBytes)
		c.Close()
		return ErrConnClosed
	}
	// Encoding under the lock keeps the queue one contiguous buffer; a
	// header encodes in well under a microsecond.
	start := len(c.mu.buf)
	buf, err := AppendFrameHeader(c.mu.buf, cmd)
	if err != nil {
		c.mu.buf = buf[:start]
		c.mu.Unlock()
		return err
	}
	hdrLen := len(buf) - start
	// A large body (a pull response: many records) is never copied: every
	// part goes out by reference in the writev. Small parts of a small body
	// are copied into the queue buffer, grown once for all of them.
	inline := n <= inlineBodyTotalMax
	if inline {
		buf = slices.Grow(buf, n)
	}
	for i := -1; i < len(cmd.BodyParts); i++ {
		p := cmd.Body
		if i >= 0 {
			p = cmd.BodyParts[i]
		}
		if len(p) == 0 {
			continue
		}
		if inline && len(p) <= inlineBodyMax {
			buf = append(buf, p...)
			continue
		}
		c.mu.parts = append(c.mu.parts, outPart{at: len(buf), p: p})
	}
	c.mu.buf = buf
	c.mu.outBytes += hdrLen + n
	held := c.mu.held > 0
	c.mu.Unlock()
	if !held {
		c.wakeWriter()
	}
	return nil
}

func (c *Conn) wakeWriter() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// HoldWrites keeps the writer from sending what is queued until the
// matching ReleaseWrites: responses queued in between go out together,
// in one syscall, instead of the writer waking for the first one. Calls
// nest; every HoldWrites needs its ReleaseWrites, soon.
func (c *Conn) HoldWrites() {
	c.mu.Lock()
	c.mu.held++
	c.mu.Unlock()
}

// ReleaseWrites ends a HoldWrites; the last one wakes the writer.
func (c *Conn) ReleaseWrites() {
	c.mu.Lock()
	c.mu.held--
	wake := c.mu.held == 0 && len(c.mu.buf) > 0
	c.mu.Unlock()
	if wake {
		c.wakeWriter()
	}
}

// maxInlineWrite is the most a ReleaseWritesInline writes on its caller's
// goroutine; more is left to the writer.
const maxInlineWrite = 256 << 10

// ReleaseWritesInline is ReleaseWrites for the conn's reader at the end of
// a read batch: when the writer is idle and what is queued is small, it
// writes the queue itself, instead of waking the writer goroutine for it.
// A batch's answers then cost one write syscall and no goroutine handoff
// (on the project's VMs a thread wakeup costs more than the write). The
// reader blocks on that write only as long as the peer's socket has no
// room for a batch of answers: a peer that stops reading stops being
// read, and the write deadline closes the conn.
func (c *Conn) ReleaseWritesInline() {
	if !c.releaseToWriteInline() {
		return
	}
	buf, parts := c.takeQueueLocked()
	c.mu.Unlock()
	c.writeQueue(buf, parts, false)
}

// releaseToWriteInline ends a HoldWrites and says whether its caller may
// write the queue itself: the last hold ended, something is queued, no
// one holds the write token, the conn is open and the queue is at most
// maxInlineWrite. Then it returns true with c.mu still locked; otherwise
// it has unlocked c.mu and, when the queue must go out, woken the writer.
func (c *Conn) releaseToWriteInline() bool {
	c.mu.Lock()
	c.mu.held--
	if c.mu.held > 0 || len(c.mu.buf) == 0 {
		c.mu.Unlock()
		return false
	}
	if c.mu.writing || c.mu.closed || c.mu.outBytes > maxInlineWrite {
		c.mu.Unlock()
		c.wakeWriter()
		return false
	}
	return true
}

// ReleaseWritesNoWait is ReleaseWrites for a goroutine that must never block
// on this conn's peer (the broker's HA report reader answering sync_master
// sends): when the writer is idle and the queue is small, it writes the queue
// with one non-blocking socket write on its caller's goroutine; whatever the
// socket does not take at once (EAGAIN or a partial write) is handed, with the
// write token, to the writer goroutine, which writes the rest first. TLS
// conns, queues with by-reference parts, and conns without a raw socket just
// wake the writer, like ReleaseWrites.
func (c *Conn) ReleaseWritesNoWait() {
	if !c.releaseToWriteInline() {
		return
	}
	var nb *nbWriter
	if len(c.mu.parts) == 0 {
		nb = c.nbWriterLocked()
	}
	if nb == nil {
		c.mu.Unlock()
		c.wakeWriter()
		return
	}
	buf, parts := c.takeQueueLocked()
	c.mu.Unlock()
	c.armWriteDeadline(false) // a deadline gone by fails even a write that does not wait
	n, err := nb.writeSome(buf)
	if hook := testHookNoWaitWrite; hook != nil {
		hook(c, n, len(buf))
	}
	if err != nil || n == len(buf) {
		c.releaseToken(buf, parts, err)
		return
	}
	// The socket is full: the writer takes the token and the rest over.
	// It is woken after the handoff is recorded, so a wake it already
	// has pending (the channel holds one) finds the handoff too.
	c.mu.Lock()
	c.mu.handoff = handoff{buf: buf, off: n, parts: parts}
	c.mu.Unlock()
	c.wakeWriter()
}

// Test hooks, nil outside tests. testHookNoWaitWrite sees every
// non-blocking write of ReleaseWritesNoWait: what the socket took of how
// much was queued. testHookWriterWoken runs on the writer when it wakes,
// before it looks at the queue (a test may stall it there).
var (
	testHookNoWaitWrite func(c *Conn, wrote, queued int)
	testHookWriterWoken func(c *Conn)
)

// nbWriterLocked is the conn's non-blocking socket writer, resolved on
// first use; nil: none. A sniffed conn before its first byte has none yet
// and is asked again next time.
func (c *Conn) nbWriterLocked() *nbWriter {
	if !c.mu.nbKnown {
		sc, known := plainSocket(c.nc)
		if !known {
			return nil
		}
		c.mu.nbKnown = true
		if sc != nil {
			c.mu.nb = newNBWriter(sc)
		}
	}
	return c.mu.nb
}

// plainSocket is the socket under nc when nc writes to it as it is (plain
// TCP, not TLS), or nil; known is false while a sniffed conn has not
// decided between TLS and plain.
func plainSocket(nc net.Conn) (sc syscall.Conn, known bool) {
	switch nc := nc.(type) {
	case *sniffConn:
		if !nc.decided.Load() {
			return nil, false
		}
		if _, plain := nc.inner.(*prefixedConn); !plain {
			return nil, true // TLS, or refused
		}
		sc, _ = nc.raw.(syscall.Conn)
		return sc, true
	case *clientTLSConn:
		return nil, true
	}
	sc, _ = nc.(syscall.Conn)
	return sc, true
}

// takeQueueLocked takes the write token and the queue, leaving the spares
// in its place. The queue must not be empty and the token free.
func (c *Conn) takeQueueLocked() ([]byte, []outPart) {
	buf, parts := c.mu.buf, c.mu.parts
	c.mu.buf, c.mu.parts = c.mu.spareBuf[:0], c.mu.spareParts[:0]
	c.mu.spareBuf, c.mu.spareParts = nil, nil
	c.mu.outBytes = 0
	c.mu.writing = true
	return buf, parts
}

// writeQueue writes a queue taken with takeQueueLocked, keeps its arrays as
// the spares and gives the write token back; frames queued meanwhile, or a
// close, wake the writer. A failed write closes the conn.
func (c *Conn) writeQueue(buf []byte, parts []outPart, closing bool) error {
	return c.releaseToken(buf, parts, c.writeOut(buf, parts, closing))
}

// releaseToken ends the write of a queue taken with takeQueueLocked, whose
// outcome is err: it keeps the queue's arrays as the spares and gives the
// write token back; frames queued meanwhile, or a close, wake the writer.
// A failed write closes the conn. It returns err.
func (c *Conn) releaseToken(buf []byte, parts []outPart, err error) error {
	clear(parts)
	if cap(buf) > maxSpareBuf {
		buf = nil
	}
	c.mu.Lock()
	c.mu.spareBuf, c.mu.spareParts = buf[:0], parts[:0]
	c.mu.writing = false
	wake := len(c.mu.buf) > 0 || c.mu.closed
	c.mu.Unlock()
	if err != nil {
		if !c.isClosed() {
			c.log.Info("remoting: write failed, closing connection", "err", err)
		}
		c.Close()
	}
	if wake {
		c.wakeWriter()
	}
	return err
}

// writeOut writes buf with parts spliced in, in one syscall. The caller
// holds the write token. The deadline is re-armed when half of it is used
// up, not per write; closing shortens it (Close sets its own).
func (c *Conn) writeOut(buf []byte, parts []outPart, closing bool) error {
	c.armWriteDeadline(closing)
	if len(parts) == 0 {
		_, err := c.nc.Write(buf)
		return err
	}
	iov := c.iov[:0]
	prev := 0
	for _, p := range parts {
		if p.at > prev {
			iov = append(iov, buf[prev:p.at])
		}
		iov = append(iov, p.p)
		prev = p.at
	}
	if prev < len(buf) {
		iov = append(iov, buf[prev:])
	}
	var err error
	if bw, ok := c.nc.(buffersWriter); ok {
		_, err = bw.WriteBuffers(iov)
	} else {
		nb := net.Buffers(iov)
		_, err = nb.WriteTo(c.nc)
	}
	clear(iov[:cap(iov)])
	c.iov = iov[:0]
	return err
}

// armWriteDeadline re-arms the write deadline when half of it is used up
// (closing: sets the close flush's). The caller holds the write token.
func (c *Conn) armWriteDeadline(closing bool) {
	if now := time.Now(); closing {
		_ = c.nc.SetWriteDeadline(now.Add(closeFlushTimeout))
	} else if c.wdeadline.Sub(now) < writeTimeout/2 {
		c.wdeadline = now.Add(writeTimeout)
		_ = c.nc.SetWriteDeadline(c.wdeadline)
	}
}

// Invoke sends req and waits for the response with the same opaque, until
// ctx is done or the conn closes. It sets req.Opaque and clears the
// response and oneway flags.
func (c *Conn) Invoke(ctx context.Context, req *Command) (*Command, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	op := c.opaque.Add(1)
	req.Opaque = op
	req.Flag &^= FlagResponse | FlagOneway
	ch := make(chan *Command, 1)
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil, ErrConnClosed
	}
	c.mu.pending[op] = ch
	c.mu.Unlock()
	if err := c.enqueue(req); err != nil {
		c.forget(op)
		return nil, err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("%s: %w", RequestCode(req.Code), ErrConnClosed)
		}
		return resp, nil
	case <-ctx.Done():
		c.forget(op)
		return nil, fmt.Errorf("remoting: %s to %s: %w", RequestCode(req.Code), c.nc.RemoteAddr(), ctx.Err())
	}
}

func (c *Conn) forget(op int32) {
	c.mu.Lock()
	delete(c.mu.pending, op)
	c.mu.Unlock()
}

// InvokeOneway sends req with the oneway flag set and does not wait.
func (c *Conn) InvokeOneway(ctx context.Context, req *Command) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req.Opaque = c.opaque.Add(1)
	req.Flag = req.Flag&^FlagResponse | FlagOneway
	return c.enqueue(req)
}

// complete hands a response to the Invoke waiting for it; responses nobody
// waits for (timed out) are dropped.
func (c *Conn) complete(resp *Command) {
	c.mu.Lock()
	ch, ok := c.mu.pending[resp.Opaque]
	delete(c.mu.pending, resp.Opaque)
	c.mu.Unlock()
	if ok {
		ch <- resp
		return
	}
	c.log.Debug("remoting: response without a waiter", "opaque", resp.Opaque, "code", resp.Code)
}

// start runs the reader and writer; done is called when each exits.
func (c *Conn) start(done func()) {
	go func() {
		defer done()
		c.writeLoop()
	}()
	go func() {
		defer done()
		c.readLoop()
	}()
}

func (c *Conn) readLoop() {
	defer c.finish()
	// br is nil while the conn holds no read buffer: before its first
	// byte, and while it idles between frames (see waitNextFrame).
	var br *bufio.Reader
	pr := &prefixReader{nc: c.nc}
	for {
		if br == nil || !FrameBuffered(br, c.maxFrame) && !c.tlsPending(br) {
			// The next read may wait on the socket: first finish the
			// batch served from what arrived so far, and (re)arm the
			// deadlines only now, not once per frame: the idle timeout
			// until the next frame's first byte, then the frame timeout
			// until its last.
			c.owner.endReadBatch(c)
			fresh := false
			if br == nil || br.Buffered() == 0 {
				if err := c.waitNextFrame(&br, pr); err != nil {
					c.logReadError(err, false)
					return
				}
				fresh = true
			}
			if !FrameBuffered(br, c.maxFrame) {
				if c.frameTimeout > 0 {
					c.frameDeadline = time.Now().Add(c.frameTimeout)
					c.setReadDeadline(c.frameDeadline)
				} else if c.idle > 0 && !fresh {
					c.setReadDeadline(time.Now().Add(c.idle))
				}
			}
		}
		f, err := c.readFrame(br)
		if err != nil {
			c.logReadError(err, true)
			return
		}
		if br.Size() < readBufferSize {
			// A whole frame came: a client, not just a claim. It gets
			// the full buffer, which takes over what the small one
			// holds at once, without a read, so the read batch goes on
			// across the switch.
			n := br.Buffered()
			pr.old = br
			br = bufio.NewReaderSize(pr, readBufferSize)
			if n > 0 {
				_, _ = br.Peek(n)
			}
		}
		cmd, err := decodeFrame(f.b)
		if err != nil {
			c.dropFrame(&f)
			c.log.Warn("remoting: closing connection on bad frame", "err", err)
			return
		}
		cmd.charge = f.commandCharge()
		if cmd.IsResponse() {
			// Responses go to whoever invoked; they keep them.
			cmd.handled(c.budget)
			cmd.ExtMap()
			c.complete(cmd)
			continue
		}
		extMap, reuse := c.owner.requestHints(RequestCode(cmd.Code))
		if extMap {
			cmd.ExtMap()
		}
		keepFrame(cmd, &f, reuse)
		c.owner.dispatch(c, cmd)
	}
}

// waitNextFrame waits between frames for the next frame's first byte,
// until the idle timeout. A conn that idles longer than bufRelease drops
// its read buffer meanwhile (*br becomes nil) and reads that byte on its
// own; a small buffer is made once it has arrived (and the full one once a
// frame has). Busy conns pay nothing for this: the shorter deadline that
// wakes an idle one replaces the idle deadline they arm anyway.
func (c *Conn) waitNextFrame(br **bufio.Reader, pr *prefixReader) error {
	c.frameDeadline = time.Time{}
	var idleAt time.Time
	if c.idle > 0 {
		idleAt = time.Now().Add(c.idle)
	}
	if *br != nil {
		release := c.bufRelease > 0 && (c.idle == 0 || c.bufRelease < c.idle)
		if !release {
			c.setReadDeadline(idleAt)
			_, err := (*br).Peek(1)
			return err
		}
		c.setReadDeadline(time.Now().Add(c.bufRelease))
		_, err := (*br).Peek(1)
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		*br = nil
	}
	c.setReadDeadline(idleAt)
	if _, err := io.ReadFull(c.nc, pr.first[:]); err != nil {
		return err
	}
	pr.pending = true
	*br = bufio.NewReaderSize(pr, firstReadBufferSize)
	_, err := (*br).Peek(1) // the byte just read: no wait
	return err
}

// tlsPending reports whether a whole frame is buffered in br once the TLS
// records already received are decrypted into it. crypto/tls hands out
// one record (at most 16 KiB, less early in a connection) per Read, so one
// socket read that brought a batch of requests in several records would
// otherwise end the read batch at every record boundary: a pwrite and a
// response write per record, not per read. Records crypto/tls already
// holds are decrypted under a read deadline in the past (it decrypts what
// it holds and returns a timeout, which it does not keep as an error);
// bytes waiting in the kernel (FIONREAD) are read under a short deadline,
// so a peer that sends half a record holds the batch for at most that.
// The deadline is then cleared; the caller arms the ones it needs. Plain
// conns: false at once (a socket read took all there was, up to the
// buffer).
func (c *Conn) tlsPending(br *bufio.Reader) bool {
	if c.tlsKind == 0 {
		if _, ok := c.TLSState(); ok {
			c.tlsKind = 1
		} else if sc, isSniff := c.nc.(*sniffConn); !isSniff || sc.decided.Load() {
			c.tlsKind = 2 // plain for good (a sniffed one once decided)
		}
	}
	if c.tlsKind != 1 {
		return false
	}
	touched := false
	for br.Buffered() < br.Size() && !FrameBuffered(br, c.maxFrame) {
		before := br.Buffered()
		touched = true
		c.setReadDeadline(pastDeadline)
		if _, _ = br.Peek(before + 1); br.Buffered() > before {
			continue
		}
		if socketPending(c.nc) <= 0 {
			break
		}
		c.setReadDeadline(time.Now().Add(tlsPendingWait))
		if _, _ = br.Peek(before + 1); br.Buffered() == before {
			break
		}
	}
	if touched {
		c.setReadDeadline(time.Time{})
	}
	return FrameBuffered(br, c.maxFrame)
}

// pastDeadline is a read deadline that has passed: reads return at once.
var pastDeadline = time.Unix(1, 0)

// tlsPendingWait bounds the read of bytes the kernel already holds, in
// case they end in the middle of a record.
const tlsPendingWait = time.Millisecond

// socketPending is how many bytes the kernel holds unread for the TCP
// socket under nc (a sniffed TLS conn's), or -1 when unknown.
func socketPending(nc net.Conn) int {
	sc, ok := nc.(*sniffConn)
	if !ok {
		return -1
	}
	rc, ok := sc.raw.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := rc.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	_ = raw.Control(func(fd uintptr) { n = fionread(fd) })
	return n
}

// setReadDeadline arms the socket's read deadline (zero: none), skipping
// the call when none is armed and none is wanted.
func (c *Conn) setReadDeadline(t time.Time) {
	if t.IsZero() && !c.deadlineSet {
		return
	}
	_ = c.nc.SetReadDeadline(t)
	c.deadlineSet = !t.IsZero()
}

// prefixReader is what a conn's read buffer reads from: first (when
// pending), then what old still holds, then nc.
type prefixReader struct {
	first   [1]byte
	pending bool
	old     *bufio.Reader // the smaller buffer this one replaced
	nc      net.Conn
}

func (r *prefixReader) Read(p []byte) (int, error) {
	if r.pending && len(p) > 0 {
		r.pending = false
		p[0] = r.first[0]
		return 1, nil
	}
	if r.old != nil {
		if r.old.Buffered() > 0 {
			return r.old.Read(p) // from its buffer only: no wait
		}
		r.old = nil
	}
	return r.nc.Read(p)
}

// readFrame reads one frame (without its length) from br. Its buffer
// grows as the bytes arrive (see frameChunk), and every byte of it is
// taken from the server's read budget first: when none is left the reader
// waits, not reading, until some is given back.
func (c *Conn) readFrame(br *bufio.Reader) (frameBuf, error) {
	var f frameBuf
	if _, err := io.ReadFull(br, c.lenBuf[:4]); err != nil {
		return f, err
	}
	n, err := frameLength(c.lenBuf[:4], c.maxFrame)
	if err != nil {
		return f, err
	}
	size := firstFrameSize(n, br.Buffered())
	if c.budget == nil {
		// A client conn (no read budget: it reads the answers to its own
		// requests, from a server it chose) takes the declared length at
		// once, up to maxFrame: growing a pull response of 1 MiB from the
		// buffered part by doubling copied it about twice and zeroed two
		// buffers per response (bench consume: a third of its CPU).
		size = n
	}
	if err := c.take(&f, size); err != nil {
		return f, err
	}
	f.alloc(size, c.poolFrames)
	got := 0
	for {
		m, err := io.ReadFull(br, f.b[got:size])
		got += m
		if err != nil {
			c.dropFrame(&f)
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return f, &frameReadError{n: n, got: got, err: err}
		}
		if size == n {
			return f, nil
		}
		next := min(n, 2*size)
		if err := c.take(&f, next-size); err != nil {
			c.dropFrame(&f)
			return f, err
		}
		f.grow(next, c.poolFrames)
		size = next
	}
}

// keepFrame settles the pooled buffer f a request was read into: the
// request holds it until it is handled when its handler lets the server
// recycle it (reuse); a request without a body gives it back at once, as
// nothing of the request aliases it (its header strings are copies), so
// pulls, heartbeats and offset commits do not each leave a buffer to the
// collector; otherwise the body aliases it and it stays the request's.
func keepFrame(cmd *Command, f *frameBuf, reuse bool) {
	switch {
	case f.pooled == nil:
	case reuse:
		cmd.frame = f.pooled
	case len(cmd.Body) == 0:
		putFrame(f.pooled)
		f.b = nil
	}
	f.pooled = nil
}

// frameReadError is a frame cut short: by EOF or by a deadline.
type frameReadError struct {
	n, got int
	err    error
}

func (e *frameReadError) Error() string {
	return fmt.Sprintf("frame of %d bytes cut short after %d: %v", e.n, e.got, e.err)
}

func (e *frameReadError) Unwrap() error { return e.err }

// dropFrame gives back a frame that will not be dispatched.
func (c *Conn) dropFrame(f *frameBuf) {
	if f.pooled != nil {
		putFrame(f.pooled)
		f.pooled = nil
	}
	if c.budget != nil && (f.charge > 0 || f.slot) {
		c.budget.give(f.charge, f.slot)
	}
	f.charge, f.slot, f.b = 0, false, nil
}

// take charges n more bytes of f to the read budget, waiting while there
// is none.
func (c *Conn) take(f *frameBuf, n int) error {
	b := c.budget
	if b == nil || n == 0 {
		return nil
	}
	if f.slot {
		// The slot holds one frame of up to the max frame size whole.
		b.slotBytes.Add(int64(n))
		f.charge += int64(n)
		return nil
	}
	if b.tryTake(int64(n)) {
		f.charge += int64(n)
		return nil
	}
	return c.takeSlow(f, int64(n))
}

func (c *Conn) takeSlow(f *frameBuf, n int64) error {
	b := c.budget
	// This reader's own read batch may be what holds the budget.
	c.owner.endReadBatch(c)
	start := time.Now()
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	paused := false
	for {
		wake := b.waitChan()
		if b.tryTake(n) {
			f.charge += n
			break
		}
		if b.slot.CompareAndSwap(false, true) {
			// This frame moves onto the overflow slot, where it fits
			// whole: it cannot be stuck behind frames waiting like it.
			b.slotBytes.Add(f.charge + n)
			if f.charge > 0 {
				b.give(f.charge, false)
			}
			f.charge += n
			f.slot = true
			break
		}
		if !paused {
			paused = true
			c.owner.readPaused(c, b)
		}
		select {
		case <-wake:
		case <-c.closing:
			return ErrConnClosed
		}
	}
	// Time spent waiting for memory does not count against the frame
	// (or idle) timeout.
	waited := time.Since(start)
	if !c.frameDeadline.IsZero() {
		c.frameDeadline = c.frameDeadline.Add(waited)
		c.setReadDeadline(c.frameDeadline)
	} else if c.idle > 0 {
		c.setReadDeadline(time.Now().Add(c.idle))
	}
	if paused {
		c.log.Debug("remoting: read resumed", "waited", waited)
	}
	return nil
}

func (c *Conn) logReadError(err error, inFrame bool) {
	var fe *frameReadError
	switch {
	case c.isClosed(), errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		c.log.Debug("remoting: connection closed", "err", err)
	case errors.Is(err, os.ErrDeadlineExceeded) && inFrame && c.frameTimeout > 0:
		args := []any{"frame_timeout", c.frameTimeout}
		if errors.As(err, &fe) {
			args = append(args, "declared_bytes", fe.n, "received_bytes", fe.got)
		}
		c.log.Warn("remoting: closing connection: frame not complete within the frame timeout", args...)
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.log.Info("remoting: closing idle connection", "idle", c.idle)
	case errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrMalformed):
		c.log.Warn("remoting: closing connection on bad frame", "err", err)
	default:
		c.log.Info("remoting: read failed, closing connection", "err", err)
	}
}

// finish runs when the reader exits: close, wait for the writer to let go
// of the socket, fail waiting invocations, tell the owner.
func (c *Conn) finish() {
	// Requests served but deferred to the batch's end are finished even
	// though the conn is going: they arrived whole.
	c.owner.endReadBatch(c)
	c.Close()
	<-c.writerDone
	c.mu.Lock()
	pending := c.mu.pending
	c.mu.pending = map[int32]chan *Command{}
	c.mu.Unlock()
	for _, ch := range pending {
		close(ch)
	}
	c.owner.connClosed(c)
}

// maxSpareBuf is the largest queue buffer the writer keeps for reuse.
const maxSpareBuf = 1 << 20

// writeLoop is the writer goroutine: woken by frames queued (or a
// handoff), it writes the queue in one batch whenever nobody else holds
// the write token. A handoff from ReleaseWritesNoWait comes with the
// token: the writer writes its rest first, then gives the token back. On
// close it flushes a handoff and the queue (for at most a second), then
// closes the socket.
func (c *Conn) writeLoop() {
	defer close(c.writerDone)
	defer c.nc.Close()
	for {
		closing := false
		select {
		case <-c.wake:
		case <-c.closing:
			closing = true
		}
		if hook := testHookWriterWoken; hook != nil {
			hook(c)
		}
		// Gather: let the handlers that are runnable now finish and queue
		// their responses, so that one writev carries them all instead of
		// one syscall per response. With nothing else to run this
		// returns at once.
		if !closing {
			runtime.Gosched()
		}
		c.mu.Lock()
		if h := c.mu.handoff; h.buf != nil {
			// A ReleaseWritesNoWait's rest, with the write token: before
			// anything queued after it, and before the token check below
			// (the token is the handoff's).
			c.mu.handoff = handoff{}
			closing = closing || c.mu.closed
			c.mu.Unlock()
			if c.releaseToken(h.buf, h.parts, c.writeOut(h.buf[h.off:], nil, closing)) != nil {
				return
			}
			continue // then what was queued meanwhile (flushed too when closing)
		}
		if c.mu.writing {
			// A reader (ReleaseWritesInline, ReleaseWritesNoWait) is
			// writing; it wakes the writer when done if more was queued
			// or the conn closed, or once it has left a handoff.
			c.mu.Unlock()
			if closing {
				<-c.wake
			}
			continue
		}
		if len(c.mu.buf) == 0 {
			c.mu.Unlock()
			if closing {
				return
			}
			continue
		}
		buf, parts := c.takeQueueLocked()
		c.mu.Unlock()
		if c.writeQueue(buf, parts, closing) != nil || closing {
			return
		}
	}
}
