package segfile

import (
	"errors"
	"fmt"
	"io"

	"github.com/stratamq/stratamq/infra/mmap"
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
	err = mmap.Guard(m.data, ErrFault, func() error {
		n = copy(p, m.data[off:])
		return nil
	})
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

// MapFile maps the first size bytes of the open file f (an *os.File)
// read-only and shared, its pages read at once (the file is about to be
// read whole); errors.ErrUnsupported where files are not mapped. The file
// must hold at least size bytes. The mapping outlives f's descriptor;
// Close unmaps it.
func MapFile(f mmap.File, size int64) (*MappedFile, error) {
	data, err := mmap.Map(f, size)
	if err != nil {
		return nil, fmt.Errorf("segfile: map file: %w", err)
	}
	return &MappedFile{data: data, unmap: mmap.Unmap}, nil
}

// Borrowed wraps bytes mapped by someone else (a read-only mapping of a
// file that another owner keeps, lent until release is called) as a
// MappedFile: its reads are guarded the same way, and Close calls
// release instead of unmapping.
func Borrowed(data []byte, release func()) *MappedFile {
	return &MappedFile{data: data, unmap: func([]byte) error { release(); return nil }}
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
