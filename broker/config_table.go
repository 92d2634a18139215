package broker

import (
	"errors"
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
		// pending holds what addSaved is creating: written by every save,
		// moved into table (made visible) once a save holding it returned.
		pending map[string]*pendingAdd[T]
	}
}

// pendingAdd is one creation waiting for its save (addSaved).
type pendingAdd[T any] struct {
	v    *T
	done chan struct{} // closed once v is visible in table, or dropped
}

// init sets the file and removes the temp files a crashed save left
// beside it.
func (t *configTable[T]) init(fs vfs.FS, path string) error {
	t.fs, t.path = fs, path
	t.mu.table = map[string]*T{}
	t.mu.pending = map[string]*pendingAdd[T]{}
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

// saveSnapshot is snapshot plus the creations waiting for their save
// (what the file is to hold).
func (t *configTable[T]) saveSnapshot() (map[string]T, remoting.DataVersion, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]T, len(t.mu.table)+len(t.mu.pending))
	for n, c := range t.mu.table {
		out[n] = *c
	}
	for n, p := range t.mu.pending {
		if _, ok := out[n]; !ok {
			out[n] = *p.v
		}
	}
	return out, t.mu.version, t.mu.version.Counter != t.mu.saved
}

// addSaved creates name with build's config unless it exists, and makes it
// visible (Get, Names, snapshot) only once a save of the table holding it
// returned, so no request is answered on a creation that a process crash
// would forget: a concurrent addSaved of the same name waits for that
// save. build runs with mu held and sees the table (and len(pending)).
// created reports whether this call made it. If the save fails, keep
// decides: true makes the creation visible anyway (unsaved: the next save
// retries it), false drops it; either way the save's error is returned.
func (t *configTable[T]) addSaved(name string, build func() (*T, error), save func() error, keep bool) (v T, created bool, err error) {
	t.mu.Lock()
	for {
		if c, ok := t.mu.table[name]; ok {
			v = *c
			t.mu.Unlock()
			return v, false, nil
		}
		p, ok := t.mu.pending[name]
		if !ok {
			break
		}
		t.mu.Unlock()
		<-p.done
		t.mu.Lock()
	}
	c, err := build()
	if err != nil {
		t.mu.Unlock()
		return v, false, err
	}
	p := &pendingAdd[T]{v: c, done: make(chan struct{})}
	t.mu.pending[name] = p
	t.bumpLocked()
	t.mu.Unlock()

	err = save() // saves of this table coalesce: one write may carry many creations
	t.mu.Lock()
	delete(t.mu.pending, name)
	if cur, ok := t.mu.table[name]; ok {
		c = cur // put meanwhile (Put, a mirror): that one stands
		created = false
	} else if err == nil || keep {
		t.mu.table[name] = c
		created = true
	} else {
		t.bumpLocked() // the file may hold it: the next save rewrites without
	}
	v = *c
	t.mu.Unlock()
	close(p.done)
	if err != nil {
		err = fmt.Errorf("%w (%s): %w", ErrConfigNotSaved, name, err)
	}
	return v, created, err
}

// ErrConfigNotSaved: a creation's save failed (addSaved).
var ErrConfigNotSaved = errors.New("broker: the config file holding a new topic or group could not be written")

// save writes encode's bytes for the current snapshot when the version
// moved since the last save. Saves of one table run one at a time.
func (t *configTable[T]) save(encode func(map[string]T, remoting.DataVersion) ([]byte, error)) error {
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	table, v, dirty := t.saveSnapshot()
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
