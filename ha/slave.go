package ha

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Slave defaults.
const (
	DefaultMaxTransfer = 16 << 20
	DefaultMinBackoff  = 100 * time.Millisecond
	DefaultMaxBackoff  = 5 * time.Second
)

// SlaveOptions configure a Slave. Zero fields take the defaults.
type SlaveOptions struct {
	// Master is the master's HA address: required unless Resolve is set,
	// and the fallback when Resolve answers "".
	Master string
	// Resolve, if set, is called before each dial; a non-empty answer is
	// the address dialled (e.g. the lease holder's, or the one the name
	// server reported).
	Resolve    func() string
	BrokerName string   // sent in the hello
	Log        Appender // required
	// Secret, if set, is the shared secret the hello is signed with (and
	// the master's reply checked against); it is called at every dial.
	// Without one (nil, or an empty answer) the slave follows a master on
	// its own host (loopback) only.
	Secret func() []byte
	// MinEpoch is the lowest epoch accepted (e.g. the one this data dir
	// last followed); transfers below any epoch seen are refused.
	MinEpoch int64
	// OnDiverged, if set, is called when the master refuses the slave
	// because its log goes past cut, where a newer epoch took the log over
	// (StatusDiverged): the owner cuts the log there (store.CutLog) and
	// starts a new Slave.
	OnDiverged func(cut int64)
	// OnBeforeLogStart, if set, is called when the master refuses the
	// slave because its log ends before the master's local log starts, at
	// an offset the master cannot read (StatusBeforeLogStart): the owner
	// starts its log again at start.
	OnBeforeLogStart func(start int64)
	// OnAppendError, if set, is called with the error of an append of the
	// master's bytes that Log refused, before the connection ends (and is
	// dialed again): the owner may judge that this log cannot follow the
	// master's (e.g. it numbers a queue otherwise) and start over.
	OnAppendError func(err error)
	// OnAccepted, if set, is called once the master accepted a hello,
	// with the master's epoch, before anything it sends is appended: the
	// master checked the log against its epochs, so the log agrees with
	// that epoch (the owner records it). An error ends the session.
	OnAccepted     func(epoch int64) error
	ReportInterval time.Duration // default 5 s
	IdleTimeout    time.Duration // default 20 s
	MaxTransfer    int           // a transfer body above it is malformed, default 16 MiB
	MinBackoff     time.Duration // redial backoff, default 100 ms doubling to MaxBackoff
	MaxBackoff     time.Duration // default 5 s
	Logger         *slog.Logger
	// Dial, if set, connects to the master (TLS); it returns within
	// timeout. Default: a TCP dial.
	Dial func(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error)
}

