package replication

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/ha"
	"github.com/stratamq/stratamq/store"
)

// Config is what the Service needs of the broker's configuration; it
// never changes within a generation.
type Config struct {
	// SyncMaster: STRATAMQ_ROLE=sync_master (sends wait for a slave,
	// consumers read only what a slave holds). False for the other roles.
	SyncMaster bool
	// Listener: STRATAMQ_HA_LISTEN is set (a master serves slaves).
	Listener bool
	// MinInSync is STRATAMQ_HA_MIN_INSYNC.
	MinInSync int
	// AckTimeout is STRATAMQ_HA_ACK_TIMEOUT: how long a send waits for a
	// slave, and a push to idle slaves may take.
	AckTimeout time.Duration
}

// Entries is the store's consume queue as HiddenEnd reads it
// (store.Store.QueueEntry).
type Entries interface {
	QueueEntry(topic string, queueID int32, idx int64) (phys int64, size int32, tags int64, ok bool, err error)
}

// Service is a broker generation's side of HA replication (see the
// package comment): a master's listener, or a slave's stream. Its
// methods are safe on any goroutine.
type Service struct {
	cfg     Config
	entries Entries
	// started is the master Start made (kept after Stop for its address);
	// master is the same while it runs.
	started atomic.Pointer[ha.Master]
	master  atomic.Pointer[ha.Master]
	// slave is the stream StartSlave made (kept after Stop: its state
	// stays readable).
	slave atomic.Pointer[ha.Slave]
	// hw is a sync_master's high watermark: the highest offset a slave
	// acked in this run, at least where this epoch took the log over.
	hw atomic.Int64
}

// New returns a Service without a running HA master; entries may be set
// later (SetEntries) once the store is open.
func New(cfg Config) *Service { return &Service{cfg: cfg} }

// SetEntries gives the Service the store's consume queue (once the store
// is open, before any read).
func (s *Service) SetEntries(e Entries) { s.entries = e }

// Start starts the HA master (ha.StartMaster with opts); Master returns
// it from here until Stop. It is called at most once.
func (s *Service) Start(opts ha.MasterOptions) (*ha.Master, error) {
	m, err := ha.StartMaster(opts)
	if err != nil {
		return nil, err
	}
	s.started.Store(m)
	s.master.Store(m)
	return m, nil
}

// StartSlave starts a slave's stream from its master (ha.StartSlave
// with opts); Slave returns it from here on, also after Stop. It is
// called at most once, and never with Start.
func (s *Service) StartSlave(opts ha.SlaveOptions) (*ha.Slave, error) {
	sl, err := ha.StartSlave(opts)
	if err != nil {
		return nil, err
	}
	s.slave.Store(sl)
	return sl, nil
}

// Slave is the stream StartSlave started (nil before, and on a master).
func (s *Service) Slave() *ha.Slave { return s.slave.Load() }

// Stop stops the slave's stream StartSlave started, then the HA master
// Start started (each if it did): Master returns nil from here on, and
// the waits of sends end.
func (s *Service) Stop() {
	if sl := s.slave.Load(); sl != nil {
		_ = sl.Close()
	}
	if m := s.started.Load(); m != nil {
		s.master.Store(nil)
		_ = m.Close()
	}
}

// Master is the HA master while it runs (nil before Start, after Stop, and
// without a listener).
func (s *Service) Master() *ha.Master { return s.master.Load() }

// Listener is the HA master Start started, also after Stop (nil if it
// did not): its address stays known.
func (s *Service) Listener() *ha.Master { return s.started.Load() }

// Notify wakes the HA stream goroutines (the store's dispatch of new
// records); nothing without a running master.
func (s *Service) Notify() {
	if m := s.master.Load(); m != nil {
		m.Notify()
	}
}

// SetHW sets the high watermark where this generation starts: where
// another copy is known to hold the log.
func (s *Service) SetHW(off int64) { s.hw.Store(off) }

