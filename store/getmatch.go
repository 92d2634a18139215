package store

import (
	"context"
	"encoding/binary"
)

// getMatching is Get with GetRequest.Match: RocketMQ's isMatchedByCommitLog
// (SQL92 filters), which must read each record the tags Filter passes.
// It runs the plain Get in rounds of MaxMsgs records from req.Offset on,
// keeps the records Match takes (copied into one buffer, so a round's
// buffer of mostly refused records is not held), and stops when it has
// MaxMsgs of them, their bytes reach MaxBytes, or the rounds have scanned
// the Get budget of max(800, MaxMsgs) entries (the last round may scan up
// to that many more when the tags Filter skips entries too), the queue's
// end, or a hole. NextBeginOffset is past the last record it took or
// refused, so a pull that finds nothing still moves on by a bounded scan.
func (s *Store) getMatching(ctx context.Context, req GetRequest) (GetResult, error) {
	match := req.Match
	maxMsgs, maxBytes := req.MaxMsgs, req.MaxBytes
	if maxMsgs <= 0 {
		maxMsgs = DefaultGetMaxMsgs
	}
	maxMsgs = min(maxMsgs, MaxGetMsgs)
	if maxBytes <= 0 {
		maxBytes = DefaultGetMaxBytes
	}
	budget := int64(max(getScanMin, maxMsgs))

	inner := req
	inner.Match = nil
	inner.MaxMsgs, inner.MaxBytes = maxMsgs, maxBytes
	var (
		out      GetResult
		buf      []byte
		ends     []int // end of each kept record in buf
		removing = true
		full     bool
	)
	off := req.Offset
	for round := 0; !full && off-req.Offset < budget; round++ {
		inner.Offset = off
		r, err := s.Get(ctx, inner)
		if err != nil {
			return GetResult{}, err
		}
		if round == 0 && r.Status != Found && r.Status != NoMatchedMessage && r.Status != MessageWasRemoving {
			return r, nil // nothing to filter: the queue's end, a hole, an offset out of range
		}
		out.MinOffset, out.MaxOffset = r.MinOffset, r.MaxOffset
		switch r.Status {
		case Found:
			removing = false
		case NoMatchedMessage:
			removing = false
			fallthrough
		case MessageWasRemoving:
			if r.NextBeginOffset <= off {
				full = true // no progress: stop
			}
			off = r.NextBeginOffset
			continue
		default:
			// A later round reached the end, a hole or a bound: what was
			// kept so far is the answer, and the next pull starts there.
			full = true
			continue
		}
		next := r.NextBeginOffset
		for _, rec := range r.Records {
			m, err := parseMeta(rec, false)
			if err != nil {
				return GetResult{}, err
			}
			if !match(m.props) {
				continue
			}
			if len(ends) == maxMsgs || len(ends) > 0 && len(buf)+len(rec) > maxBytes {
				// No room: the next pull starts at this record.
				next, full = int64(binary.BigEndian.Uint64(rec[offQueueOffset:])), true
				break
			}
			if buf == nil {
				buf = make([]byte, 0, min(maxBytes, max(len(rec), 64<<10)))
			}
			buf = append(buf, rec...)
			ends = append(ends, len(buf))
		}
		if next <= off {
			break // a record that names an offset behind the scan: take no step back
		}
		off = next
		if err := ctx.Err(); err != nil {
			return GetResult{}, err
		}
	}
	out.NextBeginOffset = off
	if len(ends) == 0 {
		out.Status = NoMatchedMessage
		if removing {
			out.Status = MessageWasRemoving
		}
		return out, nil
	}
	out.Status, out.Bytes = Found, len(buf)
	out.Records = make([][]byte, len(ends))
	start := 0
	for i, end := range ends {
		out.Records[i] = buf[start:end:end]
		start = end
	}
	return out, nil
}