func (o SlaveOptions) withDefaults() (SlaveOptions, error) {
	if o.Log == nil || (o.Master == "" && o.Resolve == nil) {
		return o, errors.New("ha: SlaveOptions.Log and Master (or Resolve) are required")
	}
	if len(o.BrokerName) > MaxNameLen {
		return o, fmt.Errorf("ha: broker name of %d bytes (limit %d)", len(o.BrokerName), MaxNameLen)
	}
	if o.ReportInterval <= 0 {
		o.ReportInterval = DefaultReportInterval
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxTransfer <= 0 {
		o.MaxTransfer = DefaultMaxTransfer
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// SlaveState is a slave's replication state, for metrics.
type SlaveState struct {
	Connected    bool
	Dialed       string    // the HA address of the current (or last) connection
	MasterAddr   string    // the master's advertised remoting address, from its last hello reply
	Epoch        int64     // highest master epoch seen
	Acked        int64     // the offset last reported to the master
	MasterMax    int64     // the master's end of log, from its last transfer
	Lag          int64     // MasterMax − the local end, bytes
	LastCaughtUp time.Time // when the local end last reached MasterMax
	Sessions     int64     // connections that passed the hello
	Refused      int64     // connections dropped for an older epoch
	Received     int64     // body bytes appended
}

// Slave follows a master's HA stream into its Appender until Close.
type Slave struct {
	opts   SlaveOptions
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	st SlaveState // but Epoch: State takes it from epoch

	epoch atomic.Int64 // highest master epoch seen
}

// StartSlave starts following opts.Master (or where opts.Resolve points).
func StartSlave(opts SlaveOptions) (*Slave, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Slave{opts: o, log: o.Logger.With("component", "ha-slave"), cancel: cancel, done: make(chan struct{})}
	s.epoch.Store(o.MinEpoch)
	go s.run(ctx)
	return s, nil
}

// Close stops following and waits for the slave's goroutines (an append in
// progress finishes first).
func (s *Slave) Close() error {
	s.cancel()
	<-s.done
	return nil
}

// State reports the slave's replication state.
func (s *Slave) State() SlaveState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Epoch = s.epoch.Load()
	if st.MasterMax > 0 {
		st.Lag = max(0, st.MasterMax-s.opts.Log.MaxPhysOffset())
	}
	return st
}

func (s *Slave) run(ctx context.Context) {
	defer close(s.done)
	backoff := s.opts.MinBackoff
	for ctx.Err() == nil {
		progressed, err := s.session(ctx)
		s.mu.Lock()
		s.st.Connected = false
		if errors.Is(err, ErrEpochRegressed) {
			s.st.Refused++
		}
		s.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if progressed {
			backoff = s.opts.MinBackoff
		}
		s.log.Warn("ha: replication connection ended; redialing", "master", s.State().Dialed, "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, s.opts.MaxBackoff)
	}
}

// session runs one connection; progressed reports whether it got past the
// hello.
func (s *Slave) session(ctx context.Context) (progressed bool, err error) {
	addr := s.opts.Master
	if s.opts.Resolve != nil {
		if a := s.opts.Resolve(); a != "" {
			addr = a
		}
	}
	if addr == "" {
		return false, errors.New("no master address known yet (SlaveOptions.Resolve answered none and Master is empty)")
	}
	s.mu.Lock()
	s.st.Dialed = addr
	s.mu.Unlock()
	dial := s.opts.Dial
	if dial == nil {
		dial = func(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
			d := net.Dialer{Timeout: timeout}
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	c, err := dial(ctx, addr, s.opts.IdleTimeout)
	if err != nil {
		return false, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()

	var secret []byte
	if s.opts.Secret != nil {
		secret = s.opts.Secret()
	}
	if len(secret) == 0 && !isLoopback(c.RemoteAddr()) {
		return false, fmt.Errorf("%w: no HA secret is set, and the master %s is on another host: set STRATAMQ_HA_SECRET on master and slaves", ErrAuth, addr)
	}
	c.SetDeadline(time.Now().Add(s.opts.IdleTimeout))
	ch, err := readChallenge(c)
	if err != nil {
		return false, fmt.Errorf("reading the master's challenge: %w", err)
	}
	if ch.flags&flagSecret != 0 && len(secret) == 0 {
		return false, fmt.Errorf("%w: the master has an HA secret and this slave none: set STRATAMQ_HA_SECRET", ErrAuth)
	}
	if ch.flags&flagSecret == 0 && len(secret) > 0 {
		return false, fmt.Errorf("%w: this slave has an HA secret and the master none: set the same STRATAMQ_HA_SECRET on both", ErrAuth)
	}
	pos := s.opts.Log.MaxPhysOffset()
	h := hello{version: Version, name: s.opts.BrokerName, offset: pos, epoch: s.epoch.Load()}
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return false, err
	}
	if _, err := c.Write(appendSignedHello(nil, h, secret, ch.nonce)); err != nil {
		return false, fmt.Errorf("sending hello: %w", err)
	}
	r, err := readReply(c, secret, h.nonce, ch.nonce)
	if err != nil {
		return false, fmt.Errorf("reading the master's reply: %w", err)
	}
	c.SetDeadline(time.Time{})
	if r.status == StatusDiverged && s.opts.OnDiverged != nil {
		s.opts.OnDiverged(r.masterMax)
	}
	if r.status == StatusBeforeLogStart && s.opts.OnBeforeLogStart != nil {
		s.opts.OnBeforeLogStart(r.masterMax)
	}
	if r.status != StatusOK {
		return false, fmt.Errorf("the master refused this slave (log ends at %d, master's at %d): %s", pos, r.masterMax, statusText(r.status))
	}
	if err := s.checkEpoch(r.epoch); err != nil {
		return false, err
	}
	if s.opts.OnAccepted != nil {
		if err := s.opts.OnAccepted(r.epoch); err != nil {
			return false, fmt.Errorf("recording the master's epoch %d: %w", r.epoch, err)
		}
	}
	s.mu.Lock()
	s.st.Connected, s.st.Sessions, s.st.Acked, s.st.MasterMax = true, s.st.Sessions+1, pos, r.masterMax
	s.st.MasterAddr = r.advertise
	if pos >= r.masterMax {
		s.st.LastCaughtUp = time.Now()
	}
	s.mu.Unlock()
	s.log.Info("ha: following the master", "master", addr, "masterAddr", r.advertise, "offset", pos, "masterMax", r.masterMax, "epoch", r.epoch)

	rep := &reporter{s: s, c: c, acked: pos}
	repDone := make(chan error, 1)
	repCtx, repStop := context.WithCancel(ctx)
	go func() {
		err := s.report(repCtx, rep)
		c.Close() // stops the reader
		repDone <- err
	}()
	err = s.receive(c, pos, rep)
	repStop()
	c.Close()
	rerr := <-repDone
	if err == nil || errors.Is(err, net.ErrClosed) {
		if rerr != nil && !errors.Is(rerr, context.Canceled) {
			err = rerr
		}
	}
	return true, err
}

// checkEpoch refuses an epoch below the highest seen and raises it (only
// run's goroutine calls it; State reads it).
func (s *Slave) checkEpoch(e int64) error {
	seen := s.epoch.Load()
	if e < seen {
		return fmt.Errorf("%w: the master sent epoch %d, this slave has seen %d", ErrEpochRegressed, e, seen)
	}
	if e > seen {
		s.epoch.Store(e)
	}
	return nil
}

// reporter sends the slave's applied end to the master, with the CRC-32C
// of the session's stream up to it (its proof: the master counts an ack
// only with it): the receiver after each transfer it appended (at once,
// on its own goroutine: no wakeup of another between the append and the
// report, which a sync_master's send waits for), and the report loop
// every ReportInterval. mu keeps the reports in order: a report never goes
// out below one sent before it (the master refuses a report that goes
// back).
type reporter struct {
	s     *Slave
	c     net.Conn
	mu    sync.Mutex
	acked int64  // the applied end
	sum   uint32 // CRC-32C of the bodies appended this session, up to acked
}

// advance records the applied end and its checksum, and reports them.
func (r *reporter) advance(off int64, sum uint32) error {
	r.mu.Lock()
	r.acked, r.sum = off, sum
	r.mu.Unlock()
	return r.send()
}

func (r *reporter) send() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	off := r.acked
	var b [reportLen]byte
	r.c.SetWriteDeadline(time.Now().Add(r.s.opts.IdleTimeout))
	if _, err := r.c.Write(appendReport(b[:0], off, r.sum)); err != nil {
		return fmt.Errorf("sending a report: %w", err)
	}
	r.s.mu.Lock()
	r.s.st.Acked = off
	r.s.mu.Unlock()
	return nil
}

// report sends the applied end every ReportInterval (the receiver reports
// each transfer itself).
func (s *Slave) report(ctx context.Context, rep *reporter) error {
	t := time.NewTicker(s.opts.ReportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := rep.send(); err != nil {
			return err
		}
	}
}

// receiveBuffer is the slave's read buffer on its HA connection.
const receiveBuffer = 64 << 10

// receive reads transfers and appends them. It reads through a buffer
// of receiveBuffer bytes: a transfer's header and a body that fits come
// in one read syscall, not two (the read is on the path of every
// sync_master ack); a larger body is read straight into its own buffer.
func (s *Slave) receive(c net.Conn, pos int64, rep *reporter) error {
	var hb [headerLen]byte
	var body []byte
	var sum uint32 // CRC-32C of the bodies appended this session
	br := bufio.NewReaderSize(c, receiveBuffer)
	for {
		c.SetReadDeadline(time.Now().Add(s.opts.IdleTimeout))
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			return fmt.Errorf("reading a transfer header: %w", err)
		}
		h := parseHeader(hb[:])
		if h.size < 0 || int(h.size) > s.opts.MaxTransfer {
			return fmt.Errorf("%w: transfer of %d bytes (limit %d)", ErrProtocol, h.size, s.opts.MaxTransfer)
		}
		if h.phyOffset != pos {
			return fmt.Errorf("%w: transfer at %d, this slave's log ends at %d", ErrProtocol, h.phyOffset, pos)
		}
		if err := s.checkEpoch(h.epoch); err != nil {
			return err
		}
		if h.masterMax < h.phyOffset+int64(h.size) {
			return fmt.Errorf("%w: transfer [%d, %d) past the master's end %d", ErrProtocol, h.phyOffset, h.phyOffset+int64(h.size), h.masterMax)
		}
		if cap(body) < int(h.size) || (cap(body) > 4<<20 && h.size <= 1<<20) {
			body = make([]byte, h.size)
		}
		body = body[:h.size]
		if _, err := io.ReadFull(br, body); err != nil {
			return fmt.Errorf("reading a transfer of %d bytes at %d: %w", h.size, h.phyOffset, err)
		}
		if h.size > 0 {
			if err := s.opts.Log.AppendRaw(h.phyOffset, body); err != nil {
				if s.opts.OnAppendError != nil {
					s.opts.OnAppendError(err)
				}
				return fmt.Errorf("appending %d bytes at %d: %w", h.size, h.phyOffset, err)
			}
			pos += int64(h.size)
			sum = crc32.Update(sum, castagnoli, body)
			if err := rep.advance(pos, sum); err != nil {
				return err
			}
		}
		s.mu.Lock()
		s.st.MasterMax = h.masterMax
		s.st.Received += int64(h.size)
		if pos >= h.masterMax {
			s.st.LastCaughtUp = time.Now()
		}
		s.mu.Unlock()
	}
}
