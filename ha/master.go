package ha

import (
	"context"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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
	DefaultMaxConns          = 8
	DefaultStallTimeout      = 5 * time.Second
	// handshakeTimeout bounds the handshake (the hello must arrive within
	// it, or IdleTimeout if shorter): a real slave sends it at once.
	handshakeTimeout = 5 * time.Second
	// The window of a slave's stream: the master sends no more while a
	// slave has this many bytes, or transfers, it has not acknowledged
	// (at least one transfer is always allowed). A slave that reads
	// without acknowledging gets no further than this.
	maxUnackedBytes     = 32 << 20
	maxUnackedTransfers = 4096
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
	// Secret, if set, is the shared secret slaves sign their hello with
	// (and the master its reply): a slave that cannot sign is refused
	// before any byte of the log is sent. It is called at every hello, so
	// a changed secret applies to new connections. Without a secret (nil,
	// or an empty answer) only slaves on this host (loopback peers) are
	// accepted.
	Secret func() []byte
	// MaxConns is how many slaves are served at once (default 8); a slave
	// past it is refused StatusBusy. As many connections more may be in
	// their handshake: past that the oldest handshake is dropped.
	MaxConns int
	// StallTimeout: a slave that was sent bytes and acknowledged none of
	// them for this long (its ack did not advance) is stalled: not in
	// sync, and no reason to wait (default 5 s; the broker uses its ack
	// timeout).
	StallTimeout time.Duration
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
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	return o, nil
}

// secret is the secret in force now (nil without one).
func (o MasterOptions) secret() []byte {
	if o.Secret == nil {
		return nil
	}
	return o.Secret()
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
	// Stalled: it was sent bytes and its ack has not advanced for
	// StallTimeout (insync.go).
	Stalled bool
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

	// WARN lines anyone who reaches the port can cause, rate-limited.
	refusedLog rateLog // connections refused or dropped before or at the hello
	droppedLog rateLog // sessions of authenticated slaves that ended with an error
}

type slaveConn struct {
	c          net.Conn
	remote     string
	accepted   time.Time // when the connection was accepted
	name       string
	start      int64
	sent       int64 // the end of what was written to it, whole
	acked      int64
	lastReport time.Time // zero until its hello passed
	// The proof of its acks, under Master.mu: unacked are the transfers
	// sent (or being written) past acked, each with the CRC-32C of the
	// stream's bodies from start to its end; ackedSum is that CRC at
	// acked. A report must name one of them, with its CRC.
	unacked  []sentMark
	ackedSum uint32
	// waitingSince is when the slave last had bytes sent to it that it had
	// not acknowledged, without acknowledging any since (zero: it has
	// acknowledged all it was sent); a slave waited on past StallTimeout
	// is stalled (insync.go). Under Master.mu.
	waitingSince time.Time
	// The in-sync accounting (insync.go), under Master.mu: lapsed is set
	// while the slave is out of the in-sync set; mark is the master's end
	// at its previous report (or hello, or lapse), which a report must
	// reach for it to be in sync again.
	lapsed bool
	mark   int64

	// sendMu is held by whoever sends to this slave: its stream goroutine,
	// or a Push on a sending goroutine. It guards pos, buf and lastSend.
	sendMu   sync.Mutex
	pos      int64  // the next offset to send
	sum      uint32 // CRC-32C of the bodies sent from start to pos
	buf      []byte
	lastSend time.Time
	sentTo   atomic.Int64 // pos, for Push's check without sendMu
	live     atomic.Bool  // streaming: pos and buf are set
	parked   atomic.Bool  // the stream goroutine waits for a wake-up (tests)
}

// sentMark is the end of a transfer sent and the stream's CRC-32C there.
type sentMark struct {
	end int64
	sum uint32
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
			Acked: sc.acked, Lag: max(0, end-sc.acked), LastReport: sc.lastReport, InSync: m.inSyncLocked(sc, end),
			Stalled: m.stalledLocked(sc, time.Now())})
	}
	return out
}

// Acked is the highest offset a connected slave acked, and whether a
// slave that is not stalled lags at most MaxLag, so that WaitAcked
// (MinInSync 2) would wait for it rather than answer ErrSlaveNotAvailable
// at once. Without a slave it returns (-1, false). InSync is the in-sync
// set of MinInSync 1.
func (m *Master) Acked() (best int64, inSync bool) {
	end := m.opts.Log.MaxPhysOffset()
	m.mu.Lock()
	best, _ = m.bestLocked()
	live, any := m.liveBestLocked(time.Now())
	m.mu.Unlock()
	return best, any && end-live <= m.opts.MaxLag
}

// bestLocked is the highest ack of the connected slaves (-1 and false
// without one): every ack was proven (readReports), so the highest is
// held by a slave, whichever. m.mu is held.
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
		sc := &slaveConn{c: c, remote: c.RemoteAddr().String(), accepted: time.Now()}
		m.mu.Lock()
		if m.stopped {
			m.mu.Unlock()
			c.Close()
			return
		}
		evicted := m.evictHandshakeLocked()
		m.conns[sc] = struct{}{}
		m.mu.Unlock()
		if evicted != nil {
			evicted.c.Close()
			m.refusedLog.warn(m.log, "ha: too many connections in their handshake: dropped the oldest (a slave says its hello at once)",
				"remote", evicted.remote, "limit", m.opts.MaxConns)
		}
		m.wg.Add(1)
		go m.serve(sc)
	}
}

