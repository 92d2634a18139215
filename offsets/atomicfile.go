package offsets

import (
	"fmt"
	"regexp"

	"github.com/stratamq/stratamq/infra/vfs"
)

// WriteFileAtomic replaces path with data, crash-safely (vfs.WriteFileAtomic:
// temp → fsync → rename → fsync of the directory).
func WriteFileAtomic(fs vfs.FS, path string, data []byte) error {
	if err := vfs.WriteFileAtomic(fs, path, data); err != nil {
		return fmt.Errorf("offsets: write %s: %w", path, err)
	}
	return nil
}

// ReadFile returns the contents of path, or (nil, nil) when it does not exist.
func ReadFile(fs vfs.FS, path string) ([]byte, error) {
	b, err := vfs.ReadFile(fs, path)
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
