package restore

import (
	"cmp"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/upload"
)

// Config is what the judge reads of the broker's configuration.
type Config struct {
	DataDir        string // store/ and config/ are under it
	BrokerName     string // names the manifest's writer when it is newer than the checkpoint's
	AcceptLoss     bool   // STRATAMQ_ACCEPT_LOSS: set aside (or start without) what the bucket lacks
	MaxMessageSize int    // the store's: where its log's last valid record ends (store.LogEnd)
	// Failover (STRATAMQ_HA_FAILOVER): a tail of a master's data dir that
	// the bucket lacks after another broker wrote the prefix (Unshipped)
	// is set aside, as rejoining the new master as a slave would, instead
	// of refusing to start (a slave's copy is refused as before).
	Failover bool
}

// Deps is what the judge works through.
type Deps struct {
	FS     vfs.FS
	Logger *slog.Logger
	Now    func() time.Time // the set-aside suffix; time.Now when nil
}

// Judge decides, before the store opens, what a broker keeps of its data
// dir and where its store starts (see the package comment). It holds no
// state between calls and starts no goroutine.
type Judge struct {
	cfg Config
	fs  vfs.FS
	log *slog.Logger
	now func() time.Time
}

// New is a judge over cfg.DataDir.
func New(cfg Config, d Deps) *Judge {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Judge{cfg: cfg, fs: d.FS, log: d.Logger, now: d.Now}
}

// commitLogDir is the data dir's commitlog directory.
func (j *Judge) commitLogDir() string { return filepath.Join(j.cfg.DataDir, "store", "commitlog") }

// Fresh reports whether the data dir holds no commitlog: a new machine,
// or a wiped disk.
func (j *Judge) Fresh() bool {
	names, err := j.fs.ReadDir(j.commitLogDir())
	return err != nil || len(names) == 0
}

// Segments is the data dir's closed commitlog (LocalSegments).
func (j *Judge) Segments() ([]Segment, error) {
	return LocalSegments(j.fs, j.commitLogDir(), j.cfg.MaxMessageSize)
}

// RefuseOrSetAside refuses to start with a message naming the range r and
// how to proceed, or, with STRATAMQ_ACCEPT_LOSS, sets the local data aside
// and restores from the bucket. localHolds: the range is on this disk
// alone (else it is lost).
func (j *Judge) RefuseOrSetAside(why string, r durability.OffsetRange, localHolds bool) error {
	what := "they are lost"
	if localHolds {
		what = "they are only on this disk"
	}
	if !j.cfg.AcceptLoss {
		return fmt.Errorf("broker: refusing to start: %s: commitlog offsets [%d, %d) (%d bytes): %s. "+
			"To keep them, stop every other broker on this prefix and copy or export the data dir %s first; "+
			"to start anyway, set STRATAMQ_ACCEPT_LOSS=true: the local data is then set aside (renamed, not deleted) "+
			"and the broker restores from the bucket", why, r.From, r.To, r.To-r.From, what, j.cfg.DataDir)
	}
	j.log.Error("STRATAMQ_ACCEPT_LOSS: setting local data aside although the bucket lacks part of it",
		"reason", why, "from", r.From, "to", r.To, "bytes", r.To-r.From)
	return j.SetAside(why)
}

// SetAside renames store/ and config/ out of the way (store.stale-<unix>,
// or store.stale-<unix>-<n> when a copy set aside in the same second holds
// that name), so the broker restores from the bucket. Nothing is deleted.
func (j *Judge) SetAside(why string) error {
	first := fmt.Sprintf(".stale-%d", j.now().Unix())
	suffix := first
	for n := 2; j.taken(suffix); n++ {
		suffix = fmt.Sprintf("%s-%d", first, n)
	}
	for _, dir := range []string{"store", "config"} {
		from := filepath.Join(j.cfg.DataDir, dir)
		if _, err := j.fs.Stat(from); err != nil {
			continue
		}
		if err := j.fs.Rename(from, from+suffix); err != nil {
			return fmt.Errorf("broker: set aside %s: %w", from, err)
		}
	}
	j.log.Warn("the local data dir was set aside; the broker restores from the bucket", "reason", why, "setAside", suffix)
	return nil
}

