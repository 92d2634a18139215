package store

// readAheadWindow is the range after a read of a local segment that one
// advice names (the kernel reads up to its readahead size of it), and
// readAheadMargin how close to the end of the advised range a read comes
// before the next advice.
const (
	readAheadWindow = 32 << 20
	readAheadMargin = 16 << 20
	// A read counts towards a sequential streak when it lies within
	// readAheadNear of the one before it; only a streak of
	// readAheadStreak reads is advised. The pulls of a replay (each a
	// run of small reads, the queues' records side by side in the log)
	// make such streaks at once; the probes of a search by time or the
	// HA metrics' point reads jump about and never do.
	readAheadNear   = 256 << 10
	readAheadStreak = 16
)

// readAhead advises the kernel (posix_fadvise WILLNEED) that the segment's
// file from off (a file offset) on will be read, once per readAheadMargin
// of progress through it. Pulls of a queue read its records, which lie
// spread through the log among other queues', as many small preads; after
// a restart on a cold page cache each of them waited on the disk. The
// kernel reads up to its readahead size per advice, so only reads that
// follow on from each other (a streak, see readAheadStreak) are advised:
// a point read at a scattered offset must not read megabytes. Measured on a 2-vCPU
// VM (200,000 1 KiB records on 4 queues, page cache dropped, the whole
// replay): 510-553 MB/s at 2.3-2.6 µs of broker CPU per message without
// it, 697-715 MB/s at 1.35-1.55 with it; asking for the whole window in
// 2 MiB pieces instead did no better than nothing (499-600 MB/s, 2.3-2.7
// µs): the pull's own thread then fills the page cache. Racing readers
// may advise twice; that is harmless.
func (sg *segment) readAhead(off int64) {
	last := sg.raLast.Swap(off)
	if d := off - last; d > readAheadNear || d < -readAheadNear {
		sg.raStreak.Store(0)
		return
	}
	if sg.raStreak.Add(1) < readAheadStreak {
		return
	}
	start, end := sg.raStart.Load(), sg.raEnd.Load()
	if off >= start && off+readAheadMargin <= end {
		return
	}
	from := off
	if off >= start && off < end {
		from = end // the part before end was advised already
	}
	to := min(off+readAheadWindow, sg.size.Load())
	sg.raStart.Store(off)
	sg.raEnd.Store(max(to, off+readAheadWindow))
	if to > from {
		adviseWillNeed(sg.f, from, to-from)
	}
}
