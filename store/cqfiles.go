package store

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/stratamq/stratamq/infra/vfs"
)

// DefaultMaxOpenQueueFiles bounds the consumequeue files kept open at once.
const DefaultMaxOpenQueueFiles = 1024

// errFileGone: the consumequeue file was retired (removed, its topic
// deleted, the store closed) before a handle could be taken; the caller
// plans its read again.
var errFileGone = errors.New("store: consumequeue file retired")

// fdCache holds the open consumequeue files: a file is opened on first use
// (read, write, sync, cut) and closed when it is the least recently used
// one not in use while more than max are open. A handle in use (refs > 0)
// is never closed: a file retired while a reader preads it is closed by the
// reader's release. mu is a leaf lock, never held across I/O.
type fdCache struct {
	fs  vfs.FS
	max int

	mu    sync.Mutex
	open  int      // handles installed, plus opens under way
	ring  cqHandle // sentinel of the LRU ring: ring.next is the most recent
	opens atomic.Int64
}

// cqHandle is an open consumequeue file.
type cqHandle struct {
	file       *cqFile
	f          vfs.File
	refs       int // guarded by fdCache.mu
	prev, next *cqHandle
}

func newFDCache(fs vfs.FS, max int) *fdCache {
	c := &fdCache{fs: fs, max: max}
	c.ring.prev, c.ring.next = &c.ring, &c.ring
	return c
}

// Opened is how many consumequeue files were opened so far (for tests).
func (c *fdCache) Opened() int64 { return c.opens.Load() }

// openCount is how many consumequeue files are open now.
func (c *fdCache) openCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

func (c *fdCache) unlinkLocked(h *cqHandle) {
	h.prev.next, h.next.prev = h.next, h.prev
	h.prev, h.next = nil, nil
}

func (c *fdCache) pushFrontLocked(h *cqHandle) {
	h.prev, h.next = &c.ring, c.ring.next
	c.ring.next.prev = h
	c.ring.next = h
}

// reserveLocked takes a slot for a file about to be opened, evicting idle
// handles (least recently used first) while the cache is full; it returns
// the files to close once mu is released.
func (c *fdCache) reserveLocked() []vfs.File {
	c.open++
	return c.evictLocked(nil)
}

// evictLocked closes idle handles, least recently used first, until at
// most max are open or none is idle; closing is left to the caller.
func (c *fdCache) evictLocked(out []vfs.File) []vfs.File {
	for h := c.ring.prev; c.open > c.max && h != &c.ring; {
		prev := h.prev
		if h.refs == 0 {
			c.unlinkLocked(h)
			h.file.h = nil
			c.open--
			out = append(out, h.f)
		}
		h = prev
	}
	return out
}

func closeAll(fs []vfs.File) {
	for _, f := range fs {
		f.Close() // an idle, synced (or about to be re-synced) file: nothing to report
	}
}

// acquire returns an open handle of f, opening the file (O_RDWR) when it
// is closed; errFileGone when f was retired. Release it after use.
func (c *fdCache) acquire(f *cqFile) (*cqHandle, error) {
	c.mu.Lock()
	if f.removed.Load() {
		c.mu.Unlock()
		return nil, errFileGone
	}
	if h := f.h; h != nil {
		h.refs++
		c.unlinkLocked(h)
		c.pushFrontLocked(h)
		c.mu.Unlock()
		return h, nil
	}
	victims := c.reserveLocked()
	c.mu.Unlock()
	closeAll(victims)
	file, err := c.fs.OpenFile(f.path, os.O_RDWR, 0)
	if err != nil {
		c.mu.Lock()
		c.open--
		gone := f.removed.Load()
		c.mu.Unlock()
		if gone {
			return nil, errFileGone
		}
		return nil, fmt.Errorf("store: open consumequeue: %w", err)
	}
	return c.install(f, file)
}

// create creates (truncating) f's file and returns a handle of it.
func (c *fdCache) create(f *cqFile) (*cqHandle, error) {
	c.mu.Lock()
	victims := c.reserveLocked()
	c.mu.Unlock()
	closeAll(victims)
	file, err := c.fs.OpenFile(f.path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		c.mu.Lock()
		c.open--
		c.mu.Unlock()
		return nil, fmt.Errorf("store: create consumequeue file: %w", err)
	}
	return c.install(f, file)
}

// install makes file, just opened in a reserved slot, f's handle. When f
// was retired meanwhile (its path may name a newer file by now) or another
// opener won, file is closed instead.
func (c *fdCache) install(f *cqFile, file vfs.File) (*cqHandle, error) {
	c.opens.Add(1)
	c.mu.Lock()
	switch {
	case f.removed.Load():
		c.open--
		c.mu.Unlock()
		file.Close()
		return nil, errFileGone
	case f.h != nil:
		c.open--
		h := f.h
		h.refs++
		c.unlinkLocked(h)
		c.pushFrontLocked(h)
		c.mu.Unlock()
		file.Close()
		return h, nil
	}
	h := &cqHandle{file: f, f: file, refs: 1}
	f.h = h
	c.pushFrontLocked(h)
	c.mu.Unlock()
	return h, nil
}

// release gives a handle back. The last user of a retired file closes it.
func (c *fdCache) release(h *cqHandle) {
	c.mu.Lock()
	h.refs--
	var victims []vfs.File
	if h.refs == 0 {
		if h.file.h != h {
			victims = append(victims, h.f) // retired while in use
		} else if c.open > c.max {
			victims = c.evictLocked(nil)
		}
	}
	c.mu.Unlock()
	closeAll(victims)
}

// retire marks f removed (no handle of it is given out again) and closes
// its file, now or at the release of its last user.
func (c *fdCache) retire(f *cqFile) error {
	c.mu.Lock()
	f.removed.Store(true)
	h := f.h
	if h == nil {
		c.mu.Unlock()
		return nil
	}
	f.h = nil
	c.unlinkLocked(h)
	c.open--
	idle := h.refs == 0
	c.mu.Unlock()
	if idle {
		if err := h.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			return fmt.Errorf("store: close consumequeue %s: %w", f.path, err)
		}
	}
	return nil
}

// sync fdatasyncs f's file (reopening it if it was closed: an fsync through
// any descriptor writes the file's dirty pages). A retired file is skipped.
func (c *fdCache) sync(f *cqFile) error {
	h, err := c.acquire(f)
	if errors.Is(err, errFileGone) {
		return nil
	}
	if err != nil {
		return err
	}
	defer c.release(h)
	if err := h.f.Sync(); err != nil && !f.removed.Load() {
		return fmt.Errorf("store: sync consumequeue %s: %w", f.path, err)
	}
	return nil
}
