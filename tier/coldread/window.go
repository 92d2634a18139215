package coldread

import (
	"container/list"
	"sync"
)

// scanWindow is the frame cache's scan window (frames, cache.go):
// first in, first out, bounded in bytes (the sum of the frames' lengths).
// Every frame is admitted: a replay's read-ahead frames are set before
// anyone reads them, and an admission policy that weighs how often a key
// was seen (ristretto's TinyLFU) refuses them once the cache is full, so
// readers of the same scan a little behind would fetch them again. Reads
// do not reorder it: a scan's frames leave in the order they were fetched,
// so a frame fetched ahead outlives the frames the scan already read (a
// frame read often is kept by the ristretto part).
type scanWindow struct {
	max int64

	mu    sync.Mutex
	bytes int64
	lru   list.List // of *cacheEntry, newest first
	m     map[string]*list.Element

	evictions, evictedBytes, added int64
}

type cacheEntry struct {
	key  string
	data []byte
}

func newScanWindow(max int64) *scanWindow {
	return &scanWindow{max: max, m: map[string]*list.Element{}}
}

func (c *scanWindow) get(k string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.m[k]; el != nil {
		return el.Value.(*cacheEntry).data, true
	}
	return nil, false
}

// has reports whether k is cached without making it more recent.
func (c *scanWindow) has(k string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k] != nil
}

// set caches data under k (a frame larger than the budget is not kept),
// evicting the oldest frames past the budget.
func (c *scanWindow) set(k string, data []byte) {
	n := int64(len(data))
	if n > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.m[k]; el != nil {
		c.lru.MoveToFront(el)
		return
	}
	c.m[k] = c.lru.PushFront(&cacheEntry{key: k, data: data})
	c.bytes += n
	c.added++
	for c.bytes > c.max {
		el := c.lru.Back()
		e := el.Value.(*cacheEntry)
		c.lru.Remove(el)
		delete(c.m, e.key)
		c.bytes -= int64(len(e.data))
		c.evictions++
		c.evictedBytes += int64(len(e.data))
	}
}

func (c *scanWindow) stats() (bytes, evictions, evictedBytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes, c.evictions, c.evictedBytes
}

func (c *scanWindow) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Init()
	clear(c.m)
	c.bytes = 0
}
