package ha

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/store"
)

// Master defaults.
const (
	DefaultListen            = ":10912"
	DefaultMaxLag            = 256 << 20
	DefaultBatchSize         = 256 << 10
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultIdleTimeout       = 20 * time.Second
	DefaultPollInterval      = 100 * time.Millisecond
	DefaultReportInterval    = 5 * time.Second
)

// MasterOptions configure a Master. Zero fields take the defaults.
type MasterOptions struct {
	Listen     string       // default DefaultListen
	Log        Log          // required
	Epoch      func() int64 // the lease's epoch, stamped on every transfer (nil: 0)
	BrokerName string       // if set, a hello naming another broker is refused
	// Advertise is the master's remoting address (host:port, ≤ MaxAddrLen
	// bytes), sent in every hello reply: a slave polls its topics, groups
	// and offsets there.
	Advertise string
	MaxLag    int64 // WaitAcked's bound on the best slave's lag, default 256 MiB
	// MinInSync is how many copies, the master's included, must hold a
	// record before an AwaitAck for it succeeds (RocketMQ's
	// minInSyncReplicas): 2 (the default) needs a slave's ack; 1 lets the
	// master acknowledge alone while no slave is in sync (insync.go
	// defines it), counted in AckedAlone. WaitAcked always needs a slave.
	// Larger values are refused.
	MinInSync int
	// Diverged, if set, says where a log last written under slaveEpoch (an
	// epoch below the master's) must be cut to agree with the master's
	// (ok false: the master cannot tell). A slave whose log goes past that
	// point is refused with StatusDiverged.
	Diverged func(slaveEpoch int64) (cut int64, ok bool)
	// OnAcked, if set, is called after every report of a slave (advancing
	// its ack or not: meanwhile the master's end may have left it beyond
	// MaxLag) and after a slave connects or goes, when what Acked answers
	// may have changed. It runs on a connection's goroutine and must not
	// block.
	OnAcked func()
	// BatchSize bounds a transfer's body (and the per-slave buffer), default
	// 256 KiB; a single bigger record is sent whole.
	BatchSize         int
	HeartbeatInterval time.Duration // default 5 s
	IdleTimeout       time.Duration // default 20 s
	PollInterval      time.Duration // fallback to Notify, default 100 ms
	Logger            *slog.Logger  // default slog.Default()
	// WrapListener, if set, wraps the listener (TLS).
	WrapListener func(net.Listener) net.Listener
	// Listener, if set, binds Listen in place of a TCP listen (an
	// in-memory network in tests).
	Listener func(addr string) (net.Listener, error)
}

