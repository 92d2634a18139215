package tlsconf

import (
	"crypto/tls"
	"net"
	"sync"
)

// Conn is a TLS connection that sends the records of one Write in one
// socket write. crypto/tls seals at most 16 KiB of data per record and
// writes each record with a syscall of its own: a client's burst of
// requests, or a pull's 1 MiB answer, went out as one syscall per 16 KiB,
// and the peer woke and read once per record. Conn gathers the records
// of a Write of more than one record and writes them together (in
// chunks of at most GatherMax bytes of data), at the price of one copy of
// the sealed bytes. A Write of one record goes out as crypto/tls writes
// it, without the copy.
//
// Reads are buffered under crypto/tls the same way: it asks the socket
// for what its record buffer has room for (one or two records), so
// records that arrived together took several read syscalls. Conn reads up
// to ReadChunk at once into a pooled buffer and hands the bytes to
// crypto/tls from there; a record already whole in it is decrypted
// without a syscall, whatever the read deadline. The buffer is held only
// while it has unread bytes: crypto/tls takes all of them whenever it
// waits for the rest of a record, so a peer that stops in the middle of
// one pins none; a conn whose owner stops reading pins at most
// ReadChunk, like the owner's own read buffer.
//
// The handshake, deadlines and Close are the tls.Conn's. A failed socket
// write fails every later write (the records sealed after it cannot be
// sent in order any more): the connection is to be closed.
type Conn struct {
	*tls.Conn
	g   *gatherer
	wmu sync.Mutex // serializes Write (one gathered write at a time)
}

// GatherMax bounds the data one gathered socket write carries, and so
// the buffer a Write blocked on a slow peer holds until it completes or
// its deadline passes (crypto/tls alone holds one record's; the remoting
// conns' coalescing buffer above it holds as much). 128 KiB was measured:
// hot consume over TLS −4 % in 2 alternating pairs.
const GatherMax = 256 << 10

// ReadChunk is the most one socket read under a Conn takes.
const ReadChunk = 64 << 10

// maxRecord is the most data crypto/tls seals in one record.
const maxRecord = 16 << 10

// NewClientConn is tls.Client(nc, cfg) with gathered writes.
func NewClientConn(nc net.Conn, cfg *tls.Config) *Conn {
	g := &gatherer{Conn: nc}
	return &Conn{Conn: tls.Client(g, cfg), g: g}
}

// NewServerConn is tls.Server(nc, cfg) with gathered writes.
func NewServerConn(nc net.Conn, cfg *tls.Config) *Conn {
	g := &gatherer{Conn: nc}
	return &Conn{Conn: tls.Server(g, cfg), g: g}
}

// Write seals p and sends it, in one socket write per GatherMax bytes.
// Writes are serialized (as crypto/tls serializes them).
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), GatherMax)]
		m, err := c.writeChunk(chunk)
		n += m
		if err != nil {
			return n, err
		}
		p = p[len(chunk):]
	}
	return n, nil
}

func (c *Conn) writeChunk(p []byte) (int, error) {
	if len(p) <= maxRecord {
		return c.Conn.Write(p)
	}
	// Never gather the handshake's own records: it waits for the peer's
	// answer to them. (Once done, Handshake is an atomic load.)
	if err := c.Conn.Handshake(); err != nil {
		return 0, err
	}
	c.g.mu.Lock()
	c.g.gathering, c.g.buf = true, gatherBufs.Get().(*[]byte)
	c.g.mu.Unlock()
	n, err := c.Conn.Write(p)
	if ferr := c.g.flush(); err == nil && ferr != nil {
		return 0, ferr // none of it reached the socket
	}
	return n, err
}

// gatherer is the socket under a Conn's tls.Conn: while gathering, the
// records crypto/tls writes are kept in buf (from a pool shared by all
// conns: an idle conn holds none), and flush sends them in one write.
// Writes that are not the Conn's own (crypto/tls answering a key update
// or closing, from another goroutine) keep their order: they are
// gathered too while a gathered Write is under way.
type gatherer struct {
	net.Conn
	mu        sync.Mutex // guards the rest; held across the socket write
	gathering bool
	buf       *[]byte // while gathering
	err       error   // the first failed socket write: every later one fails

	// The read side (crypto/tls reads under its own lock, one reader at
	// a time): rbuf holds rpos..len unread bytes, nil when there are none.
	rbuf *[]byte
	rpos int
}

var readBufs = sync.Pool{New: func() any { b := make([]byte, ReadChunk); return &b }}

// Read hands out what the last socket read left, or reads up to ReadChunk
// from the socket (one syscall) and hands out the start of it. A caller
// asking for ReadChunk or more reads the socket directly.
func (g *gatherer) Read(p []byte) (int, error) {
	if g.rbuf == nil {
		if len(p) >= ReadChunk {
			return g.Conn.Read(p)
		}
		b := readBufs.Get().(*[]byte)
		n, err := g.Conn.Read((*b)[:ReadChunk])
		if n == 0 {
			readBufs.Put(b)
			return 0, err
		}
		g.rbuf, g.rpos = b, 0
		*b = (*b)[:n]
		// err (with n > 0) is the socket's next answer anyway.
	}
	n := copy(p, (*g.rbuf)[g.rpos:])
	g.rpos += n
	if g.rpos == len(*g.rbuf) {
		*g.rbuf = (*g.rbuf)[:ReadChunk]
		readBufs.Put(g.rbuf)
		g.rbuf = nil
	}
	return n, nil
}

// gatherBufs holds the gathering buffers: GatherMax of data sealed in
// 16 KiB records grows by 22 bytes a record (TLS 1.3 AES-GCM).
var gatherBufs = sync.Pool{New: func() any { b := make([]byte, 0, GatherMax+GatherMax/64); return &b }}

func (g *gatherer) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return 0, g.err
	}
	if g.gathering {
		*g.buf = append(*g.buf, p...)
		return len(p), nil
	}
	n, err := g.Conn.Write(p)
	if err != nil {
		g.err = err
	}
	return n, err
}

// flush ends gathering: what was gathered goes out in one write.
func (g *gatherer) flush() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	b := *g.buf
	g.gathering = false
	if len(b) > 0 && g.err == nil {
		if _, err := g.Conn.Write(b); err != nil {
			g.err = err
		}
	}
	if cap(b) <= 2*(GatherMax+GatherMax/64) { // not an oversize record's
		*g.buf = b[:0]
		gatherBufs.Put(g.buf)
	}
	g.buf = nil
	return g.err
}
