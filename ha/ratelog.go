package ha

import (
	"log/slog"
	"sync"
	"time"
)

// logEvery is the least time between two WARN lines of one rateLog.
const logEvery = 10 * time.Second

// rateLog logs one kind of event (a dropped connection, a refused one) at
// WARN at most once per logEvery, with how many were not logged since the
// last line; the others go to DEBUG. Anyone who reaches the HA port can
// cause these events, so they must not flood the log.
type rateLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// warn logs msg at WARN, or at DEBUG when a line was logged within
// logEvery.
func (r *rateLog) warn(log *slog.Logger, msg string, args ...any) {
	now := time.Now()
	r.mu.Lock()
	if !r.last.IsZero() && now.Sub(r.last) < logEvery {
		r.suppressed++
		r.mu.Unlock()
		log.Debug(msg, args...)
		return
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	r.mu.Unlock()
	if n > 0 {
		args = append(args, "notLoggedSinceLast", n)
	}
	log.Warn(msg, args...)
}