func (o MasterOptions) withDefaults() (MasterOptions, error) {
	if o.Log == nil {
		return o, errors.New("ha: MasterOptions.Log is required")
	}
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if len(o.Advertise) > MaxAddrLen {
		return o, fmt.Errorf("ha: MasterOptions.Advertise of %d bytes (limit %d)", len(o.Advertise), MaxAddrLen)
	}
	if o.Epoch == nil {
		o.Epoch = func() int64 { return 0 }
	}
	if o.MaxLag <= 0 {
		o.MaxLag = DefaultMaxLag
	}
	if o.MinInSync <= 0 {
		o.MinInSync = 2
	}
	if o.MinInSync > 2 {
		return o, fmt.Errorf("ha: MasterOptions.MinInSync %d: want 1 or 2 (an ack needs one slave at most)", o.MinInSync)
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// SlaveStatus is the master's view of one connected slave.
type SlaveStatus struct {
	Remote     string
	Name       string
	Start      int64     // the offset its hello reported: where streaming began
	Sent       int64     // end of what the master has sent it
	Acked      int64     // its last report
	Lag        int64     // master end − Acked, bytes
	LastReport time.Time // when its last report (or hello) arrived
	InSync     bool      // in the in-sync set (insync.go)
}

// Master serves the HA stream to slaves. Start it with StartMaster, stop it
// with Close.
type Master struct {
	opts MasterOptions
	ln   net.Listener
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	newData chan struct{} // closed and replaced by Notify
	armed   atomic.Bool   // someone took newData since the last Notify
	// pushers counts the HoldNotify calls whose Push has not come yet:
	// while there are any, Notify only sets pending (the Push sends the
	// bytes on its own goroutine, or wakes the streams).
	pushers atomic.Int32
	pending atomic.Bool

	mu      sync.Mutex
	conns   map[*slaveConn]struct{}
	acked   chan struct{} // closed and replaced when an ack advances or the slave set changes
	waiters ackWaiters    // AwaitAck's, settled where acked is closed
	stopped bool

	ackedAlone atomic.Int64 // waits settled with no slave holding the bytes (MinInSync 1)
}

type slaveConn struct {
	c          net.Conn
	remote     string
	name       string
	start      int64
	sent       int64
	acked      int64
	lastReport time.Time
	// The in-sync accounting (insync.go), under Master.mu: lapsed is set
	// while the slave is out of the in-sync set; mark is the master's end
	// at its previous report (or hello, or lapse), which a report must
	// reach for it to be in sync again.
	lapsed bool
	mark   int64

	// sendMu is held by whoever sends to this slave: its stream goroutine,
	// or a Push on a sending goroutine. It guards pos, buf and lastSend.
	sendMu   sync.Mutex
	pos      int64 // the next offset to send
	buf      []byte
	lastSend time.Time
	sentTo   atomic.Int64 // pos, for Push's check without sendMu
	live     atomic.Bool  // streaming: pos and buf are set
}

// StartMaster listens on opts.Listen and serves slaves until Close.
func StartMaster(opts MasterOptions) (*Master, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	listen := o.Listener
	if listen == nil {
		listen = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	ln, err := listen(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("ha: listen on %s: %w", o.Listen, err)
	}
	if o.WrapListener != nil {
		ln = o.WrapListener(ln)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Master{opts: o, ln: ln, log: o.Logger.With("component", "ha-master"), ctx: ctx, cancel: cancel,
		newData: make(chan struct{}), conns: map[*slaveConn]struct{}{}, acked: make(chan struct{})}
	m.wg.Add(1)
	go m.accept()
	return m, nil
}

// Addr is the listener's address.
func (m *Master) Addr() net.Addr { return m.ln.Addr() }

// Notify tells the master that new log bytes were written; the writer calls
// it after each write (polling every PollInterval covers a missed call). It
// is cheap enough to call per record (store.Options.OnDispatch).
func (m *Master) Notify() {
	if m.pushers.Load() > 0 {
		// Stored before pushers is read again: a Push that ends after
		// this read sees it.
		m.pending.Store(true)
		if m.pushers.Load() > 0 {
			return
		}
	}
	m.wake()
}

// wake wakes the stream goroutines waiting for new bytes.
func (m *Master) wake() {
	if !m.armed.Swap(false) {
		return // nobody waits since the last Notify: one atomic op per write
	}
	m.mu.Lock()
	close(m.newData)
	m.newData = make(chan struct{})
	m.mu.Unlock()
}

// HoldNotify tells the master that the caller is about to write records
// and will call Push once they are in the log: their Notify need not wake
// the stream goroutines. Every HoldNotify must be followed by one Push.
func (m *Master) HoldNotify() { m.pushers.Add(1) }

// Push ends a HoldNotify: it sends what the log holds past each slave's
// position, on the caller's goroutine, to every slave that is idle (its
// stream goroutine waits and it acked all it was sent: its receiver is
// reading), and wakes the stream goroutines of the others (and of any
// bytes another writer announced meanwhile). A sync_master's send calls
// it before it waits for the slave's ack: its bytes leave without a
// goroutine handoff, a thread wakeup on a busy machine. A write not done
// by deadline (the sender's ack timeout) or failed closes that slave's
// connection: its session ends, as on a stream goroutine's failed write,
// and the slave reconnects from what it holds.
func (m *Master) Push(deadline time.Time) {
	var arr [4]*slaveConn
	conns := arr[:0]
	wake := false
	m.mu.Lock()
	for sc := range m.conns {
		if sc.acked < sc.sent {
			wake = true // busy: its stream goroutine batches
			continue
		}
		conns = append(conns, sc)
	}
	m.mu.Unlock()
	for _, sc := range conns {
		if !sc.live.Load() || !sc.sendMu.TryLock() {
			wake = true // its stream goroutine is sending (it looks at the end again after), or not started
			continue
		}
		for range 4 { // a bound: a stream goroutine takes over past it
			sent, err := m.sendPending(sc, deadline)
			if err != nil {
				sc.c.Close()
				break
			}
			if !sent {
				break
			}
		}
		sc.sendMu.Unlock()
	}
	m.pushers.Add(-1)
	if m.pending.Swap(false) && !wake {
		end := m.opts.Log.MaxPhysOffset()
		for _, sc := range conns {
			if sc.live.Load() && sc.sentTo.Load() < end {
				wake = true
			}
		}
	}
	if wake {
		m.wake()
	}
}

func (m *Master) dataCh() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.armed.Store(true)
	return m.newData
}

// wakeAckedLocked wakes WaitAcked callers.
func (m *Master) wakeAckedLocked() {
	close(m.acked)
	m.acked = make(chan struct{})
}

// Close stops the listener, drops every slave connection and waits for the
// master's goroutines.
func (m *Master) Close() error {
	m.mu.Lock()
	m.stopped = true
	for sc := range m.conns {
		sc.c.Close()
	}
	m.mu.Unlock()
	m.cancel()
	err := m.ln.Close()
	m.wg.Wait()
	m.mu.Lock()
	settled := m.settleLocked(nil) // stopped: every wait fails
	if m.waiters.timer != nil {
		m.waiters.timer.Stop()
	}
	m.mu.Unlock()
	runSettled(settled)
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Slaves lists the connected slaves.
func (m *Master) Slaves() []SlaveStatus {
	end := m.opts.Log.MaxPhysOffset()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []SlaveStatus
	for sc := range m.conns {
		if sc.lastReport.IsZero() {
			continue // no hello yet (the hello sets it)
		}
		out = append(out, SlaveStatus{Remote: sc.remote, Name: sc.name, Start: sc.start, Sent: sc.sent,
			Acked: sc.acked, Lag: max(0, end-sc.acked), LastReport: sc.lastReport, InSync: m.inSyncLocked(sc, end)})
	}
	return out
}

// Acked is the highest offset a connected slave acked, and whether that
// slave lags at most MaxLag, so that WaitAcked (MinInSync 2) would wait for
// it rather than answer ErrSlaveNotAvailable at once. Without a slave it
// returns (-1, false). InSync is the in-sync set of MinInSync 1.
func (m *Master) Acked() (best int64, inSync bool) {
	end := m.opts.Log.MaxPhysOffset()
	m.mu.Lock()
	best, any := m.bestLocked()
	m.mu.Unlock()
	return best, any && end-best <= m.opts.MaxLag
}

// bestLocked is the highest ack of the connected slaves (-1 and false
// without one). m.mu is held.
func (m *Master) bestLocked() (best int64, any bool) {
	best = -1
	for sc := range m.conns {
		if sc.lastReport.IsZero() {
			continue // no hello yet
		}
		any = true
		best = max(best, sc.acked)
	}
	return best, any
}

// acksChanged calls OnAcked. m.mu is not held.
func (m *Master) acksChanged() {
	if m.opts.OnAcked != nil {
		m.opts.OnAcked()
	}
}

// WaitAcked waits until some slave has acked off. It returns
// ErrSlaveNotAvailable at once when no slave is connected or the best slave
// lags more than MaxLag, and ErrSlaveTimeout when ctx ends first. Unlike
// AwaitAck it never succeeds alone, whatever MinInSync: it is the check
// that a slave holds off (a planned handover's), not a send's
// acknowledgement.
func (m *Master) WaitAcked(ctx context.Context, off int64) error {
	for {
		m.mu.Lock()
		err, over, _ := m.ackStateLocked(off, false)
		ch := m.acked
		m.mu.Unlock()
		if over {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			m.mu.Lock()
			best, _ := m.bestLocked()
			m.mu.Unlock()
			return fmt.Errorf("%w: no slave acked offset %d (best %d): %w", ErrSlaveTimeout, off, best, context.Cause(ctx))
		}
	}
}

func (m *Master) accept() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if m.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				m.log.Error("ha: accept failed; the HA listener stops", "err", err)
			}
			return
		}
		sc := &slaveConn{c: c, remote: c.RemoteAddr().String()}
		m.mu.Lock()
		if m.stopped {
			m.mu.Unlock()
			c.Close()
			return
		}
		m.conns[sc] = struct{}{}
		m.mu.Unlock()
		m.wg.Add(1)
		go m.serve(sc)
	}
}