// ReadBound is the visibility bound of consumer reads, V
// (store.GetRequest.MaxPhys; 0: none). A sync_master shows consumers only
// what is replicated: the high watermark, the highest offset a slave
// acked during this run (ha.Master.Acked), and never less than the log
// this epoch took over (its start, the best copy there was). It never
// goes back when slaves leave: alone (sends answered SLAVE_NOT_AVAILABLE)
// the master stores what it is sent but shows none of it until a slave
// holds it, so a failover to a slave never hands a queue offset a consumer
// read to another message. With STRATAMQ_HA_MIN_INSYNC=1 the master
// acknowledges alone while no slave is in sync and shows what it
// acknowledged: the bound is the best ack of the in-sync slaves
// (ha.Master.InSync), none while no slave is in sync. Other roles: no
// bound.
func (s *Service) ReadBound() int64 {
	if !s.cfg.SyncMaster {
		return 0
	}
	m := s.master.Load()
	if m == nil && s.cfg.Listener {
		return 1 // stopped (a held pull answered at shutdown): its slaves' acks are gone, show nothing more
	}
	if m == nil {
		return 0 // no HA listener: alone
	}
	if s.cfg.MinInSync <= 1 {
		n, best := m.InSync()
		if n == 0 {
			return 0
		}
		return max(best, 1)
	}
	hw := s.hw.Load()
	if acked, _ := m.Acked(); acked > hw {
		for !s.hw.CompareAndSwap(hw, acked) {
			if hw = s.hw.Load(); hw >= acked {
				break
			}
		}
		hw = max(hw, acked)
	}
	return max(hw, 1) // every record ends past offset 1: 1 hides them all
}

// Visible reports whether a record ending at end is within ReadBound.
func (s *Service) Visible(end int64) bool {
	v := s.ReadBound()
	return v == 0 || end <= v
}

// HiddenEnd is the commitlog end of the record at topic/queue/offset when
// ReadBound hides it, else 0 (no bound, no such record, or a read error:
// the caller runs the pull again, which reports the error).
func (s *Service) HiddenEnd(topic string, queue int32, offset int64) int64 {
	v := s.ReadBound()
	if v == 0 {
		return 0
	}
	phys, size, _, ok, err := s.entries.QueueEntry(topic, queue, offset)
	if err != nil || !ok || phys+int64(size) <= v {
		return 0
	}
	return phys + int64(size)
}

// Held is the highest commitlog end a slave of this sync_master
// acknowledged in this run (never less than the log the run took over),
// kept in the high watermark so that it never goes back when a slave
// leaves.
func (s *Service) Held() int64 {
	hw := s.hw.Load()
	m := s.master.Load()
	if m == nil {
		return hw
	}
	acked, _ := m.Acked()
	for acked > hw && !s.hw.CompareAndSwap(hw, acked) {
		hw = s.hw.Load()
	}
	return max(hw, acked)
}

// HoldNotify starts a sync_master's send whose records the sending
// goroutine pushes to the slaves itself (Push, before Ack waits): the
// store's dispatch of them does not wake the HA stream goroutines. It
// returns the master to give to Push (nil for the other roles); every
// non-nil result must reach Push, whatever the put's outcome.
func (s *Service) HoldNotify() *ha.Master {
	if !s.cfg.SyncMaster {
		return nil
	}
	m := s.master.Load()
	if m != nil {
		m.HoldNotify()
	}
	return m
}

// Push ends HoldNotify: the bytes written since go to idle slaves on
// this goroutine (ha.Master.Push), within STRATAMQ_HA_ACK_TIMEOUT.
func (s *Service) Push(m *ha.Master) {
	if m != nil {
		m.Push(time.Now().Add(s.cfg.AckTimeout))
	}
}

// Ack is sync_master's wait: nil at once for the other roles; else nil
// once a slave holds the log up to the end of res (Await, waited for
// here: bounded by STRATAMQ_HA_ACK_TIMEOUT, ended by the HA master's
// stop).
func (s *Service) Ack(res []store.PutResult) error {
	if !s.cfg.SyncMaster || len(res) == 0 {
		return nil // no channel to allocate on every other role's send
	}
	ch := make(chan error, 1)
	s.Await(res, func(err error) { ch <- err })
	return <-ch
}

// Await is sync_master's wait without a waiting goroutine: done gets nil
// at once for the other roles; else nil once a slave holds the log up to
// the end of res, or the error that ends the wait. It runs on this
// goroutine when that is known at once (no slave, or already acked), else
// on the goroutine that settles it: the HA master's report reader (the
// ack), its deadline timer (STRATAMQ_HA_ACK_TIMEOUT), a slave's
// disconnect or the master's stop. done must not block.
func (s *Service) Await(res []store.PutResult, done func(error)) {
	if !s.cfg.SyncMaster || len(res) == 0 {
		done(nil)
		return
	}
	m := s.master.Load()
	if m == nil {
		done(fmt.Errorf("%w: the HA listener is not running", ha.ErrSlaveNotAvailable))
		return
	}
	last := res[len(res)-1]
	timeout := s.cfg.AckTimeout
	m.AwaitAck(last.PhysOffset+int64(last.Size), time.Now().Add(timeout), func(err error) {
		if errors.Is(err, ha.ErrSlaveTimeout) {
			err = fmt.Errorf("%w (STRATAMQ_HA_ACK_TIMEOUT %v)", err, timeout)
		}
		done(err)
	})
}
