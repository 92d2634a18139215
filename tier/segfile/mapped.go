package segfile

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"unsafe"
)

// Mapped is implemented by a WriteFrom source whose bytes are all in
// memory, typically a read-only mapping of a file (MapFile): WriteFrom
// then copies each input byte once, straight into the frame it belongs
// to, with no read calls and no buffer of its own (a layout of
// interleaved queues makes the pread path read the windows it needs once
// per queue). MappedBytes must hold at least the input's size bytes and
// stay valid until WriteFrom returns. A fault while WriteFrom reads them
// (the mapped file was truncated under the mapping, or its page could not
// be read from disk) is returned as an error matching ErrFault, and the
// Writer is then unusable; it never crashes the process.
type Mapped interface {
	io.ReaderAt
	MappedBytes() []byte
}

// ErrFault marks a fault while reading a mapped input (Mapped): its file
// was cut shorter under the mapping, or a page of it could not be read.
var ErrFault = errors.New("segfile: fault reading a mapped file")

// guardFaults runs fn, which reads data, with memory faults of the
// calling goroutine turned into panics (debug.SetPanicOnFault), and
// returns a fault inside data as an error matching ErrFault. Any other
// panic goes on.
func guardFaults(data []byte, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			f, ok := r.(interface{ Addr() uintptr })
			if !ok || len(data) == 0 {
				panic(r)
			}
			lo := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
			if a := f.Addr(); a < lo || a-lo >= uintptr(len(data)) {
				panic(r)
			}
			err = fmt.Errorf("%w at byte %d of %d: %v", ErrFault, f.Addr()-lo, len(data), r)
		}
	}()
	return fn()
}

// MappedFile is a read-only, shared mapping of the first Size bytes of a
// file (MapFile). It implements Mapped. Close unmaps it; the bytes must
// not be used after.
type MappedFile struct {
	data []byte
	// unmap releases data (nil: nothing to release).
	unmap func([]byte) error
}

// MappedBytes returns the mapped bytes.
func (m *MappedFile) MappedBytes() []byte { return m.data }

// Size is the number of mapped bytes.
func (m *MappedFile) Size() int64 { return int64(len(m.data)) }

// ReadAt copies from the mapping; a fault is an error matching ErrFault.
func (m *MappedFile) ReadAt(p []byte, off int64) (n int, err error) {
	if off < 0 {
		return 0, fmt.Errorf("segfile: read at %d", off)
	}
	if off >= int64(len(m.data)) {
		return 0, io.EOF
	}
	err = guardFaults(m.data, func() error {
		n = copy(p, m.data[off:])
		return nil
	})
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

// Close unmaps the file. It is idempotent.
func (m *MappedFile) Close() error {
	data, unmap := m.data, m.unmap
	m.data, m.unmap = nil, nil
	if unmap == nil {
		return nil
	}
	return unmap(data)
}