func (m *Master) serve(sc *slaveConn) {
	defer m.wg.Done()
	err := m.session(sc)
	sc.c.Close()
	m.mu.Lock()
	delete(m.conns, sc)
	m.wakeAckedLocked()
	settled := m.settleLocked(nil)
	m.mu.Unlock()
	runSettled(settled)
	m.acksChanged()
	switch {
	case m.ctx.Err() != nil:
	case errors.Is(err, io.EOF):
		m.log.Info("ha: slave disconnected", "remote", sc.remote, "name", sc.name)
	default:
		m.log.Warn("ha: slave connection dropped", "remote", sc.remote, "name", sc.name, "err", err)
	}
}

// diverged reports whether h's log goes past where the master's epochs
// took the log over from h's epoch, and sets r to say so.
func (m *Master) diverged(h hello, r *reply) bool {
	if m.opts.Diverged == nil {
		return false
	}
	cut, ok := m.opts.Diverged(h.epoch)
	if !ok {
		cut = 0 // unknown: the slave must start over from the bucket
	}
	if cut < 0 || (ok && h.offset <= cut) {
		return false
	}
	r.status, r.masterMax = StatusDiverged, cut
	return true
}

// recordBoundary checks that off, where a slave says its log ends, is
// where a record of the master's log begins (or the log's end): the
// stream from there is whole records, and the slave's report of off is
// an offset the master's log has a record boundary at. A record carries
// its own offset (PHYSICALOFFSET), so a mid-record offset is refused.
func (m *Master) recordBoundary(off, end int64) error {
	if off == end {
		return nil
	}
	var hdr [recordPhysEnd]byte
	n, err := m.opts.Log.ReadLog(m.ctx, off, hdr[:])
	if err != nil {
		return err
	}
	if n >= 8 && binary.BigEndian.Uint32(hdr[4:]) == store.MagicFiller {
		return nil // the filler that ends a segment: the next record follows it
	}
	if n < len(hdr) {
		return fmt.Errorf("only %d bytes of a record header at %d", n, off)
	}
	if binary.BigEndian.Uint32(hdr[4:]) != store.MagicV1 || int64(binary.BigEndian.Uint64(hdr[recordPhysOff:])) != off {
		return fmt.Errorf("offset %d is not where a record of the master's log begins", off)
	}
	return nil
}

