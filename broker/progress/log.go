package progress

import "sort"

// Log is one progress value's steps in this run, each with the commitlog
// end the writes it depends on reached (the highest so far: a step
// depends on the writes of every step before it). The zero value holds the
// zero progress. Not safe for concurrent use.
type Log[T any] struct {
	base  T // its writes are durable for every fault (or it was loaded)
	steps []step[T]
}

type step[T any] struct {
	v   T
	end int64
}

// maxSteps bounds a Log: past it every other step is dropped, which only
// makes At answer an older value for some ends (progress saved a little
// behind, never ahead).
const maxSteps = 4096

// NewLog is a Log whose progress is base, with no write pending.
func NewLog[T any](base T) Log[T] { return Log[T]{base: base} }

// Add records that the progress is now v, after writes that end at end (0:
// none).
func (l *Log[T]) Add(v T, end int64) {
	n := len(l.steps)
	if n == 0 && end <= 0 {
		l.base = v // no write pending: as durable as the base
		return
	}
	if n > 0 {
		end = max(end, l.steps[n-1].end)
		if l.steps[n-1].end == end {
			l.steps[n-1].v = v
			return
		}
	}
	if n >= maxSteps {
		kept := l.steps[:0]
		for i := 1; i < n; i += 2 {
			kept = append(kept, l.steps[i])
		}
		l.steps = kept
	}
	l.steps = append(l.steps, step[T]{v: v, end: end})
}

// At is the progress whose writes all end at or below d.
func (l *Log[T]) At(d int64) T {
	i := sort.Search(len(l.steps), func(i int) bool { return l.steps[i].end > d })
	if i == 0 {
		return l.base
	}
	return l.steps[i-1].v
}

// Latest is the progress now.
func (l *Log[T]) Latest() T {
	if n := len(l.steps); n > 0 {
		return l.steps[n-1].v
	}
	return l.base
}

// Trim forgets the steps whose writes end at or below d, durable for every
// fault.
func (l *Log[T]) Trim(d int64) {
	i := sort.Search(len(l.steps), func(i int) bool { return l.steps[i].end > d })
	if i == 0 {
		return
	}
	l.base = l.steps[i-1].v
	l.steps = append(l.steps[:0], l.steps[i:]...)
}
