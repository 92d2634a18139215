package store

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"

	"github.com/stratamq/stratamq/infra/vfs"
)

// LogEnd reads, without changing anything, where the commitlog of the
// closed store in dir starts and where its last valid record ends: the end
// the store will have once it opens (recovery cuts a torn or zero-filled
// tail). File sizes are never taken for data: the active segment is
// zero-filled ahead of its records, and a crash leaves the zeros.
// (0, 0, nil) for a store without a commitlog.
//
// The broker judges a data dir with it before opening the store: whether a
// promoted copy reaches the end of what the bucket holds, and how long a
// log is when it competes for the lease.
func LogEnd(fs vfs.FS, dir string, maxMessageSize int) (start, end int64, err error) {
	t, err := openSegTable(fs, dir)
	defer func() { t.close() }()
	if err != nil || len(t) == 0 {
		return 0, 0, err
	}
	start, fileEnd := t[0].base, t[len(t)-1].end()
	// Scan from where recovery does: the store's checkpoint, when it lies
	// in the log (everything before it was synced before the checkpoint
	// was written), else the last segment. After a clean stop the
	// checkpoint is the end: nothing is read (a broker's start used to
	// scan its whole active segment here, 150 ms for 220 MB on a cold
	// page cache).
	from := t[len(t)-1].base
	s := &Store{fs: fs, opts: Options{Dir: dir}, log: slog.New(slog.DiscardHandler)}
	if ck, err := s.readCheckpoint(); err == nil && ck != nil && ck.dispatched >= start && ck.dispatched <= fileEnd {
		from = ck.dispatched
	}
	end, err = scanSegmentsBuf(t, from, make([]byte, max(4<<20, maxMessageSize)), true, func(*recordMeta) error { return nil })
	if err != nil {
		return 0, 0, err
	}
	return start, end, nil
}

// LogRecords reads, without changing anything, the valid records of the
// closed store in dir from commitlog offset from (where a record begins)
// to the log's end as LogEnd finds it, calling fn with each record's
// offset, topic and properties (fn must not keep them). It returns where
// the scan stopped: the end of the last valid record (from itself when
// from is past the log or not where a record begins). An error from fn
// stops the scan and is returned.
//
// The broker reads with it what a returning data dir holds past the end
// of what the bucket holds, to tell whether any of it was acknowledged.
func LogRecords(fs vfs.FS, dir string, maxMessageSize int, from int64, fn func(phys int64, topic, props string) error) (end int64, err error) {
	t, err := openSegTable(fs, dir)
	defer func() { t.close() }()
	if err != nil || len(t) == 0 || from < t[0].base || from > t[len(t)-1].end() {
		return from, err
	}
	return scanSegmentsBuf(t, from, make([]byte, max(4<<20, maxMessageSize)), true, func(m *recordMeta) error {
		return fn(m.physOffset, string(m.topic), string(m.props))
	})
}

// openSegTable opens the commitlog segments of the closed store in dir
// read-only, up to the first gap (recovery removes what follows one); an
// empty table for a store without a commitlog. The caller closes it.
func openSegTable(fs vfs.FS, dir string) (segTable, error) {
	clDir := filepath.Join(dir, "commitlog")
	names, err := fs.ReadDir(clDir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("store: list %s: %w", clDir, err)
	}
	sort.Strings(names)
	var t segTable
	for _, name := range names {
		base, ok := parseSegmentName(name)
		if !ok {
			continue
		}
		if len(t) > 0 && base != t[len(t)-1].end() {
			break // recovery removes what follows a gap
		}
		path := filepath.Join(clDir, name)
		f, err := fs.OpenFile(path, os.O_RDONLY, 0)
		if err != nil {
			return t, fmt.Errorf("store: open segment: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return t, fmt.Errorf("store: stat segment: %w", err)
		}
		sg := &segment{base: base, path: path, f: f}
		sg.size.Store(fi.Size())
		t = append(t, sg)
	}
	return t, nil
}
