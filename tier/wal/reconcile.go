package wal

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"

	"github.com/stratamq/stratamq/tier"
)

// Local is the local commitlog as Reconcile sees it (a *store.Store
// behind a small adapter).
type Local interface {
	// LocalMinPhysOffset is where the locally held log starts.
	LocalMinPhysOffset() int64
	MaxPhysOffset() int64
	ReadLog(ctx context.Context, off int64, p []byte) (int, error)
	// AppendRaw appends whole records at off, the log's end.
	AppendRaw(off int64, b []byte) error
	// Cut sets aside the local log from at on (a record boundary): after
	// it MaxPhysOffset is at.
	Cut(at int64) error
}

// fetchAhead is how many objects Reconcile reads ahead of the one it
// applies: a bounded burst of GETs, whatever the backlog.
const fetchAhead = 4

// Reconcile makes the local log agree with the chain c past from (the
// offset up to which the manifest's segments hold the log) and returns the
// chain's end, from which a Writer continues:
//   - bytes the chain holds that the local log lacks (a power cut before
//     the page cache reached the disk, an empty disk) are appended;
//   - where the local log holds other bytes than the chain (a deposed
//     writer's tail), it is cut there and continued from the chain;
//   - local bytes past the chain's end are kept (they follow the chain:
//     acknowledged locally, shipped by the next writer).
//
// Objects the local log holds whole are compared by checksum without
// being read; the rest are read, at most fetchAhead at a time.
func Reconcile(ctx context.Context, b tier.Reader, dir string, c *Chain, from int64, local Local) (int64, error) {
	live := c.Live(from)
	end := max(c.End(from), local.LocalMinPhysOffset())
	if len(live) == 0 {
		return end, nil
	}
	lo := max(from, local.LocalMinPhysOffset())
	if l := local.MaxPhysOffset(); l < from {
		return 0, fmt.Errorf("wal: the local log ends at %d, before the bucket's segments end at %d", l, from)
	}
	// Which objects must be read: those the local log does not hold whole.
	need := make([]bool, len(live))
	for i, o := range live {
		need[i] = o.End() > local.MaxPhysOffset() || o.Start < lo
	}
	payloads := prefetch(ctx, b, dir, live, need)
	for i, o := range live {
		l := local.MaxPhysOffset()
		a := max(o.Start, lo)
		var payload []byte
		if need[i] {
			r := <-payloads
			if r.err != nil {
				return 0, r.err
			}
			payload = r.payload
		}
		if !need[i] && o.End() <= l {
			// Held whole: compare checksums.
			sum, err := localCRC(ctx, local, o.Start, o.End())
			if err != nil {
				return 0, err
			}
			if sum == o.CRC {
				continue
			}
		}
		if payload == nil { // held whole but different, or no longer held after a cut
			var err error
			if payload, err = readPayload(ctx, b, dir, o); err != nil {
				return 0, err
			}
		}
		// Compare what the local log holds of o, cut where it differs.
		if hi := min(o.End(), l); a < hi {
			got := make([]byte, hi-a)
			if err := readLocal(ctx, local, a, got); err != nil {
				return 0, err
			}
			if !bytes.Equal(got, payload[a-o.Start:hi-o.Start]) {
				if err := local.Cut(a); err != nil {
					return 0, fmt.Errorf("wal: cut the local log at %d, where it differs from %s: %w", a, o, err)
				}
				l = a
			}
		}
		if o.End() > l {
			if l < a {
				return 0, fmt.Errorf("%w: the local log ends at %d and the WAL's next bytes start at %d (%s): the bytes between are in neither", ErrGap, l, a, o)
			}
			if err := local.AppendRaw(l, payload[l-o.Start:]); err != nil {
				return 0, fmt.Errorf("wal: append %s at %d: %w", o, l, err)
			}
		}
	}
	return end, nil
}

type fetched struct {
	payload []byte
	err     error
}

// prefetch reads the payloads of the objects marked in need, in order,
// at most fetchAhead ahead of the consumer.
func prefetch(ctx context.Context, b tier.Reader, dir string, hs []Header, need []bool) <-chan fetched {
	out := make(chan fetched, fetchAhead)
	go func() {
		defer close(out)
		for i, h := range hs {
			if !need[i] {
				continue
			}
			p, err := readPayload(ctx, b, dir, h)
			select {
			case out <- fetched{p, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return out
}

func readPayload(ctx context.Context, b tier.Reader, dir string, h Header) ([]byte, error) {
	p := make([]byte, h.Length)
	if err := b.ReadAt(ctx, Key(dir, h.Seq), p, h.headerLen()); err != nil {
		return nil, fmt.Errorf("wal: read %s: %w", h, err)
	}
	if err := checkPayload(h, p); err != nil {
		return nil, err
	}
	return p, nil
}

func localCRC(ctx context.Context, l Local, from, to int64) (uint32, error) {
	var sum uint32
	buf := make([]byte, min(to-from, 1<<20))
	for off := from; off < to; {
		p := buf[:min(int64(len(buf)), to-off)]
		if err := readLocal(ctx, l, off, p); err != nil {
			return 0, err
		}
		sum = crc32.Update(sum, castagnoli, p)
		off += int64(len(p))
	}
	return sum, nil
}

func readLocal(ctx context.Context, l Local, off int64, p []byte) error {
	for len(p) > 0 {
		n, err := l.ReadLog(ctx, off, p)
		if err != nil {
			return fmt.Errorf("wal: read the local log at %d: %w", off, err)
		}
		if n == 0 {
			return fmt.Errorf("wal: the local log ends before %d", off)
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}
