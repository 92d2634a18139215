package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrLocked: another process (or, for Mem, another holder in this
// process) holds the lock.
var ErrLocked = errors.New("vfs: locked by another process")

// Locker is implemented by filesystems that can take an exclusive,
// process-wide lock on a path (the OS FS: flock; Mem: in memory).
type Locker interface {
	// Lock takes an exclusive lock on path (created if missing), without
	// waiting: ErrLocked when it is held. Close releases it; the lock also
	// ends with the process.
	Lock(path string) (io.Closer, error)
}

// Lock takes fs's exclusive lock on path if fs is a Locker; otherwise it
// locks nothing (an FS wrapper for fault injection) and returns a no-op
// closer.
func Lock(fs FS, path string) (io.Closer, error) {
	if l, ok := fs.(Locker); ok {
		return l.Lock(path)
	}
	return io.NopCloser(nil), nil
}

func (osFS) Lock(path string) (io.Closer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		f.Close()
		if errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	return f, nil
}

type memLock struct {
	m    *Mem
	path string
}

func (l memLock) Close() error {
	l.m.lockMu.Lock()
	delete(l.m.locks, l.path)
	l.m.lockMu.Unlock()
	return nil
}

// Lock implements Locker for Mem: one holder per path at a time.
func (m *Mem) Lock(path string) (io.Closer, error) {
	m.lockMu.Lock()
	defer m.lockMu.Unlock()
	if m.locks == nil {
		m.locks = map[string]bool{}
	}
	p := filepath.Clean(path)
	if m.locks[p] {
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	}
	m.locks[p] = true
	return memLock{m: m, path: p}, nil
}