// taken reports whether a set-aside copy named with suffix exists.
func (j *Judge) taken(suffix string) bool {
	for _, dir := range []string{"store", "config"} {
		if _, err := j.fs.Stat(filepath.Join(j.cfg.DataDir, dir) + suffix); err == nil {
			return true
		}
	}
	return false
}

// Segment is one commitlog segment of the data dir: its base offset and
// the bytes of it that hold records.
type Segment struct{ Base, Size int64 }

// LocalSegments lists the commitlog segments in dir (a closed store's
// commitlog directory) by base, with the bytes each holds up to the end
// of the log's last valid record (store.LogEnd): the zeros written ahead
// of the active segment's records and a torn tail are not data, so they
// never make a copy look longer than it is. Segments past the end (empty
// after the cut recovery will make) are left out. A missing dir is no
// segment.
func LocalSegments(fs vfs.FS, dir string, maxMessageSize int) ([]Segment, error) {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, nil
	}
	_, end, err := store.LogEnd(fs, filepath.Dir(dir), maxMessageSize)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []Segment
	for _, n := range names {
		base, err := strconv.ParseInt(n, 10, 64)
		if err != nil || len(n) != 20 {
			continue
		}
		if base >= end && len(out) > 0 {
			break
		}
		fi, err := fs.Stat(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		out = append(out, Segment{Base: base, Size: max(0, min(fi.Size(), end-base))})
	}
	return out, nil
}

// LackingRange is the part of the local log no bucket object holds: from
// the first local segment that is not uploaded whole to the local end; nil
// when every local segment is in the manifest.
func LackingRange(m *upload.Manifest, segs []Segment) *durability.OffsetRange {
	uploaded := map[int64]int64{}
	for _, o := range m.CommitLog() {
		uploaded[o.Base] = o.Length
	}
	for _, sg := range segs {
		if sg.Size == 0 {
			continue
		}
		if n, ok := uploaded[sg.Base]; !ok || n < sg.Size {
			end := segs[len(segs)-1].Base + segs[len(segs)-1].Size
			return &durability.OffsetRange{From: sg.Base, To: end}
		}
	}
	return nil
}

// BucketGap is the first range of the local log, at or above floor (the
// retention floor), that neither a listed commitlog object nor an expired
// range of the manifest covers; nil when the bucket covers all of it.
func BucketGap(m *upload.Manifest, segs []Segment, floor int64) *durability.OffsetRange {
	return bucketGap(m, segs, floor)
}

// bucketGap is BucketGap with more ranges the bucket holds (the WAL's).
func bucketGap(m *upload.Manifest, segs []Segment, floor int64, more ...durability.OffsetRange) *durability.OffsetRange {
	covered := slices.Clone(more)
	for _, o := range m.CommitLog() {
		covered = append(covered, durability.OffsetRange{From: o.Base, To: o.End()})
	}
	for _, s := range m.Expired {
		covered = append(covered, durability.OffsetRange{From: s.From, To: s.To})
	}
	slices.SortFunc(covered, func(a, b durability.OffsetRange) int { return cmp.Compare(a.From, b.From) })
	for _, sg := range segs {
		from, to := max(sg.Base, floor), sg.Base+sg.Size
		for _, c := range covered {
			if from >= to || c.From > from {
				break
			}
			from = max(from, c.To)
		}
		if from < to {
			end := to
			for _, c := range covered {
				if c.From > from && c.From < end {
					end = c.From
					break
				}
			}
			return &durability.OffsetRange{From: from, To: end}
		}
	}
	return nil
}