func (m *Master) session(sc *slaveConn) error {
	c := sc.c
	c.SetReadDeadline(time.Now().Add(m.opts.IdleTimeout))
	h, err := readHello(c)
	if err != nil {
		return fmt.Errorf("reading hello: %w", err)
	}
	end := m.opts.Log.MaxPhysOffset()
	r := reply{status: StatusOK, epoch: m.opts.Epoch(), masterMax: end, advertise: m.opts.Advertise}
	var refuse error
	switch {
	case h.version != Version:
		r.status, refuse = StatusBadVersion, fmt.Errorf("%w: slave speaks version %d, want %d", ErrProtocol, h.version, Version)
	case m.opts.BrokerName != "" && h.name != m.opts.BrokerName:
		r.status, refuse = StatusWrongBroker, fmt.Errorf("%w: slave of broker %q, this is %q", ErrProtocol, h.name, m.opts.BrokerName)
	case h.epoch < r.epoch && m.diverged(h, &r):
		// Epoch 0 too: a slave that cannot say which epoch its log agrees
		// with is judged as the oldest, never waved through.
		refuse = fmt.Errorf("%w: slave's log (epoch %d) ends at %d, past offset %d where a newer epoch took over", ErrProtocol, h.epoch, h.offset, r.masterMax)
	case h.offset > end:
		r.status, refuse = StatusOffsetOutOfRange, fmt.Errorf("%w: slave's log ends at %d, past the master's end %d", ErrProtocol, h.offset, end)
	default:
		if err := m.recordBoundary(h.offset, end); err != nil {
			r.status, refuse = StatusOffsetOutOfRange, fmt.Errorf("%w: slave's log ends at %d: %w", ErrProtocol, h.offset, err)
			if lm, ok := m.opts.Log.(interface{ LocalMinPhysOffset() int64 }); ok && h.offset < lm.LocalMinPhysOffset() {
				r.status, r.masterMax = StatusBeforeLogStart, lm.LocalMinPhysOffset()
			}
		}
	}
	c.SetWriteDeadline(time.Now().Add(m.opts.IdleTimeout))
	if _, err := c.Write(appendReply(nil, r)); err != nil {
		return fmt.Errorf("writing hello reply: %w", err)
	}
	if refuse != nil {
		return refuse
	}
	m.mu.Lock()
	sc.name, sc.start, sc.sent, sc.acked, sc.lastReport = h.name, h.offset, h.offset, h.offset, time.Now()
	m.helloInSyncLocked(sc, h.offset, end)
	m.wakeAckedLocked()
	settled := m.settleLocked(nil)
	m.mu.Unlock()
	runSettled(settled)
	m.acksChanged()
	m.log.Info("ha: slave connected", "remote", sc.remote, "name", h.name, "offset", h.offset, "masterMax", end)

	readErr := make(chan error, 1)
	readDone := make(chan struct{})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		err := m.readReports(sc)
		c.Close()       // stops a writer in Write
		close(readDone) // and one that waits for data
		readErr <- err
	}()
	werr := m.stream(sc, readDone)
	c.Close()
	rerr := <-readErr
	if rerr != nil && !errors.Is(rerr, net.ErrClosed) {
		return rerr
	}
	return werr
}

