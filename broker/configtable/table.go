package configtable

import (
	"encoding/json"
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

// Table is what the topic and subscription-group managers share: a
// name → config table versioned like RocketMQ's DataVersion (every change
// bumps it) and written to one JSON file when the version moved since the
// last save. The managers embed it and add their own rules.
type Table[T any] struct {
	fs   vfs.FS
	path string

	// saveMu serializes saves of path, held across snapshot, encode and
	// write: concurrent saves could otherwise write an older snapshot
	// last and mark the newer one saved.
	saveMu sync.Mutex

	// Mu guards the fields below; never held across I/O. The embedding
	// manager reads and writes them under it for its own rules (and calls
	// BumpLocked for every change).
	Mu struct {
		sync.Mutex
		Table   map[string]*T
		Version remoting.DataVersion
		Saved   int64 // Version.Counter last written
		// Pending holds what AddSaved is creating: written by every save,
		// moved into table (made visible) once a save holding it returned.
		Pending map[string]*pendingAdd[T]
	}
}

// pendingAdd is one creation waiting for its save (AddSaved).
type pendingAdd[T any] struct {
	v    *T
	done chan struct{} // closed once v is visible in table, or dropped
}

// Init sets the file and removes the temp files a crashed save left
// beside it.
func (t *Table[T]) Init(fs vfs.FS, path string) error {
	t.fs, t.path = fs, path
	t.Mu.Table = map[string]*T{}
	t.Mu.Pending = map[string]*pendingAdd[T]{}
	if _, err := vfs.RemoveTemps(fs, path); err != nil {
		return fmt.Errorf("broker: remove stale temp files of %s: %w", path, err)
	}
	return nil
}

// Get returns a copy of name's config.
func (t *Table[T]) Get(name string) (T, bool) {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	c, ok := t.Mu.Table[name]
	if !ok {
		var zero T
		return zero, false
	}
	return *c, true
}

// Delete removes name; it reports whether it existed.
func (t *Table[T]) Delete(name string) bool {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	if _, ok := t.Mu.Table[name]; !ok {
		return false
	}
	delete(t.Mu.Table, name)
	t.BumpLocked()
	return true
}

// Names returns every name, sorted.
func (t *Table[T]) Names() []string {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	return slices.Sorted(maps.Keys(t.Mu.Table))
}

// Path is the file the table is saved to.
func (t *Table[T]) Path() string { return t.path }

// BumpLocked moves the version on; Mu is held.
func (t *Table[T]) BumpLocked() {
	t.Mu.Version.Counter++
	t.Mu.Version.Timestamp = time.Now().UnixMilli()
}

// Snapshot copies the table and its version.
func (t *Table[T]) Snapshot() (map[string]T, remoting.DataVersion) {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	out := make(map[string]T, len(t.Mu.Table))
	for n, c := range t.Mu.Table {
		out[n] = *c
	}
	return out, t.Mu.Version
}

// saveSnapshot is snapshot plus the creations waiting for their save
// (what the file is to hold).
func (t *Table[T]) saveSnapshot() (map[string]T, remoting.DataVersion, bool) {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	out := make(map[string]T, len(t.Mu.Table)+len(t.Mu.Pending))
	for n, c := range t.Mu.Table {
		out[n] = *c
	}
	for n, p := range t.Mu.Pending {
		if _, ok := out[n]; !ok {
			out[n] = *p.v
		}
	}
	return out, t.Mu.Version, t.Mu.Version.Counter != t.Mu.Saved
}

// AddSaved creates name with build's config unless it exists, and makes it
// visible (Get, Names, Snapshot) only once a save of the table holding it
// returned, so no request is answered on a creation that a process crash
// would forget: a concurrent AddSaved of the same name waits for that
// save. build runs with mu held and sees the table (and len(pending)).
// created reports whether this call made it. If the save fails, keep
// decides: true makes the creation visible anyway (unsaved: the next save
// retries it), false drops it; either way the save's error is returned.
func (t *Table[T]) AddSaved(name string, build func() (*T, error), save func() error, keep bool) (v T, created bool, err error) {
	t.Mu.Lock()
	for {
		if c, ok := t.Mu.Table[name]; ok {
			v = *c
			t.Mu.Unlock()
			return v, false, nil
		}
		p, ok := t.Mu.Pending[name]
		if !ok {
			break
		}
		t.Mu.Unlock()
		<-p.done
		t.Mu.Lock()
	}
	c, err := build()
	if err != nil {
		t.Mu.Unlock()
		return v, false, err
	}
	p := &pendingAdd[T]{v: c, done: make(chan struct{})}
	t.Mu.Pending[name] = p
	t.BumpLocked()
	t.Mu.Unlock()

	err = save() // saves of this table coalesce: one write may carry many creations
	t.Mu.Lock()
	delete(t.Mu.Pending, name)
	if cur, ok := t.Mu.Table[name]; ok {
		c = cur // put meanwhile (Put, a mirror): that one stands
		created = false
	} else if err == nil || keep {
		t.Mu.Table[name] = c
		created = true
	} else {
		t.BumpLocked() // the file may hold it: the next save rewrites without
	}
	v = *c
	t.Mu.Unlock()
	close(p.done)
	if err != nil {
		err = fmt.Errorf("%w (%s): %w", ErrNotSaved, name, err)
	}
	return v, created, err
}

// ErrNotSaved: a creation's save failed (AddSaved).
var ErrNotSaved = errors.New("broker: the config file holding a new topic or group could not be written")

// SaveWith writes encode's bytes for the current snapshot when the version
// moved since the last save. Saves of one table run one at a time.
func (t *Table[T]) SaveWith(encode func(map[string]T, remoting.DataVersion) ([]byte, error)) error {
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
	t.Mu.Lock()
	t.Mu.Saved = v.Counter
	t.Mu.Unlock()
	return nil
}

// Mirror makes the table hold exactly src (JSON-equal entries are left
// alone, so an unchanged table keeps its version) and returns the names it
// removed; norm completes each entry first.
func (t *Table[T]) Mirror(src map[string]T, norm func(name string, v *T)) (removed []string, changed bool) {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	for name, v := range src {
		c := v
		norm(name, &c)
		if old, ok := t.Mu.Table[name]; ok && jsonEqual(*old, c) {
			continue
		}
		t.Mu.Table[name] = &c
		changed = true
	}
	for name := range t.Mu.Table {
		if _, ok := src[name]; !ok {
			delete(t.Mu.Table, name)
			removed = append(removed, name)
			changed = true
		}
	}
	if changed {
		t.BumpLocked()
	}
	return removed, changed
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}
