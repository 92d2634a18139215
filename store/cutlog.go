package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/stratamq/stratamq/infra/vfs"
)

// CutLog cuts the commitlog of the closed store in dir at offset at (a
// record boundary): the segment holding it is truncated there and later
// segments are removed. The bytes cut off are first copied, durably, to
// the file keep (when there are any), so an operator can inspect them;
// the store rebuilds its consumequeues past the cut when it opens
// (recovery drops entries that point past the log's end). It returns how
// many bytes were cut (0: the log ends at or before at).
//
// A slave rejoining under a newer master cuts the part of its log that
// the newer epoch never had (issue 10: divergent-log truncation).
func CutLog(fs vfs.FS, dir string, at int64, keep string) (int64, error) {
	clDir := filepath.Join(dir, "commitlog")
	names, err := fs.ReadDir(clDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("store: list %s: %w", clDir, err)
	}
	type seg struct {
		base, size int64
		path       string
	}
	var segs []seg
	for _, n := range names {
		base, ok := parseSegmentName(n)
		if !ok {
			continue
		}
		p := filepath.Join(clDir, n)
		fi, err := fs.Stat(p)
		if err != nil {
			return 0, fmt.Errorf("store: stat %s: %w", p, err)
		}
		segs = append(segs, seg{base: base, size: fi.Size(), path: p})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].base < segs[j].base })
	if len(segs) > 0 && at < segs[0].base {
		return 0, fmt.Errorf("store: cut the commitlog at %d: below its first local segment %d", at, segs[0].base)
	}
	var cut int64
	for _, sg := range segs {
		if sg.base+sg.size > at {
			cut += sg.base + sg.size - max(at, sg.base)
		}
	}
	if cut == 0 {
		return 0, nil
	}
	if keep != "" {
		if err := copyTail(fs, keep, at, func(yield func(path string, from, to int64) error) error {
			for _, sg := range segs {
				if sg.base+sg.size <= at {
					continue
				}
				if err := yield(sg.path, max(at, sg.base)-sg.base, sg.size); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return 0, err
		}
	}
	for _, sg := range segs {
		switch {
		case sg.base+sg.size <= at:
		case sg.base >= at && sg.base != segs[0].base: // the first one stays, empty: the log's start
			if err := fs.Remove(sg.path); err != nil {
				return 0, fmt.Errorf("store: remove segment %s: %w", sg.path, err)
			}
		default:
			f, err := fs.OpenFile(sg.path, os.O_RDWR, 0o644)
			if err != nil {
				return 0, fmt.Errorf("store: open segment %s: %w", sg.path, err)
			}
			err = f.Truncate(max(at-sg.base, 0))
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return 0, fmt.Errorf("store: cut segment %s: %w", sg.path, err)
			}
		}
	}
	return cut, syncDir(fs, clDir)
}

// copyTail writes the byte ranges each yields (path, [from, to)) into a new
// file at path keep, synced, with the directory entry made durable.
func copyTail(fs vfs.FS, keep string, at int64, ranges func(yield func(path string, from, to int64) error) error) error {
	if err := vfs.MkdirAllDurable(fs, filepath.Dir(keep)); err != nil {
		return fmt.Errorf("store: make %s: %w", filepath.Dir(keep), err)
	}
	out, err := fs.OpenFile(keep, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("store: create %s: %w", keep, err)
	}
	err = ranges(func(path string, from, to int64) error {
		f, err := fs.OpenFile(path, os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(out, io.NewSectionReader(f, from, to-from))
		return err
	})
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(fs, filepath.Dir(keep))
	}
	if err != nil {
		return fmt.Errorf("store: keep the cut-off commitlog bytes from offset %d in %s: %w", at, keep, err)
	}
	return nil
}
