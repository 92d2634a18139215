package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/tier"
)

// Log is the local commitlog the writer ships from (a *store.Store).
type Log interface {
	// MaxPhysOffset is the end of the log: bytes below it are whole records.
	MaxPhysOffset() int64
	// ReadLog copies log bytes from off into p, returning how many (at
	// most up to MaxPhysOffset).
	ReadLog(ctx context.Context, off int64, p []byte) (int, error)
}

// Config configures a Writer. Zero values mean the documented default.
type Config struct {
	Bucket tier.Bucket // required: prefixed at the brokerName
	Dir    string      // key prefix of the objects; default "wal/"
	Log    Log         // required
	// Linger is how long the first send waiting for the WAL may wait for
	// more before its object is written. Default 200ms.
	Linger time.Duration
	// Batch is the most log bytes in one object (an object holds whole
	// records, so one larger record makes an object of its own); pending
	// bytes past it are written at once. Default 4 MiB.
	Batch int
	// InFlight is how many objects may be being written at once. Default 4.
	InFlight int
	// Fence, if set, is asked before every bucket write: an error defers
	// it (the writer backs off and asks again); the epoch is stamped in
	// the claim. ValidFor, if set, bounds each attempt by the lease's
	// remaining validity.
	Fence    func() (epoch int64, err error)
	ValidFor func() time.Duration
	// AttemptTimeout bounds one PUT attempt. Default 30s.
	AttemptTimeout time.Duration
	// Hedge: an object's PUT not answered within this long is sent again
	// beside it, and the first to land commits it (the same bytes under
	// the same conditional key, so either is the object; a slow tail PUT
	// no longer holds every send behind it). 0: twice the median of the
	// last PUTs' latencies (at least 20ms, at most 1s; none before 8 have
	// landed). Negative: never.
	Hedge time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential backoff
	// after a failed attempt. Defaults 50ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// Active, if set, says whether the WAL is in use (some topic is
	// bucket-durable): while it is, pending bytes are written with no send
	// waiting, at once when Batch are pending (a send never waits behind a
	// long backlog), else a Linger after they appeared (readers of
	// bucket-durable topics see nothing the WAL lacks).
	Active func() bool
	// OnDurable, if set, is called (on the writer's goroutine, must not
	// block) each time Durable advances.
	OnDurable func(end int64)
	// Held, if set, returns what the manifest's segments hold now
	// (ReadHeld's held), for reading the chain again after an older
	// writer's late object broke this writer's run. Nil: Read.
	Held   func() func(off int64) bool
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Dir == "" {
		c.Dir = "wal/"
	}
	if c.Linger <= 0 {
		c.Linger = 200 * time.Millisecond
	}
	if c.Batch <= 0 {
		c.Batch = 4 << 20
	}
	if c.InFlight <= 0 {
		c.InFlight = 4
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 30 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 50 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Errors a waiting send may get.
var (
	// ErrDeposed: another writer took an object number this one needed:
	// it no longer holds the WAL and acknowledges nothing more.
	ErrDeposed = errors.New("wal: another writer holds the WAL")
	// ErrClosed: the writer stopped before the bytes were committed.
	ErrClosed = errors.New("wal: writer stopped")
	// ErrConflict: Claim found its object number taken: read the chain
	// again, reconcile, and open a new Writer.
	ErrConflict = errors.New("wal: the object number to claim is taken")
)

// Writer ships the local log's bytes into WAL objects and tells waiting
// sends when their bytes are committed. One goroutine (Run) owns the
// shipping; Await and Durable are safe from any goroutine.
type Writer struct {
	cfg Config
	log *slog.Logger

	// Set by Claim, then owned by Run.
	claim   uint64 // this writer's claim (0: not claimed)
	epoch   int64
	nextSeq uint64
	shipped int64 // log bytes handed to PUTs

	durable atomic.Int64 // end of the unbroken run of committed objects
	stopped atomic.Pointer[error]

	mu      sync.Mutex
	waiters []waiter
	wake    chan struct{}

	prev    uint64    // the chain's last object when this writer began (its claim's Prev)
	prevInc [2]uint64 // that object's writer (epoch, claim): the claim's PrevEpoch, PrevClaim
	skipped []Header  // listed objects the chain did not keep
	holes   []uint64  // free numbers below the claim, filled before it

	trimMu sync.Mutex
	held   []Header // objects listed or written, not yet trimmed, by Seq
	trimTo atomic.Int64
	trims  chan struct{}

	st  stats
	lat latencies // the last PUTs' latencies (put, hedgeAfter)
}

type waiter struct {
	end     int64
	since   time.Time
	timeout time.Time
	done    func(error)
}

// NewWriter returns a writer that continues chain c from end, the chain's
// end as the local log holds it (Chain.End of the manifest's end, after
// reconciling). Claim must succeed before Run.
func NewWriter(cfg Config, c *Chain, end int64) *Writer {
	cfg.defaults()
	w := &Writer{cfg: cfg, log: cfg.Logger.With("component", "wal"), nextSeq: c.MaxSeq + 1, shipped: end,
		wake: make(chan struct{}, 1), trims: make(chan struct{}, 1), st: newStats(), skipped: c.Skipped,
		holes: slices.Clone(c.Holes)}
	w.durable.Store(end)
	w.held = append(append(w.held, c.Objects...), c.Skipped...)
	sortHeaders(w.held)
	w.prev = c.Last()
	if n := len(c.Objects); n > 0 {
		w.prevInc = c.Objects[n-1].incarnation()
	}
	return w
}

// Claim writes this writer's claim: an empty object at the next free
// number that names the chain's last object, so that no older writer's
// later objects count and no newer one's claim can miss this one's. It
// retries bucket errors until ctx ends; a taken number is ErrConflict.
func (w *Writer) Claim(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		epoch, err := w.fence()
		for len(w.holes) > 0 && err == nil {
			// A hole below the claim: an older writer's PUT may still land
			// there and complete a run it would then acknowledge.
			f := Header{Seq: w.holes[0], Claim: w.holes[0], Epoch: epoch, Filler: true}
			if f, err = w.put(ctx, f, make([]byte, HeaderSize)); err == nil {
				w.hold(f)
				w.holes = w.holes[1:]
			}
		}
		if err == nil {
			h := Header{Seq: w.nextSeq, Claim: w.nextSeq, Prev: w.prev, Epoch: epoch, Start: w.shipped}
			if w.prev != 0 {
				h.PrevEpoch, h.PrevClaim = int64(w.prevInc[0]), w.prevInc[1]
			}
			h, err = w.put(ctx, h, make([]byte, HeaderSize))
			if err == nil {
				w.claim, w.epoch = h.Seq, epoch
				w.nextSeq++
				w.hold(h)
				w.log.Info("WAL claimed", "seq", h.Seq, "epoch", epoch, "continues", w.prev, "at", h.Start)
				return nil
			}
		}
		if errors.Is(err, tier.ErrPreconditionFailed) || errors.Is(err, ErrDeposed) || errors.Is(err, errTakenByOlder) {
			// A filler's or the claim's number is taken: the chain grew.
			return fmt.Errorf("%w: %v", ErrConflict, err)
		}
		w.st.errors.Add(1)
		w.log.Warn("WAL claim failed; retrying", "seq", w.nextSeq, "attempt", attempt+1, "err", err)
		if err := w.sleep(ctx, attempt); err != nil {
			return err
		}
	}
}

// Durable is the log offset up to which every byte is in a committed WAL
// object (or was in the bucket before this writer began).
func (w *Writer) Durable() int64 { return w.durable.Load() }

// Backlog is the log bytes not yet committed.
func (w *Writer) Backlog() int64 { return max(w.cfg.Log.MaxPhysOffset()-w.durable.Load(), 0) }

// Await calls done(nil) once the log up to end is committed, or done(err)
// when the writer stops or is deposed first, or at timeout (ErrTimeout)
// if it is not zero. done runs on the caller's goroutine when that is
// known at once, else on the writer's; it must not block.
func (w *Writer) Await(end int64, timeout time.Time, done func(error)) {
	if end <= w.durable.Load() {
		done(nil)
		return
	}
	if p := w.stopped.Load(); p != nil {
		done(*p)
		return
	}
	w.mu.Lock()
	w.waiters = append(w.waiters, waiter{end: end, since: time.Now(), timeout: timeout, done: done})
	w.mu.Unlock()
	if end <= w.durable.Load() || w.stopped.Load() != nil {
		w.settle() // raced with an advance or the stop
	}
	w.poke()
}

// ErrTimeout: the bytes were not committed by the waiter's deadline.
var ErrTimeout = errors.New("wal: not committed in time")

func (w *Writer) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// settle answers the waiters whose bytes are committed, or all of them
// once the writer stopped; and those past their deadline.
func (w *Writer) settle() {
	d := w.durable.Load()
	var stop error
	if p := w.stopped.Load(); p != nil {
		stop = *p
	}
	now := time.Now()
	w.mu.Lock()
	var ready []waiter
	var errs []error
	keep := w.waiters[:0]
	for _, wt := range w.waiters {
		switch {
		case wt.end <= d:
			ready, errs = append(ready, wt), append(errs, nil)
		case stop != nil:
			ready, errs = append(ready, wt), append(errs, stop)
		case !wt.timeout.IsZero() && !now.Before(wt.timeout):
			ready, errs = append(ready, wt), append(errs, fmt.Errorf("%w: log up to %d, committed up to %d", ErrTimeout, wt.end, d))
		default:
			keep = append(keep, wt)
		}
	}
	clear(w.waiters[len(keep):])
	w.waiters = keep
	w.mu.Unlock()
	for i, wt := range ready {
		wt.done(errs[i])
	}
}

// due reports what the waiters ask of the shipper: the latest end one
// waits for past shipped, when the first of those began waiting, and the
// earliest deadline.
func (w *Writer) due(shipped int64) (want int64, since, deadline time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wt := range w.waiters {
		if wt.end > shipped {
			want = max(want, wt.end)
			if since.IsZero() || wt.since.Before(since) {
				since = wt.since
			}
		}
		if !wt.timeout.IsZero() && (deadline.IsZero() || wt.timeout.Before(deadline)) {
			deadline = wt.timeout
		}
	}
	return want, since, deadline
}

type flight struct {
	h    Header
	done bool
}

type result struct {
	h   Header
	err error
}

// Run ships until ctx ends or the writer is deposed; then every waiter is
// answered with the reason. It must follow a successful Claim.
func (w *Writer) Run(ctx context.Context) error {
	if w.claim == 0 {
		return errors.New("wal: Run before Claim")
	}
	var (
		inflight []flight
		results  = make(chan result, w.cfg.InFlight)
		wg       sync.WaitGroup
		timer    = time.NewTimer(time.Hour)
		runErr   error
		// idleSince: while the WAL is active, when bytes no send waits
		// for were first seen unshipped (an internal write: a delayed
		// message's delivery, a transaction's commit). They ship after a
		// linger too, so readers of bucket-durable topics see them.
		idleSince time.Time
		// reclaiming: an older writer's late object took a number this
		// writer needed; no new PUT until the ones in flight are done,
		// then it claims again past it (reclaim).
		reclaiming bool
		lastSeq    = w.claim // the last object of the unbroken committed run
		// trimming: a trim runs (trim, on its own goroutine); trimmed
		// gets how far it left nothing (0: it did not), for continueFrom.
		trimming bool
		trimmed  = make(chan trimResult, 1)
		// readBackoff, readAfter: the log failed to read (logReadError);
		// no object is cut before readAfter.
		readBackoff time.Duration
		readAfter   time.Time
	)
	defer func() {
		wg.Wait()
		timer.Stop()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for runErr == nil {
		if reclaiming && !slices.ContainsFunc(inflight, func(f flight) bool { return !f.done }) {
			// Nothing pending: what is left landed past the break (an
			// orphan the new claim's run replaces; its bytes are shipped
			// again), waiting behind the number an older writer took.
			inflight = inflight[:0]
			if runErr = w.reclaim(ctx, lastSeq); runErr != nil {
				break
			}
			// The run goes on from the new claim: a second late object
			// before anything after it is acknowledged claims again
			// after this one.
			lastSeq = w.claim
			reclaiming = false
		}
		now := time.Now()
		want, since, deadline := w.due(w.shipped)
		var wakeAt time.Time
		for !reclaiming && len(inflight) < w.cfg.InFlight {
			end := w.cfg.Log.MaxPhysOffset()
			pending := end - w.shipped
			if pending <= 0 {
				idleSince = time.Time{}
				break
			}
			active := w.active()
			if idleSince.IsZero() {
				idleSince = now
			}
			full := pending >= int64(w.cfg.Batch) && (want > w.shipped || active)
			lingered := want > w.shipped && !now.Before(since.Add(w.cfg.Linger)) ||
				active && !now.Before(idleSince.Add(w.cfg.Linger))
			if !full && !lingered {
				switch {
				case want > w.shipped:
					wakeAt = since.Add(w.cfg.Linger)
				case active:
					wakeAt = idleSince.Add(w.cfg.Linger)
				}
				break
			}
			idleSince = time.Time{}
			if now.Before(readAfter) {
				wakeAt = readAfter
				break
			}
			obj, err := w.cut(ctx, end)
			if err != nil {
				var re *logReadError
				if !errors.As(err, &re) || ctx.Err() != nil {
					runErr = err // not a record: nothing to retry
					break
				}
				// The log's bytes are in the bucket only (the segment was
				// listed and dropped locally) and the bucket did not
				// answer: tried again, backing off; sends wait meanwhile.
				if readBackoff == 0 {
					w.log.Warn("WAL: reading the log to ship failed; retrying", "at", w.shipped, "err", err)
				}
				readBackoff = min(max(2*readBackoff, 100*time.Millisecond), 5*time.Second)
				readAfter = now.Add(readBackoff)
				wakeAt = readAfter
				break
			}
			readBackoff = 0
			n := len(obj) - HeaderSize
			h := Header{Seq: w.nextSeq, Claim: w.claim, Prev: w.nextSeq - 1, Epoch: w.epoch, Start: w.shipped,
				Length: int64(n)}
			w.nextSeq++
			w.shipped += int64(n)
			inflight = append(inflight, flight{h: h})
			w.st.fill(n, w.cfg.Batch)
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				hh, err := w.putRetrying(ctx, h, obj)
				if err == nil {
					w.st.committed(n, time.Since(start))
				}
				results <- result{hh, err}
			}()
			want, since, deadline = w.due(w.shipped)
		}
		if !deadline.IsZero() && (wakeAt.IsZero() || deadline.Before(wakeAt)) {
			wakeAt = deadline
		}
		if runErr != nil {
			break
		}
		d := time.Hour
		if !wakeAt.IsZero() {
			d = max(time.Until(wakeAt), 0)
		}
		if w.active() && len(inflight) < w.cfg.InFlight {
			d = min(d, w.cfg.Linger) // notice a backlog filling without waiters
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
			runErr = ctx.Err()
		case <-w.wake:
		case <-timer.C:
		case <-w.trims:
			if !trimming {
				// Deleting runs beside the shipping: a segment's objects
				// can take many DELETEs, and no send waits for them.
				trimming = true
				wg.Add(1)
				go func() {
					defer wg.Done()
					trimmed <- w.trim(ctx)
				}()
			}
		case tr := <-trimmed:
			trimming = false
			if tr.all && tr.to > w.shipped && len(inflight) == 0 && !reclaiming {
				w.continueFrom(tr.to)
			}
			if w.trimTo.Load() > tr.to {
				w.Trim(0) // asked for more meanwhile: go again
			}
		case r := <-results:
			if errors.Is(r.err, errTakenByOlder) || (reclaiming && r.err != nil && !errors.Is(r.err, ErrDeposed) && ctx.Err() == nil) {
				// The run breaks here: what follows is shipped again
				// under a new claim (the objects after it are orphans).
				if !reclaiming {
					w.log.Warn("an older writer's late object took a WAL number; claiming again past it", "err", r.err)
				}
				reclaiming = true
				inflight = slices.DeleteFunc(inflight, func(f flight) bool { return f.h.Seq == r.h.Seq })
				break
			}
			if r.err != nil {
				runErr = r.err
				break
			}
			for i := range inflight {
				if inflight[i].h.Seq == r.h.Seq {
					inflight[i].done = true
				}
			}
			w.hold(r.h)
			adv := int64(-1)
			for len(inflight) > 0 && inflight[0].done && (!reclaiming || inflight[0].h.Seq == lastSeq+1) {
				adv = inflight[0].h.End()
				lastSeq = inflight[0].h.Seq
				inflight = inflight[1:]
			}
			if reclaiming {
				inflight = slices.DeleteFunc(inflight, func(f flight) bool { return f.done })
			}
			if adv >= 0 {
				w.durable.Store(adv)
				if w.cfg.OnDurable != nil {
					w.cfg.OnDurable(adv)
				}
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		w.settle()
	}
	if errors.Is(runErr, context.Canceled) && ctx.Err() != nil {
		runErr = ErrClosed
	}
	w.stopped.CompareAndSwap(nil, &runErr)
	cancel()
	w.settle()
	if errors.Is(runErr, ErrClosed) {
		return nil
	}
	w.log.Error("WAL writer stopped", "err", runErr)
	return runErr
}

func (w *Writer) active() bool { return w.cfg.Active != nil && w.cfg.Active() }

// cut reads the next object's payload: whole records from shipped, at
// most Batch bytes unless one record is larger, up to end.
func (w *Writer) cut(ctx context.Context, end int64) ([]byte, error) {
	n := min(end-w.shipped, int64(w.cfg.Batch))
	obj := make([]byte, HeaderSize+n) // the object: its header is written in place (put)
	buf := obj[HeaderSize:]
	if err := w.readFull(ctx, w.shipped, buf); err != nil {
		return nil, err
	}
	whole := 0
	for whole+4 <= len(buf) {
		size := int(binary.BigEndian.Uint32(buf[whole:]))
		if size <= 0 {
			return nil, fmt.Errorf("wal: record at %d has size %d", w.shipped+int64(whole), size)
		}
		if whole+size > len(buf) {
			break
		}
		whole += size
	}
	if whole > 0 {
		return obj[:HeaderSize+whole], nil
	}
	if len(buf) < 4 {
		return nil, fmt.Errorf("wal: %d log bytes at %d are not a record", len(buf), w.shipped)
	}
	// One record larger than Batch: an object of its own.
	size := int64(binary.BigEndian.Uint32(buf))
	if w.shipped+size > end {
		return nil, fmt.Errorf("wal: record at %d of %d bytes runs past the log's end %d", w.shipped, size, end)
	}
	big := make([]byte, HeaderSize+size)
	if err := w.readFull(ctx, w.shipped, big[HeaderSize:]); err != nil {
		return nil, err
	}
	return big, nil
}

// logReadError is the log failing to read (a cold read the bucket did
// not answer, say): Run tries again, unlike bytes that are no record.
type logReadError struct {
	off int64
	err error
}

func (e *logReadError) Error() string {
	return fmt.Sprintf("wal: read the log at %d: %v", e.off, e.err)
}
func (e *logReadError) Unwrap() error { return e.err }

func (w *Writer) readFull(ctx context.Context, off int64, p []byte) error {
	for len(p) > 0 {
		n, err := w.cfg.Log.ReadLog(ctx, off, p)
		if err != nil {
			return &logReadError{off: off, err: err}
		}
		if n == 0 {
			return fmt.Errorf("wal: the log ends before %d", off)
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// putRetrying writes one object until it is committed, ctx ends or the
// writer is found deposed.
func (w *Writer) putRetrying(ctx context.Context, h Header, obj []byte) (Header, error) {
	for attempt := 0; ; attempt++ {
		epoch, err := w.fence()
		if err == nil && epoch != w.epoch {
			err = fmt.Errorf("%w: lease epoch %d, claimed under %d", ErrDeposed, epoch, w.epoch)
		}
		if err == nil {
			var hh Header
			hh, err = w.put(ctx, h, obj)
			if err == nil {
				return hh, nil
			}
		}
		if errors.Is(err, ErrDeposed) || errors.Is(err, tier.ErrPreconditionFailed) || errors.Is(err, errTakenByOlder) {
			return h, err
		}
		if ctx.Err() != nil {
			return h, ctx.Err()
		}
		w.st.errors.Add(1)
		if attempt == 0 || attempt%10 == 9 {
			w.log.Warn("WAL put failed; retrying", "seq", h.Seq, "attempt", attempt+1, "err", err)
		}
		if err := w.sleep(ctx, attempt); err != nil {
			return h, err
		}
	}
}

// put writes one object if its number is free. A taken number holding
// this very object (an earlier attempt that landed) counts as success;
// any other is ErrDeposed.
// obj is the object: HeaderSize bytes for the header (written here, from
// h and the payload after it), then the payload.
func (w *Writer) put(ctx context.Context, h Header, obj []byte) (Header, error) {
	h = sealObj(h, obj)
	key := Key(w.cfg.Dir, h.Seq)
	actx, cancel := w.bound(ctx)
	// Up to two attempts of the same PUT run at once (a hedge); put
	// returns only once both ended, so nothing reads obj after it.
	done := make(chan error, 2)
	pending := 0
	defer func() {
		cancel()
		for ; pending > 0; pending-- {
			<-done
		}
	}()
	begin := time.Now()
	send := func() {
		pending++
		w.st.puts.Add(1)
		go func() {
			_, err := w.cfg.Bucket.PutIf(actx, key, bytes.NewReader(obj), int64(len(obj)), tier.IfAbsent())
			done <- err
		}()
	}
	send()
	var hedge <-chan time.Time
	if d := w.hedgeAfter(); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		hedge = t.C
	}
	var err error
	for pending > 0 {
		select {
		case <-hedge:
			hedge = nil
			w.st.hedges.Add(1)
			send()
			continue
		case err = <-done:
			pending--
		}
		if err == nil {
			w.lat.add(time.Since(begin))
			return h, nil
		}
		if errors.Is(err, tier.ErrPreconditionFailed) {
			break // the number is taken: by the other attempt, or by another object
		}
	}
	if !errors.Is(err, tier.ErrPreconditionFailed) {
		return h, err
	}
	got, rerr := readHeaderBytes(actx, w.cfg.Bucket, key)
	if rerr != nil {
		return h, fmt.Errorf("wal: #%d is taken and could not be read: %w", h.Seq, rerr)
	}
	if bytes.Equal(got, obj[:h.headerLen()]) {
		return h, nil // an earlier attempt, or the other one, landed
	}
	other, derr := decodeHeader(got)
	if derr == nil && !other.Filler && compareInc(other.incarnation(), h.incarnation()) < 0 {
		return h, fmt.Errorf("%w: #%d holds %s", errTakenByOlder, h.Seq, other)
	}
	return h, fmt.Errorf("%w: #%d holds %s", ErrDeposed, h.Seq, other)
}

// readHeaderBytes reads the header of the object at key, of either
// format version (a version-1 object may be shorter than HeaderSize).
func readHeaderBytes(ctx context.Context, b tier.Reader, key string) ([]byte, error) {
	buf := make([]byte, HeaderSize)
	if err := b.ReadAt(ctx, key, buf[:headerSizeV1], 0); err != nil {
		return nil, err
	}
	n := headerLenOf(buf)
	if n <= headerSizeV1 {
		return buf[:headerSizeV1], nil // version 1, or no header: decodeHeader says which
	}
	if err := b.ReadAt(ctx, key, buf[headerSizeV1:n], headerSizeV1); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// hedgeAfter is how long an attempt runs before a second is sent beside
// it (Config.Hedge); 0: no hedge.
func (w *Writer) hedgeAfter() time.Duration {
	switch h := w.cfg.Hedge; {
	case h < 0:
		return 0
	case h > 0:
		return h
	}
	m, ok := w.lat.median()
	if !ok {
		return 0
	}
	return min(max(2*m, 20*time.Millisecond), time.Second)
}

// latencies keeps the last PUTs' latencies (the adaptive hedge).
type latencies struct {
	mu sync.Mutex
	d  [32]time.Duration
	n  int // recorded, up to len(d)
	i  int // next slot
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d[l.i] = d
	l.i = (l.i + 1) % len(l.d)
	l.n = min(l.n+1, len(l.d))
	l.mu.Unlock()
}

// median is the median of the recorded latencies; ok once 8 are.
func (l *latencies) median() (time.Duration, bool) {
	l.mu.Lock()
	var buf [32]time.Duration
	s := buf[:l.n]
	copy(s, l.d[:l.n])
	l.mu.Unlock()
	if len(s) < 8 {
		return 0, false
	}
	slices.Sort(s)
	return s[len(s)/2], true
}

func (w *Writer) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	d := w.cfg.AttemptTimeout
	if w.cfg.ValidFor != nil {
		d = min(d, max(w.cfg.ValidFor(), 0))
	}
	return context.WithTimeout(ctx, d)
}

func (w *Writer) fence() (int64, error) {
	if w.cfg.Fence == nil {
		return w.epoch, nil
	}
	return w.cfg.Fence()
}

func (w *Writer) sleep(ctx context.Context, attempt int) error {
	d := w.cfg.MinBackoff << min(attempt, 16)
	d = min(d, w.cfg.MaxBackoff)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errTakenByOlder: the number an object needed holds an older writer's
// late object (readers skip it); the writer claims again past it.
var errTakenByOlder = errors.New("wal: an older writer's late object took the number")

// reclaim claims again after an older writer's late object broke this
// writer's run: nothing is in flight; the run ends at lastSeq (Durable).
// It lists the numbers, fills the free ones below the highest, and claims
// the next, continuing lastSeq; what was shipped past Durable is shipped
// again after the claim.
func (w *Writer) reclaim(ctx context.Context, lastSeq uint64) error {
	mine := [2]uint64{uint64(w.epoch), w.claim}
	for attempt := 0; ; attempt++ {
		var held func(int64) bool
		if w.cfg.Held != nil {
			held = w.cfg.Held()
		}
		c, err := ReadHeld(ctx, w.cfg.Bucket, w.cfg.Dir, held)
		if err == nil {
			// The chain must still end with this writer's unbroken run:
			// a claim continues the chain as read, never another
			// writer's objects after it (they may be acknowledged).
			if n := len(c.Objects); n > 0 {
				if last := c.Objects[n-1]; last.incarnation() != mine || last.Seq != lastSeq {
					return fmt.Errorf("%w: the chain ends with %s, after this writer's #%d", ErrDeposed, last, lastSeq)
				}
			}
			for _, h := range c.Skipped {
				if !h.Filler && compareInc(h.incarnation(), mine) > 0 {
					return fmt.Errorf("%w: %s is a newer writer's", ErrDeposed, h)
				}
			}
			w.nextSeq = max(w.nextSeq, c.MaxSeq+1)
			w.holes = c.Holes
			w.prev, w.prevInc = lastSeq, mine
			w.shipped = w.durable.Load()
			err = w.Claim(ctx)
			if err == nil {
				return nil
			}
			if !errors.Is(err, ErrConflict) {
				return err
			}
		}
		if attempt >= 8 {
			return fmt.Errorf("wal: claiming again kept failing: %w", err)
		}
		w.log.Warn("WAL claim again failed; retrying", "attempt", attempt+1, "err", err)
		if err := w.sleep(ctx, attempt); err != nil {
			return err
		}
	}
}
