package store

import (
	"context"
	"fmt"
)

// ReadLog copies committed commitlog bytes [off, min(off+len(p),
// MaxPhysOffset)) into p and returns how many it copied: the raw log, for
// replication (package ha). It reads the local segments and, below the first
// local segment, Options.Cold; the range may cross segment boundaries. It
// never reads past MaxPhysOffset (bytes below it are whole records that a
// writer finished), so off == MaxPhysOffset gives (0, nil). An offset below
// MinPhysOffset or past MaxPhysOffset gives ErrNotFound.
func (s *Store) ReadLog(ctx context.Context, off int64, p []byte) (int, error) {
	end := s.writePos.Load()
	if off < 0 || off > end {
		return 0, fmt.Errorf("store: ReadLog at %d (log ends at %d): %w", off, end, ErrNotFound)
	}
	if lo := s.MinPhysOffset(); off < lo {
		return 0, fmt.Errorf("store: ReadLog at %d is below the log's start %d: %w", off, lo, ErrNotFound)
	}
	n := int(min(int64(len(p)), end-off))
	if n == 0 {
		return 0, nil
	}
	if err := s.readLog(ctx, p[:n], off); err != nil {
		return 0, err
	}
	return n, nil
}