// evictHandshakeLocked picks the oldest connection still in its
// handshake when MaxConns of them are, to make room for a new one: a
// flood of connections that never say hello cannot hold the port. m.mu is
// held.
func (m *Master) evictHandshakeLocked() *slaveConn {
	var oldest *slaveConn
	n := 0
	for sc := range m.conns {
		if !sc.lastReport.IsZero() {
			continue
		}
		n++
		if oldest == nil || sc.accepted.Before(oldest.accepted) {
			oldest = sc
		}
	}
	if n < m.opts.MaxConns {
		return nil
	}
	return oldest
}

func (m *Master) serve(sc *slaveConn) {
	defer m.wg.Done()
	err := m.session(sc)
	sc.c.Close()
	m.mu.Lock()
	authed := !sc.lastReport.IsZero()
	delete(m.conns, sc)
	m.wakeAckedLocked()
	settled := m.settleLocked(nil)
	m.mu.Unlock()
	runSettled(settled)
	m.acksChanged()
	switch {
	case m.ctx.Err() != nil:
	case !authed:
		m.refusedLog.warn(m.log, "ha: connection refused", "remote", sc.remote, "name", sc.name, "err", err)
	case errors.Is(err, io.EOF):
		m.log.Info("ha: slave disconnected", "remote", sc.remote, "name", sc.name)
	default:
		m.droppedLog.warn(m.log, "ha: slave connection dropped", "remote", sc.remote, "name", sc.name, "err", err)
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
	c.SetDeadline(time.Now().Add(min(m.opts.IdleTimeout, handshakeTimeout)))
	secret := m.opts.secret()
	ch, err := newChallenge(len(secret) > 0)
	if err != nil {
		return fmt.Errorf("making a challenge: %w", err)
	}
	if _, err := c.Write(appendChallenge(nil, ch)); err != nil {
		return fmt.Errorf("writing the challenge: %w", err)
	}
	h, signed, err := readHello(c)
	if err != nil {
		return fmt.Errorf("reading hello: %w", err)
	}
	end := m.opts.Log.MaxPhysOffset()
	r := reply{status: StatusOK, epoch: m.opts.Epoch(), masterMax: end, advertise: m.opts.Advertise}
	var refuse error
	switch {
	case h.version != Version:
		r.status, refuse = StatusBadVersion, fmt.Errorf("%w: slave speaks version %d, want %d", ErrProtocol, h.version, Version)
	case len(secret) == 0 && !isLoopback(c.RemoteAddr()):
		r, refuse = reply{status: StatusAuthRequired}, fmt.Errorf("%w: no HA secret is set, and a slave from another host needs one (STRATAMQ_HA_SECRET on master and slaves)", ErrAuth)
	case !helloSigned(h, signed, secret, ch.nonce):
		r, refuse = reply{status: StatusAuthFailed}, fmt.Errorf("%w: the hello is not signed with this master's HA secret", ErrAuth)
	case m.sessionsFull():
		r, refuse = reply{status: StatusBusy}, fmt.Errorf("refused: %d slaves are served already (STRATAMQ_HA_MAX_CONNS)", m.opts.MaxConns)
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
	if _, err := c.Write(appendSignedReply(nil, r, secret, h.nonce, ch.nonce)); err != nil {
		return fmt.Errorf("writing hello reply: %w", err)
	}
	if refuse != nil {
		if h.version == Version && len(h.name) <= MaxNameLen {
			sc.name = h.name // for the log line; unauthenticated
		}
		return refuse
	}
	c.SetReadDeadline(time.Now().Add(m.opts.IdleTimeout))
	m.mu.Lock()
	if len(m.sessionsLocked()) >= m.opts.MaxConns {
		m.mu.Unlock()
		return fmt.Errorf("refused: %d slaves are served already (STRATAMQ_HA_MAX_CONNS)", m.opts.MaxConns)
	}
	sc.name, sc.start, sc.sent, sc.acked, sc.lastReport = h.name, h.offset, h.offset, h.offset, time.Now()
	if h.offset < end {
		sc.waitingSince = sc.lastReport
	}
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

// helloSigned reports whether h (signed: its bytes before the signature)
// is signed under secret for the challenge's nonce.
func helloSigned(h hello, signed, secret []byte, nonce [nonceLen]byte) bool {
	want := sign(secret, labelHello, [][]byte{nonce[:]}, signed)
	return hmac.Equal(h.mac[:], want[:])
}

// sessionsFull reports whether MaxConns slaves are served already.
func (m *Master) sessionsFull() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessionsLocked()) >= m.opts.MaxConns
}

// sessionsLocked are the connections past their hello. m.mu is held.
func (m *Master) sessionsLocked() []*slaveConn {
	var out []*slaveConn
	for sc := range m.conns {
		if !sc.lastReport.IsZero() {
			out = append(out, sc)
		}
	}
	return out
}

// readReports reads the slave's reports until the connection fails. An
// ack counts only for bytes the slave proves it holds: a report names the
// end of a transfer it was sent (or its last ack again) with the CRC-32C
// of the stream up to there, which only the bytes themselves give. An ack
// that settles AwaitAck calls runs their callbacks here, on this
// goroutine.
func (m *Master) readReports(sc *slaveConn) error {
	var b [reportLen]byte
	var settled []ackWaiter
	for {
		sc.c.SetReadDeadline(time.Now().Add(m.opts.IdleTimeout))
		if _, err := io.ReadFull(sc.c, b[:]); err != nil {
			return err
		}
		off, sum := int64(binary.BigEndian.Uint64(b[:])), binary.BigEndian.Uint32(b[8:])
		m.mu.Lock()
		prev := sc.acked
		if err := m.proveLocked(sc, off, sum); err != nil {
			m.mu.Unlock()
			return err
		}
		now := time.Now()
		sc.acked, sc.lastReport = off, now
		if off > prev {
			sc.waitingSince = time.Time{}
			if len(sc.unacked) > 0 {
				sc.waitingSince = now // progress; more is on its way
			}
		}
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

// proveLocked checks a report of off with the stream's CRC-32C sum
// against what sc was sent, and drops the proofs it passed. m.mu is held.
func (m *Master) proveLocked(sc *slaveConn, off int64, sum uint32) error {
	if off == sc.acked {
		if sum != sc.ackedSum {
			return fmt.Errorf("%w: report %d with checksum %08x, want %08x: the slave does not hold the bytes it acknowledges", ErrProtocol, off, sum, sc.ackedSum)
		}
		return nil
	}
	if off < sc.acked {
		return fmt.Errorf("%w: report %d below the last ack %d", ErrProtocol, off, sc.acked)
	}
	i := 0
	for i < len(sc.unacked) && sc.unacked[i].end < off {
		i++
	}
	if i == len(sc.unacked) || sc.unacked[i].end != off {
		return fmt.Errorf("%w: report %d is not the end of a transfer sent (last ack %d, sent %d)", ErrProtocol, off, sc.acked, sc.sent)
	}
	if want := sc.unacked[i].sum; sum != want {
		return fmt.Errorf("%w: report %d with checksum %08x, want %08x: the slave does not hold the bytes it acknowledges", ErrProtocol, off, sum, want)
	}
	sc.ackedSum = sum
	n := copy(sc.unacked, sc.unacked[i+1:])
	clear(sc.unacked[n:])
	sc.unacked = sc.unacked[:n]
	return nil
}

// stream sends the log from sc.start on, and heartbeats when idle. A Push
// may send for it meanwhile (sendMu).
func (m *Master) stream(sc *slaveConn, readDone <-chan struct{}) error {
	sc.sendMu.Lock()
	sc.buf, sc.pos, sc.sum, sc.lastSend = make([]byte, headerLen+m.opts.BatchSize), sc.start, 0, time.Now()
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
		sc.parked.Store(true)
		select {
		case <-wake:
		case <-poll.C:
		case <-readDone:
			return net.ErrClosed // the reader's error is the reason
		case <-m.ctx.Done():
			return m.ctx.Err()
		}
		sc.parked.Store(false)
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
	m.mu.Lock()
	full := len(sc.unacked) > 0 && (len(sc.unacked) >= maxUnackedTransfers || pos-sc.acked >= maxUnackedBytes)
	m.mu.Unlock()
	if full {
		return false, nil // the slave acknowledges first (the poll looks again)
	}
	body, err := m.cut(&sc.buf, pos, end)
	if err != nil {
		return false, err
	}
	putHeader(sc.buf, header{phyOffset: pos, epoch: m.opts.Epoch(), masterMax: end, size: int32(len(body))})
	// The proof of the transfer goes in before the write: the slave may
	// report it before Write returns here, but only with its CRC, which
	// it has only once it read the bytes. sent is raised once written.
	sum := crc32.Update(sc.sum, castagnoli, body)
	next := pos + int64(len(body))
	m.mu.Lock()
	sc.unacked = append(sc.unacked, sentMark{end: next, sum: sum})
	if sc.waitingSince.IsZero() {
		sc.waitingSince = time.Now()
	}
	m.mu.Unlock()
	d := time.Now().Add(m.opts.IdleTimeout)
	if !deadline.IsZero() && deadline.Before(d) {
		d = deadline
	}
	sc.c.SetWriteDeadline(d)
	if _, err := sc.c.Write(sc.buf[:headerLen+len(body)]); err != nil {
		return false, fmt.Errorf("sending %d bytes at %d: %w", len(body), pos, err)
	}
	m.mu.Lock()
	sc.sent = max(sc.sent, next)
	m.mu.Unlock()
	sc.pos, sc.sum = next, sum
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