// readReports reads the slave's 8-byte reports until the connection fails.
// An ack that settles AwaitAck calls runs their callbacks here, on this
// goroutine.
func (m *Master) readReports(sc *slaveConn) error {
	var b [reportLen]byte
	var settled []ackWaiter
	for {
		sc.c.SetReadDeadline(time.Now().Add(m.opts.IdleTimeout))
		if _, err := io.ReadFull(sc.c, b[:]); err != nil {
			return err
		}
		off := int64(binary.BigEndian.Uint64(b[:]))
		m.mu.Lock()
		prev, sent := sc.acked, sc.sent
		if off < prev || off > sent {
			m.mu.Unlock()
			return fmt.Errorf("%w: report %d outside [%d, %d] (last ack, sent)", ErrProtocol, off, prev, sent)
		}
		sc.acked, sc.lastReport = off, time.Now()
		m.reportInSyncLocked(sc, off)
		if off > prev {
			m.wakeAckedLocked()
		}
		// Even without progress: the master's end may have left every
		// slave beyond MaxLag.
		settled = m.settleLocked(settled)
		m.mu.Unlock()
		settled = runSettled(settled)
		m.acksChanged()
	}
}

// stream sends the log from sc.start on, and heartbeats when idle. A Push
// may send for it meanwhile (sendMu).
func (m *Master) stream(sc *slaveConn, readDone <-chan struct{}) error {
	sc.sendMu.Lock()
	sc.buf, sc.pos, sc.lastSend = make([]byte, headerLen+m.opts.BatchSize), sc.start, time.Now()
	sc.sentTo.Store(sc.pos)
	sc.sendMu.Unlock()
	sc.live.Store(true)
	defer sc.live.Store(false)
	poll := time.NewTicker(min(m.opts.PollInterval, m.opts.HeartbeatInterval))
	defer poll.Stop()
	for {
		wake := m.dataCh() // before reading the end: a Notify after this wakes us
		sc.sendMu.Lock()
		sent, err := m.sendPending(sc, time.Time{})
		if err == nil && !sent && time.Since(sc.lastSend) >= m.opts.HeartbeatInterval {
			putHeader(sc.buf, header{phyOffset: sc.pos, epoch: m.opts.Epoch(), masterMax: m.opts.Log.MaxPhysOffset()})
			sc.c.SetWriteDeadline(time.Now().Add(m.opts.IdleTimeout))
			if _, werr := sc.c.Write(sc.buf[:headerLen]); werr != nil {
				err = fmt.Errorf("sending heartbeat: %w", werr)
			}
			sc.lastSend = time.Now()
		}
		sc.sendMu.Unlock()
		if err != nil {
			return err
		}
		if sent {
			continue
		}
		select {
		case <-wake:
		case <-poll.C:
		case <-readDone:
			return net.ErrClosed // the reader's error is the reason
		case <-m.ctx.Done():
			return m.ctx.Err()
		}
	}
}

