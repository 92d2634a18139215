package wal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/stratamq/stratamq/tier"
)

// ErrGap: the chain's live part does not reach back to where the caller's
// log is whole in the bucket (the manifest's end): bytes between are in
// no object. A writer never leaves one; its cause is outside this package
// (objects deleted by hand, a bucket that lost writes).
var ErrGap = errors.New("wal: gap before the first object")

// Chain is the WAL as a reader sees it: the objects whose bytes are part
// of the log, in order, each starting where the one before ends (ReadHeld:
// or past it, where the segments hold the bytes between).
type Chain struct {
	Objects []Header // the chain, by sequence number; contiguous byte ranges
	Skipped []Header // listed objects that are not part of it (deposed, orphaned or superseded)
	MaxSeq  uint64   // the highest sequence number listed (0: none)
	Holes   []uint64 // numbers between the lowest and the highest listed that hold no object
}

// End is the commitlog offset the chain reaches, or from when no object of
// the chain ends past from.
func (c *Chain) End(from int64) int64 {
	if n := len(c.Objects); n > 0 && c.Objects[n-1].End() > from {
		return c.Objects[n-1].End()
	}
	return from
}

// Last is the sequence number of the chain's last object (0: none): what a
// new writer's claim continues.
func (c *Chain) Last() uint64 {
	if n := len(c.Objects); n > 0 {
		return c.Objects[n-1].Seq
	}
	return 0
}

// Live is the part of the chain past from (the offset up to which the log
// is in the manifest's segments): every object holding bytes past from, in
// order. The first may start after from: a writer whose log began past the
// segments' end (a restore that resumed past the checkpoint's
// reservations) claimed there, and nothing was ever written in between.
func (c *Chain) Live(from int64) []Header {
	var live []Header
	for _, h := range c.Objects {
		if h.Length > 0 && h.End() > from {
			live = append(live, h)
		}
	}
	return live
}

// maxReadTries bounds how often Read starts over when an object it listed
// is gone before its header is read (a writer trimmed it meanwhile).
const maxReadTries = 8

// headerReads is how many headers Read fetches at once.
const headerReads = 8

// Read lists dir in b and builds the chain from the objects' headers. An
// object that fails its checksums is an error: nothing is skipped that a
// writer may have acknowledged.
func Read(ctx context.Context, b tier.Reader, dir string) (*Chain, error) {
	return ReadHeld(ctx, b, dir, nil)
}

// ReadFrom is ReadHeld for segments that hold the log up to floor.
func ReadFrom(ctx context.Context, b tier.Reader, dir string, floor int64) (*Chain, error) {
	return ReadHeld(ctx, b, dir, func(off int64) bool { return off < floor })
}

// ReadHeld is Read for a reader that knows which log offsets the
// manifest's segments hold (held). Within a writer's run, an object whose
// predecessor is no longer listed and whose first byte's predecessor the
// segments hold goes on from there: its predecessor was trimmed, and what
// the walk holds before it is a trim's leftover or a PUT that landed after
// its number was trimmed. Walked as Read walks, such an old object below
// later ones of the same writer looks like a run with a hole, and the
// chain would end there, before what was acknowledged. Every header is
// walked: the newest writer and the free numbers are those of the whole
// listing.
func ReadHeld(ctx context.Context, b tier.Reader, dir string, held func(off int64) bool) (*Chain, error) {
	var last error
	for try := 0; try < maxReadTries; try++ {
		hs, maxSeq, err := readHeaders(ctx, b, dir)
		if errors.Is(err, tier.ErrNotExist) {
			last = err
			continue // trimmed between the list and the read
		}
		if err != nil {
			return nil, err
		}
		c, err := walk(hs, held)
		if err != nil {
			return nil, err
		}
		c.MaxSeq = maxSeq
		for i := 1; i < len(hs); i++ {
			for s := hs[i-1].Seq + 1; s < hs[i].Seq; s++ {
				c.Holes = append(c.Holes, s)
			}
		}
		return c, nil
	}
	return nil, fmt.Errorf("wal: objects kept vanishing while read (%d tries): %w", maxReadTries, last)
}

