package ha

import "time"

// The in-sync set (MasterOptions.MinInSync). A connected slave is in sync
// while all of this holds:
//
//   - its hello passed (it is streaming);
//   - it lags at most MaxLag bytes (master end − its last report);
//   - it has not missed an ack deadline since it last caught up: no
//     WaitAcked or AwaitAck for bytes it had not acknowledged reached its
//     deadline (the broker's STRATAMQ_HA_ACK_TIMEOUT). A slave that
//     misses one leaves the set ("lapses").
//
//   - it is not stalled: it acknowledged something within StallTimeout of
//     being sent bytes it had not acknowledged (its ack advances while
//     the master has more for it), whatever MaxLag allows.
//
// A slave catches up, and joins (or rejoins) the set, when a report of
// its reaches the master's end as it stood at its previous report (or at
// its hello, or when it lapsed): it keeps up to within one report of the
// master's writes. A slave whose hello is behind the master's end joins
// that way too, once it acknowledged where the master stood when it
// connected. So a slave that stops acknowledging leaves the set one ack
// timeout after the first write it did not acknowledge, and a slave that
// is merely busy streams on within the set.

// inSyncLocked reports whether sc is in the in-sync set, the master's end
// being end. m.mu is held.
func (m *Master) inSyncLocked(sc *slaveConn, end int64) bool {
	return !sc.lastReport.IsZero() && !sc.lapsed && end-sc.acked <= m.opts.MaxLag && !m.stalledLocked(sc, time.Now())
}

// stalledLocked reports whether sc was sent bytes it has not acknowledged
// and acknowledged nothing for StallTimeout: a slave that does not advance
// while the master has more for it is no copy to wait for. m.mu is held.
func (m *Master) stalledLocked(sc *slaveConn, now time.Time) bool {
	return !sc.waitingSince.IsZero() && now.Sub(sc.waitingSince) > m.opts.StallTimeout
}

// liveBestLocked is the highest ack of the connected slaves that are not
// stalled (-1 and false without one). m.mu is held.
func (m *Master) liveBestLocked(now time.Time) (best int64, any bool) {
	best = -1
	for sc := range m.conns {
		if sc.lastReport.IsZero() || m.stalledLocked(sc, now) {
			continue
		}
		any = true
		best = max(best, sc.acked)
	}
	return best, any
}

// inSyncCountLocked is how many connected slaves are in sync, and the
// highest ack among them (-1 without one). m.mu is held.
func (m *Master) inSyncCountLocked(end int64) (n int, best int64) {
	best = -1
	for sc := range m.conns {
		if m.inSyncLocked(sc, end) {
			n++
			best = max(best, sc.acked)
		}
	}
	return n, best
}

// helloInSyncLocked starts sc's in-sync accounting at its hello (offset
// h, the master's end end): in sync when it holds the whole log, else
// once it caught up with end. m.mu is held.
func (m *Master) helloInSyncLocked(sc *slaveConn, h, end int64) {
	sc.lapsed, sc.mark = h < end, end
}

// reportInSyncLocked updates sc's in-sync accounting for its report off:
// it (re)joins the set when off reaches the mark, the master's end at its
// previous report, and the mark moves to the end now. m.mu is held.
func (m *Master) reportInSyncLocked(sc *slaveConn, off int64) {
	if sc.lapsed && off >= sc.mark {
		sc.lapsed = false
		m.log.Info("ha: slave caught up: in sync", "remote", sc.remote, "name", sc.name, "acked", off)
	}
	sc.mark = m.opts.Log.MaxPhysOffset()
}

// lapseLocked takes every slave that has not acknowledged off out of the
// in-sync set (an ack wait for off reached its deadline) and reports
// whether any left it. m.mu is held.
func (m *Master) lapseLocked(off int64) (any bool) {
	end := m.opts.Log.MaxPhysOffset()
	for sc := range m.conns {
		if sc.lastReport.IsZero() || sc.lapsed || sc.acked >= off {
			continue
		}
		any = true
		sc.lapsed, sc.mark = true, end
		m.log.Warn("ha: slave missed an ack deadline: out of sync until it catches up", "remote", sc.remote,
			"name", sc.name, "acked", sc.acked, "waitedFor", off, "masterEnd", end)
	}
	return any
}

// InSync is the in-sync set now: how many connected slaves are in sync
// (the master itself not counted) and the highest ack among them (-1
// without one).
func (m *Master) InSync() (slaves int, best int64) {
	end := m.opts.Log.MaxPhysOffset()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inSyncCountLocked(end)
}

// AckedAlone is how many ack waits this master settled with success while
// no slave held the bytes and no slave was in sync (MinInSync 1).
func (m *Master) AckedAlone() int64 { return m.ackedAlone.Load() }

// aloneLocked reports whether a wait for bytes no slave acked is over
// because the master may acknowledge alone: MinInSync ≤ 1 and no slave is
// in sync. m.mu is held.
func (m *Master) aloneLocked() bool {
	if m.opts.MinInSync > 1 {
		return false
	}
	n, _ := m.inSyncCountLocked(m.opts.Log.MaxPhysOffset())
	return n == 0
}
