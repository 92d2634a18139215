package vfs

import (
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// WriteFileAtomic replaces path with data: write a temp file beside it,
// fsync it, rename it over path, fsync the directory. A crash at any point
// leaves either the old contents or the new ones, never a torn file.
//
// The directory is created if needed (MkdirAllDurable: every directory it
// creates is made durable in its parent, so a new config/ survives a
// crash with the file in it). The temp name is unique per call
// (<path>.tmp-<16 hex digits>), so concurrent writers of one path never
// rename each other's temp file away; callers that need the last write to
// win must still serialize their writes of a path. A failed write removes
// its temp file; a crash can leave one behind, which no reader looks at
// (RemoveTemps deletes them). Errors are the FS's, unwrapped: callers add
// their context.
func WriteFileAtomic(fs FS, path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := MkdirAllDurable(fs, dir); err != nil {
		return err
	}
	tmp := tempName(path)
	f, err := fs.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = fs.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = fs.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(fs, dir)
}

// tempSuffix starts the name of every temp file WriteFileAtomic makes,
// after the target's own name.
const tempSuffix = ".tmp-"

func tempName(path string) string {
	var b [8]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return path + tempSuffix + hex.EncodeToString(b[:])
}

// RemoveTemps removes the temp files a crashed WriteFileAtomic of path may
// have left beside it (and the fixed <path>.tmp of older versions). Call it
// before the first write of path, when no other writer of path runs. It
// returns how many it removed.
func RemoveTemps(fs FS, path string) (int, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	names, err := fs.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		if name != base+".tmp" && !strings.HasPrefix(name, base+tempSuffix) {
			continue
		}
		if err := fs.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, err
		}
		n++
	}
	return n, nil
}

// MkdirAllDurable creates dir and any missing parents, then syncs the
// parent of every directory it created (deepest last), so that the new
// names survive a crash. An existing dir costs one Stat.
//
// A directory another goroutine is creating at the same moment may be
// seen as existing before its creator has synced its parent; create a
// shared directory once, before concurrent writers start, when that
// matters.
func MkdirAllDurable(fs FS, dir string) error {
	var made []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := fs.Stat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		made = append(made, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(made) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := len(made) - 1; i >= 0; i-- {
		if p := filepath.Dir(made[i]); p != made[i] {
			if err := SyncDir(fs, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// SyncDir makes the entries of dir durable (fsync of the directory).
func SyncDir(fs FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err = d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}

// ReadFile returns the contents of path, or (nil, nil) when it does not
// exist (the counterpart of WriteFileAtomic for small state files). Errors
// are the FS's, unwrapped: callers add their context.
func ReadFile(fs FS, path string) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
