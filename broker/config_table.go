package broker

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// configTable is what the topic and subscription-group managers share: a
// name → config table versioned like RocketMQ's DataVersion (every change
// bumps it) and written to one JSON file when the version moved since the
// last save. The managers embed it and add their own rules.
type configTable[T any] struct {
	fs   vfs.FS
	path string

	// saveMu serializes saves of path, held across snapshot, encode and
	// write: concurrent saves could otherwise write an older snapshot
	// last and mark the newer one saved.
	saveMu sync.Mutex

	// mu guards the fields below; never held across I/O.
	mu struct {
		sync.Mutex
		table   map[string]*T
		version remoting.DataVersion
		saved   int64 // version.Counter last written
	}
}

// init sets the file and removes the temp files a crashed save left
// beside it.
func (t *configTable[T]) init(fs vfs.FS, path string) error {
	t.fs, t.path = fs, path
	t.mu.table = map[string]*T{}
	if _, err := vfs.RemoveTemps(fs, path); err != nil {
		return fmt.Errorf("broker: remove stale temp files of %s: %w", path, err)
	}
	return nil
}

// Get returns a copy of name's config.
func (t *configTable[T]) Get(name string) (T, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.mu.table[name]
	if !ok {
		var zero T
		return zero, false
	}
	return *c, true
}

// Delete removes name; it reports whether it existed.
func (t *configTable[T]) Delete(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.mu.table[name]; !ok {
		return false
	}
	delete(t.mu.table, name)
	t.bumpLocked()
	return true
}

// Names returns every name, sorted.
func (t *configTable[T]) Names() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.mu.table))
}

func (t *configTable[T]) bumpLocked() {
	t.mu.version.Counter++
	t.mu.version.Timestamp = time.Now().UnixMilli()
}

// snapshot copies the table and its version.
func (t *configTable[T]) snapshot() (map[string]T, remoting.DataVersion) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]T, len(t.mu.table))
	for n, c := range t.mu.table {
		out[n] = *c
	}
	return out, t.mu.version
}

// save writes encode's bytes for the current snapshot when the version
// moved since the last save. Saves of one table run one at a time.
func (t *configTable[T]) save(encode func(map[string]T, remoting.DataVersion) ([]byte, error)) error {
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	table, v := t.snapshot()
	t.mu.Lock()
	dirty := v.Counter != t.mu.saved
	t.mu.Unlock()
	if !dirty {
		return nil
	}
	b, err := encode(table, v)
	if err != nil {
		return err
	}
	if err := offsets.WriteFileAtomic(t.fs, t.path, b); err != nil {
		return err
	}
	t.mu.Lock()
	t.mu.saved = v.Counter
	t.mu.Unlock()
	return nil
}