func readHeaders(ctx context.Context, b tier.Reader, dir string) ([]Header, uint64, error) {
	type listed struct {
		key  string
		seq  uint64
		size int64
	}
	var ls []listed
	err := b.List(ctx, dir, func(key string, size int64) error {
		if seq, ok := parseKey(dir, key); ok {
			ls = append(ls, listed{key, seq, size})
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("wal: list %s: %w", dir, err)
	}
	hs := make([]Header, len(ls))
	errs := make([]error, len(ls))
	sem := make(chan struct{}, headerReads)
	var wg sync.WaitGroup
	for i, l := range ls {
		if l.size < headerSizeV1 {
			errs[i] = fmt.Errorf("%w: %s: %d bytes", ErrCorrupt, l.key, l.size)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			var buf [HeaderSize]byte // a version-1 object may be shorter
			if err := b.ReadAt(ctx, l.key, buf[:min(l.size, HeaderSize)], 0); err != nil {
				errs[i] = fmt.Errorf("wal: read %s: %w", l.key, err)
				return
			}
			h, err := decodeHeader(buf[:min(l.size, HeaderSize)])
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("%s: %w", l.key, err)
			case h.Seq != l.seq || h.headerLen()+h.Length != l.size:
				errs[i] = fmt.Errorf("%w: %s holds %s in %d bytes", ErrCorrupt, l.key, h, l.size)
			default:
				hs[i] = h
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, tier.ErrNotExist) {
			return nil, 0, tier.ErrNotExist
		}
		return nil, 0, err
	}
	var maxSeq uint64
	if n := len(ls); n > 0 {
		maxSeq = ls[n-1].seq
	}
	return hs, maxSeq, nil
}

// walk builds the chain from headers sorted by sequence number.
//
// Each writer's objects have consecutive numbers from its claim; a writer
// acknowledges an object only once it and every object of its own before it
// exist (so a number another writer holds ends what it can acknowledge).
// The walk keeps the newest writer's view, by (epoch, claim):
//   - an object of an older writer than the newest seen so far is skipped
//     (a deposed writer's late write);
//   - a newer writer's claim replaces everything after the object it
//     continues (what it did not see when it claimed was never
//     acknowledged: its writer had no unbroken run up to it);
//   - a newer writer's object whose claim is not listed (trimmed) starts
//     the chain afresh;
//   - within a writer, the chain ends at its first missing or
//     non-contiguous object (a PUT that never landed): the rest of its run
//     is skipped.
//
// A newer writer's object that fits none of these (a claim continuing an
// object this walk does not keep, or a run whose claim is listed but not
// kept) contradicts how writers work: an error, never a silent skip.
//
// held (ReadHeld; nil: none) says whether the manifest's segments hold the
// log byte at an offset: a run's object whose predecessor is not listed
// and whose first byte's predecessor they hold goes on from there.
//
// A number names an object only together with its writer: a PUT that
// lands late may put an older writer's object at a number a newer writer
// used and trimmed. So a claim whose number holds another writer's object
// counts as trimmed, and so does a claim's predecessor whose number holds
// an object that ends past the claim's start (a claim starts where what it
// continues ends, or past it).
func walk(hs []Header, held func(off int64) bool) (*Chain, error) {
	c := &Chain{}
	var cur [2]uint64 // the newest writer so far
	broken := false   // the current writer's run has a hole
	// A writer writes its claim before its data objects, and a claim
	// continues an object it read: one of them not listed was deleted
	// since, by a trim (the segments hold its bytes), whatever older
	// objects are still listed (a trim's leftover, a PUT that landed late
	// after its number was trimmed). A filler holds no object of a run: a
	// number it holds was free when a later writer claimed (never
	// written, or trimmed).
	at := make(map[uint64]Header, len(hs))
	for _, h := range hs {
		if !h.Filler {
			at[h.Seq] = h
		}
	}
	for _, h := range hs {
		if h.Filler {
			c.Skipped = append(c.Skipped, h) // a hole, filled: the run before it ends there
			continue
		}
		inc := h.incarnation()
		switch cmp := compareInc(inc, cur); {
		case cmp < 0:
			c.Skipped = append(c.Skipped, h)
			continue
		case cmp > 0:
			switch {
			case h.IsClaim():
				// Back to the object it continues (none: it started the chain).
				keep := 0
				if p, ok := at[h.Prev]; h.Prev != 0 && ok && h.continues(p) {
					k := slices.IndexFunc(c.Objects, func(o Header) bool { return o.Seq == h.Prev })
					if k < 0 {
						return nil, fmt.Errorf("%w: %s continues #%d, which is not in the chain", ErrCorrupt, h, h.Prev)
					}
					keep = k + 1
				} // else: none, or its predecessor was trimmed (its number free, or another writer's late object there)
				if keep > 0 && c.Objects[keep-1].End() > h.Start {
					// A claim starts at the end of what it continues, or
					// past it (the bytes between are in segments, or were
					// never written); never inside it.
					return nil, fmt.Errorf("%w: %s continues %s", ErrCorrupt, h, c.Objects[keep-1])
				}
				c.Skipped = append(c.Skipped, c.Objects[keep:]...)
				c.Objects = c.Objects[:keep]
			case !isClaimOf(at, h.Claim, inc):
				// Its claim was trimmed: it starts the listed chain.
				c.Skipped = append(c.Skipped, c.Objects...)
				c.Objects = c.Objects[:0]
			default:
				return nil, fmt.Errorf("%w: %s: its writer's claim #%d is listed but not in the chain", ErrCorrupt, h, h.Claim)
			}
			cur, broken = inc, false
			c.Objects = append(c.Objects, h)
		default:
			n := len(c.Objects)
			if !broken && n > 0 && c.Objects[n-1].End() <= h.Start && c.Objects[n-1].Seq == h.Prev {
				// The next object of the run: it starts where the one
				// before ends, or past it when the writer continued past
				// what the segments hold, every object below trimmed but
				// its newest (continueFrom).
				c.Objects = append(c.Objects, h)
				continue
			}
			if _, ok := at[h.Prev]; !ok && held != nil && held(h.Start-1) && (n == 0 || c.Objects[n-1].End() <= h.Start) {
				// Its predecessor was trimmed (the segments hold what lies
				// below it: what the walk holds before it is a leftover or
				// a late PUT), or never landed (then a later writer's claim
				// continues an object before it and cuts it off). The
				// chain goes on from it; only bytes the segments hold
				// separate it from what came before.
				c.Objects = append(c.Objects, h)
				broken = false
				continue
			}
			broken = true
			c.Skipped = append(c.Skipped, h)
		}
	}
	slices.SortFunc(c.Skipped, func(a, b Header) int { return compareU(a.Seq, b.Seq) })
	return c, nil
}

// isClaimOf reports whether at's object numbered seq is the claim of the
// writer inc.
func isClaimOf(at map[uint64]Header, seq uint64, inc [2]uint64) bool {
	h, ok := at[seq]
	return ok && h.IsClaim() && h.incarnation() == inc
}

func compareInc(a, b [2]uint64) int {
	if c := compareU(a[0], b[0]); c != 0 {
		return c
	}
	return compareU(a[1], b[1])
}

func compareU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