// sendPending sends one transfer of the log from sc.pos towards its end,
// if there is anything past sc.pos, within IdleTimeout and deadline (if
// set); sc.sendMu is held.
func (m *Master) sendPending(sc *slaveConn, deadline time.Time) (sent bool, err error) {
	pos := sc.pos
	end := m.opts.Log.MaxPhysOffset()
	if pos >= end {
		return false, nil
	}
	body, err := m.cut(&sc.buf, pos, end)
	if err != nil {
		return false, err
	}
	putHeader(sc.buf, header{phyOffset: pos, epoch: m.opts.Epoch(), masterMax: end, size: int32(len(body))})
	// Raise sent before the write: the slave may report the bytes
	// before Write returns here.
	m.mu.Lock()
	sc.sent = pos + int64(len(body))
	m.mu.Unlock()
	d := time.Now().Add(m.opts.IdleTimeout)
	if !deadline.IsZero() && deadline.Before(d) {
		d = deadline
	}
	sc.c.SetWriteDeadline(d)
	if _, err := sc.c.Write(sc.buf[:headerLen+len(body)]); err != nil {
		return false, fmt.Errorf("sending %d bytes at %d: %w", len(body), pos, err)
	}
	sc.pos = pos + int64(len(body))
	sc.sentTo.Store(sc.pos)
	if len(sc.buf) > headerLen+m.opts.BatchSize {
		sc.buf = make([]byte, headerLen+m.opts.BatchSize) // drop a big record's buffer
	}
	sc.lastSend = time.Now()
	return true, nil
}

// cut reads the log at pos into (*buf)[headerLen:] and returns the longest
// prefix of whole records, at least one record (growing *buf for a record
// bigger than BatchSize).
func (m *Master) cut(buf *[]byte, pos, end int64) ([]byte, error) {
	for {
		body := (*buf)[headerLen:]
		if int64(len(body)) > end-pos {
			// The log may hold bytes past end already (written, not yet
			// in MaxPhysOffset); the transfer states end, and the slave
			// refuses one that passes it.
			body = body[:end-pos]
		}
		n, err := m.opts.Log.ReadLog(m.ctx, pos, body)
		if err != nil {
			return nil, fmt.Errorf("reading the log at %d: %w", pos, err)
		}
		body = body[:n]
		i, size := 0, 0
		for i+8 <= n {
			size = int(int32(binary.BigEndian.Uint32(body[i:])))
			if binary.BigEndian.Uint32(body[i+4:]) != store.MagicV1 || size < store.RecordOverhead || size > maxRecordLen {
				return nil, fmt.Errorf("the master's log holds no record at %d (size %d)", pos+int64(i), size)
			}
			if i+size > n {
				break
			}
			i += size
		}
		switch {
		case i > 0:
			return body[:i], nil
		case n < 8:
			return nil, fmt.Errorf("the master's log holds %d bytes at %d, not a whole record", n, pos)
		case pos+int64(size) > end:
			return nil, fmt.Errorf("the master's record at %d of %d bytes passes the log's end %d", pos, size, end)
		}
		*buf = make([]byte, headerLen+size) // one record bigger than the batch: read it again whole
	}
}
