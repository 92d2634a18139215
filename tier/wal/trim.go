package wal

import (
	"context"
	"slices"
)

// Trim tells the writer that the log up to uploaded is in the manifest's
// segments: the WAL objects that hold nothing past it are deleted (beside
// the shipping, under the fence).
func (w *Writer) Trim(uploaded int64) {
	for {
		cur := w.trimTo.Load()
		if uploaded <= cur || w.trimTo.CompareAndSwap(cur, uploaded) {
			break
		}
	}
	select {
	case w.trims <- struct{}{}:
	default:
	}
}

func sortHeaders(hs []Header) {
	slices.SortFunc(hs, func(a, b Header) int { return compareU(a.Seq, b.Seq) })
}

// hold records an object this writer knows is in the bucket.
func (w *Writer) hold(h Header) {
	w.trimMu.Lock()
	defer w.trimMu.Unlock()
	i, _ := slices.BinarySearchFunc(w.held, h.Seq, func(o Header, s uint64) int { return compareU(o.Seq, s) })
	w.held = slices.Insert(w.held, i, h)
}

// trim deletes the objects below the first one of the chain that holds
// bytes past trimTo (skipped and filler objects below it too), one at a
// time in ascending order, under the fence, and stops at the first DELETE
// that fails (the next trim goes on from there). What is left is always
// every listed object from some number up: a reader takes a missing
// number inside a writer's run for a PUT that never landed and ends the
// chain there, so deleting out of order (several at once, one of them
// failing) would cut acknowledged objects past the trim point off the
// chain. The chain's newest object (this writer's, its claim at least)
// is never deleted: the numbers then never start again at #1, and a
// deposed writer's PUT that lands late is older than the newest object
// listed, which every reader skips; with nothing listed it would look
// like the chain's tail. It runs on its own goroutine: shipping goes on
// meanwhile. It says whether what is left holds nothing past trimTo (the
// writer may then continue from there: continueFrom).
func (w *Writer) trim(ctx context.Context) trimResult {
	to := w.trimTo.Load()
	w.trimMu.Lock()
	cut := len(w.held)
	for i, h := range w.held {
		if w.inChain(h) && h.End() > to {
			cut = i
			break
		}
	}
	for i := len(w.held) - 1; i >= 0; i-- {
		if w.inChain(w.held[i]) {
			cut = min(cut, i)
			break
		}
	}
	victims := slices.Clone(w.held[:cut])
	w.trimMu.Unlock()
	gone := map[uint64]bool{}
	for _, h := range victims {
		if _, err := w.fence(); err != nil {
			break
		}
		actx, cancel := w.bound(ctx)
		err := w.cfg.Bucket.Delete(actx, Key(w.cfg.Dir, h.Seq))
		cancel()
		if err != nil {
			w.st.errors.Add(1)
			w.log.Warn("WAL trim failed; retried at the next trim", "seq", h.Seq, "err", err)
			break
		}
		w.st.deletes.Add(1)
		gone[h.Seq] = true
	}
	w.trimMu.Lock()
	w.held = slices.DeleteFunc(w.held, func(h Header) bool { return gone[h.Seq] })
	all := len(gone) == len(victims) && !slices.ContainsFunc(w.held, func(h Header) bool { return w.inChain(h) && h.End() > to })
	w.trimMu.Unlock()
	return trimResult{to: to, all: all}
}

// trimResult is what a trim did: it trimmed to to, and what is left of
// the chain holds nothing past to (all).
type trimResult struct {
	to  int64
	all bool
}

// continueFrom moves the writer past to, which the segments hold, when
// what is left of the chain holds nothing past it and nothing is in
// flight (on Run's goroutine): the bytes before it are in segments. The
// next object continues the newest one left (Prev), starting past its
// end; a reader takes it as the chain's next (walk).
func (w *Writer) continueFrom(to int64) {
	w.shipped = to
	if to > w.durable.Load() {
		w.durable.Store(to)
		if w.cfg.OnDurable != nil {
			w.cfg.OnDurable(to)
		}
	}
}

// inChain reports whether h is an object of the chain (inherited or this
// writer's), not one the reader skipped.
func (w *Writer) inChain(h Header) bool {
	if h.Claim == w.claim && h.Epoch == w.epoch {
		return true
	}
	return !slices.ContainsFunc(w.skipped, func(s Header) bool { return s.Seq == h.Seq })
}

// Oldest is where the oldest bytes of the chain this writer still holds
// in the bucket, or may still put there, start: what the manifest must
// cover, from there on, before Trim can delete anything. Never past
// Durable: an object past it may still be in flight (PUTs land out of
// order), and its bytes are in no held object yet. The newest object a
// trim kept only so that numbers never start again (trim) holds no such
// bytes once the segments cover it.
func (w *Writer) Oldest() int64 {
	to := w.trimTo.Load()
	durable := w.durable.Load()
	w.trimMu.Lock()
	defer w.trimMu.Unlock()
	for _, h := range w.held {
		if w.inChain(h) && h.Length > 0 && h.End() > to {
			return min(h.Start, durable)
		}
	}
	return durable
}
