package offsets

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"github.com/stratamq/stratamq/infra/vfs"
)

// WriteFileAtomic replaces path with data: write a temp file beside it,
// fsync it, rename it over path, fsync the directory. A crash at any point
// leaves either the old contents or the new ones.
func WriteFileAtomic(fs vfs.FS, path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("offsets: mkdir %s: %w", dir, err)
	}
	tmp := path + ".tmp"
	f, err := fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("offsets: create %s: %w", tmp, err)
	}
	defer func() {
		if err != nil {
			_ = fs.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("offsets: write %s: %w", tmp, err)
	}
	if err = f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("offsets: sync %s: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("offsets: close %s: %w", tmp, err)
	}
	if err = fs.Rename(tmp, path); err != nil {
		return fmt.Errorf("offsets: rename %s: %w", tmp, err)
	}
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("offsets: open dir %s: %w", dir, err)
	}
	if err = d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("offsets: sync dir %s: %w", dir, err)
	}
	return d.Close()
}

// ReadFile returns the contents of path, or (nil, nil) when it does not exist.
func ReadFile(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("offsets: open %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("offsets: read %s: %w", path, err)
	}
	return b, nil
}

// bareIntKey matches an unquoted integer object key as fastjson writes it.
var bareIntKey = regexp.MustCompile(`([{,]\s*)(-?\d+)(\s*:)`)

// QuoteIntKeys turns fastjson's {0:12} into standard JSON {"0":12}. Keys
// inside strings are not touched because a string cannot start right after
// '{' or ',' without a quote.
func QuoteIntKeys(b []byte) []byte {
	return bareIntKey.ReplaceAll(b, []byte(`$1"$2"$3`))
}
