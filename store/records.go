package store

import (
	"context"
	"encoding/binary"
	"fmt"
)

// readRecords reads the records spans name (total bytes) for a Get:
// each record as a slice, and the same bytes as chunks, contiguous runs a
// response sends as one part each.
//
// Runs of records adjacent in the log are read with one pread into one
// buffer (or one cold read) as before. A run wholly below the local log,
// when Options.Cold is a ColdLender, is served by reference to the cold
// reader's decoded frames: no buffer, no copy, one chunk per frame the run
// touches; only a record that straddles two frames is copied, into a
// buffer of its own. Cold replay is bounded by how often each byte is
// touched on its way from the bucket to the socket (docs/benchmarks.md),
// and this takes away the per-pull buffer's clearing and the copy into it.
func (s *Store) readRecords(ctx context.Context, req GetRequest, spans []span, total int) (recs, chunks [][]byte, err error) {
	// One allocation for both: a local read makes one chunk (its runs
	// are packed into one buffer); lent runs make more, and append grows.
	both := make([][]byte, len(spans)+1)
	recs, chunks = both[:len(spans):len(spans)], both[len(spans):len(spans)]
	lender, _ := s.opts.Cold.(ColdLender)
	var data []byte // the copy buffer, made on first use
	p := 0          // bytes of data used
	for i := 0; i < len(spans); {
		j, runEnd := i, spans[i].phys
		for j < len(spans) && spans[j].phys == runEnd {
			runEnd += int64(spans[j].size)
			j++
		}
		if lender != nil && s.belowLocal(runEnd) {
			if chunks, err = s.lendRun(ctx, lender, spans[i:j], recs[i:j], chunks); err != nil {
				return nil, nil, err
			}
		} else {
			if data == nil {
				data = make([]byte, total)
			}
			runLen := int(runEnd - spans[i].phys)
			run := data[p : p+runLen : p+runLen]
			if err := s.readLog(ctx, run, spans[i].phys); err != nil {
				return nil, nil, err
			}
			if n := len(chunks); n > 0 && p > 0 && sameEnd(chunks[n-1], data[:p]) {
				chunks[n-1] = data[p-len(chunks[n-1]) : p+runLen : p+runLen]
			} else {
				chunks = append(chunks, run)
			}
			for k := i; k < j; k++ {
				sz := int(spans[k].size)
				recs[k] = data[p : p+sz : p+sz]
				p += sz
			}
		}
		for k := i; k < j; k++ {
			if err := checkRecord(req, recs[k], spans[k]); err != nil {
				return nil, nil, err
			}
		}
		i = j
	}
	return recs, chunks, nil
}

// sameEnd reports whether a ends where b ends, in the same memory.
func sameEnd(a, b []byte) bool {
	return len(a) > 0 && len(b) >= len(a) && &a[len(a)-1] == &b[len(b)-1]
}

// checkRecord is a cheap sanity check: the bytes are the record the entry
// names (a bad cold tier or consumequeue is an error, never garbage).
func checkRecord(req GetRequest, rec []byte, sp span) error {
	sz := int(sp.size)
	if sz < RecordOverhead || len(rec) != sz || binary.BigEndian.Uint32(rec[offTotalSize:]) != uint32(sz) ||
		binary.BigEndian.Uint32(rec[offMagic:]) != MagicV1 ||
		int64(binary.BigEndian.Uint64(rec[offPhysOffset:])) != sp.phys {
		return corruptf("%s/%d: no %d-byte record at commitlog offset %d", req.Topic, req.QueueID, sz, sp.phys)
	}
	return nil
}

// belowLocal reports whether the log bytes below end are all below the
// local log (dropped to the tier). The local log only shrinks from its
// start, so the answer stays true.
func (s *Store) belowLocal(end int64) bool {
	t := *s.segs.Load()
	if len(t) > 0 {
		return end <= t[0].base
	}
	return end <= s.writePos.Load()
}

// lendRun fills recs with the records of a run of adjacent spans lent by
// the cold reader, and appends the chunks they form to chunks.
func (s *Store) lendRun(ctx context.Context, l ColdLender, spans []span, recs, chunks [][]byte) ([][]byte, error) {
	var (
		piece    []byte // the lent bytes at pieceOff
		pieceOff int64
		chunkEnd int64 = -1 // log offset where the last chunk, from piece, ends
	)
	lend := func(off, end int64) error {
		b, err := l.Lend(ctx, off, int(end-off))
		switch {
		case err != nil:
			return fmt.Errorf("%w: %d bytes at %d: %w", ErrColdRead, end-off, off, err)
		case len(b) == 0 || int64(len(b)) > end-off:
			return fmt.Errorf("%w: %d bytes at %d: lender returned %d", ErrColdRead, end-off, off, len(b))
		}
		piece, pieceOff, chunkEnd = b, off, -1
		return nil
	}
	runEnd := spans[len(spans)-1].phys + int64(spans[len(spans)-1].size)
	for k, sp := range spans {
		off, end := sp.phys, sp.phys+int64(sp.size)
		if piece == nil || off >= pieceOff+int64(len(piece)) {
			if err := lend(off, runEnd); err != nil {
				return nil, err
			}
		}
		if end <= pieceOff+int64(len(piece)) {
			recs[k] = piece[off-pieceOff : end-pieceOff : end-pieceOff]
			if chunkEnd == off {
				c := chunks[len(chunks)-1]
				chunks[len(chunks)-1] = piece[off-pieceOff-int64(len(c)) : end-pieceOff : end-pieceOff]
			} else {
				chunks = append(chunks, recs[k])
			}
			chunkEnd = end
			continue
		}
		// The record straddles frames: copy it, piece by piece.
		rec := make([]byte, 0, sp.size)
		rec = append(rec, piece[off-pieceOff:]...)
		for int64(len(rec)) < int64(sp.size) {
			if err := lend(off+int64(len(rec)), runEnd); err != nil {
				return nil, err
			}
			rec = append(rec, piece[:min(len(piece), int(sp.size)-len(rec))]...)
		}
		recs[k] = rec
		chunks = append(chunks, rec)
		chunkEnd = -1
	}
	return chunks, nil
}
