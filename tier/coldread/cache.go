package coldread

import (
	"fmt"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
)

// frames is the cache of decompressed frames, in two parts that each keep
// to their share of Config.CacheBytes:
//
//   - a ristretto cache (a quarter): frames read again and again (many
//     consumers at different places, queries, the queues of a topic reading
//     the same frames in turn). Its TinyLFU admission keeps a one-pass scan
//     from flushing them;
//   - a scan window (three quarters: three times the read-ahead depth,
//     which is at most a quarter of the cache, so frames fetched ahead stay
//     until they are read), a byte-bounded FIFO that admits every frame
//     fetched: read-ahead frames
//     are cached before anyone reads them, which the admission policy
//     refuses once the cache is full, and a Set to ristretto is visible
//     only a moment later. A frame read from the window is offered to
//     ristretto again, with the hit that frequency counts.
//
// A frame may sit in both; each part is bounded, so the whole is bounded by
// CacheBytes.
type frames struct {
	hot    *ristretto.Cache[string, []byte]
	window *scanWindow

	hotEvictions, hotEvictedBytes atomic.Int64
}

func newFrames(cacheBytes int64) (*frames, error) {
	hotBytes := max(cacheBytes/4, 1)
	f := &frames{window: newScanWindow(max(cacheBytes-cacheBytes/4, 1))}
	counters := max(hotBytes/(64<<10)*10, 1000) // ten counters per frame of 64 KiB or more
	hot, err := ristretto.NewCache(&ristretto.Config[string, []byte]{
		NumCounters:        counters,
		MaxCost:            hotBytes,
		BufferItems:        64,
		Metrics:            true,
		IgnoreInternalCost: true,
		OnEvict: func(it *ristretto.Item[[]byte]) {
			f.hotEvictions.Add(1)
			f.hotEvictedBytes.Add(it.Cost)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("coldread: cache: %w", err)
	}
	f.hot = hot
	return f, nil
}

func (f *frames) get(k string) ([]byte, bool) {
	if data, ok := f.hot.Get(k); ok {
		return data, true
	}
	data, ok := f.window.get(k)
	if ok {
		f.hot.Set(k, data, int64(len(data))) // read: worth keeping if it is read again
	}
	return data, ok
}

// has reports whether k is cached, without counting a read.
func (f *frames) has(k string) bool {
	if f.window.has(k) {
		return true
	}
	_, ok := f.hot.GetTTL(k) // no hit counted
	return ok
}

func (f *frames) set(k string, data []byte) {
	f.window.set(k, data)
	f.hot.Set(k, data, int64(len(data)))
}

// stats: bytes cached (both parts; a frame in both counts twice), and the
// evictions of both.
func (f *frames) stats() (bytes, evictions, evictedBytes int64) {
	wb, we, web := f.window.stats()
	hb := int64(0)
	if m := f.hot.Metrics; m != nil {
		hb = int64(m.CostAdded() - m.CostEvicted())
	}
	return wb + max(hb, 0), we + f.hotEvictions.Load(), web + f.hotEvictedBytes.Load()
}

func (f *frames) clear() {
	f.hot.Clear()
	f.window.clear()
}

func (f *frames) close() {
	f.hot.Close()
	f.window.clear()
}

// wait makes the ristretto Sets issued so far visible (tests).
func (f *frames) wait() { f.hot.Wait() }
