package store

import (
	"context"
	"encoding/binary"
	"fmt"
)

// StoreTimeAt is the STORETIMESTAMP (ms) of the record that starts at the
// commitlog offset off, a record boundary below MaxPhysOffset (a filler
// written by others is skipped). It reads a record's first bytes only, local
// or cold, so it is cheap enough for a metrics scrape: the broker's HA status
// dates the oldest byte a slave has not acknowledged with it.
func (s *Store) StoreTimeAt(ctx context.Context, off int64) (int64, error) {
	for range 2 { // a filler, then the record after it
		if end := s.writePos.Load(); off < 0 || off >= end {
			return 0, fmt.Errorf("store: no record at %d (log ends at %d): %w", off, end, ErrNotFound)
		}
		// A record is at least RecordOverhead (> storeTSEnd) bytes; a
		// filler at least 8.
		var b [storeTSEnd]byte
		n := int(min(int64(len(b)), s.writePos.Load()-off))
		if n < 8 {
			return 0, corruptf("no record at commitlog offset %d: %d bytes before the end", off, n)
		}
		if err := s.readLog(ctx, b[:n], off); err != nil {
			return 0, err
		}
		magic := binary.BigEndian.Uint32(b[offMagic:])
		if magic == MagicFiller {
			off += int64(binary.BigEndian.Uint32(b[offTotalSize:]))
			continue
		}
		if magic != MagicV1 || n < storeTSEnd || int64(binary.BigEndian.Uint64(b[offPhysOffset:])) != off {
			return 0, corruptf("no record at commitlog offset %d (magic %#08x)", off, magic)
		}
		return storeTimestampOf(b[:]), nil
	}
	return 0, corruptf("two fillers in a row at commitlog offset %d", off)
}
