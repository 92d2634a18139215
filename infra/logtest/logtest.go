// Package logtest is a slog handler for tests: Recorder keeps every record
// it is given, so a test can check what was logged (once, at which level).
// It owns nothing else and imports nothing of ours.
package logtest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Recorder is a slog.Handler that keeps every record. Safe for concurrent
// use; the zero value is ready.
type Recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

// Enabled implements slog.Handler: every level.
func (r *Recorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}

// WithAttrs implements slog.Handler (attributes are not kept).
func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup implements slog.Handler.
func (r *Recorder) WithGroup(string) slog.Handler { return r }

// Records returns a copy of the records kept so far.
func (r *Recorder) Records() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.recs...)
}

// Levels returns the levels of the records whose message contains sub.
func (r *Recorder) Levels(sub string) []slog.Level {
	var out []slog.Level
	for _, rec := range r.Records() {
		if strings.Contains(rec.Message, sub) {
			out = append(out, rec.Level)
		}
	}
	return out
}

// Count is how many messages contain sub.
func (r *Recorder) Count(sub string) int { return len(r.Levels(sub)) }

// CountPrefix is how many messages start with prefix.
func (r *Recorder) CountPrefix(prefix string) int {
	n := 0
	for _, rec := range r.Records() {
		if strings.HasPrefix(rec.Message, prefix) {
			n++
		}
	}
	return n
}

// Worst is the highest level logged and its first message (LevelDebug and
// "" when nothing above debug was logged).
func (r *Recorder) Worst() (slog.Level, string) {
	lvl, m := slog.LevelDebug, ""
	for _, rec := range r.Records() {
		if rec.Level > lvl {
			lvl, m = rec.Level, rec.Message
		}
	}
	return lvl, m
}
