package body

import (
	"context"
	"io"
)

// Section returns the size bytes of r from its current offset as a
// seekable, io.ReaderAt-capable reader, when r is an io.ReaderAt and an
// io.Seeker; it does not move r's offset. ok is false for other readers.
// Reads report io.ErrUnexpectedEOF, not io.EOF, if r ends early.
func Section(r io.Reader, size int64) (s *Exact, ok bool, err error) {
	ra, isRA := r.(io.ReaderAt)
	sk, isSeeker := r.(io.Seeker)
	if !isRA || !isSeeker {
		return nil, false, nil
	}
	base, err := sk.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, false, err
	}
	return &Exact{io.NewSectionReader(ra, base, size)}, true, nil
}

// Exact is an io.SectionReader that reports io.ErrUnexpectedEOF, not
// io.EOF, when the underlying reader ends before the section does.
type Exact struct{ *io.SectionReader }

// NewExact returns the section [off, off+n) of ra.
func NewExact(ra io.ReaderAt, off, n int64) *Exact {
	return &Exact{io.NewSectionReader(ra, off, n)}
}

func (e *Exact) Read(p []byte) (int, error) {
	n, err := e.SectionReader.Read(p)
	if err == io.EOF {
		if pos, serr := e.Seek(0, io.SeekCurrent); serr == nil && pos < e.Size() {
			err = io.ErrUnexpectedEOF
		}
	}
	return n, err
}

// ReadAt is io.SectionReader's, with the same early-end rule as Read.
func (e *Exact) ReadAt(p []byte, off int64) (int, error) {
	n, err := e.SectionReader.ReadAt(p, off)
	if err == io.EOF && off+int64(n) < e.Size() {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// Underlying returns the section's ReaderAt and offset, for splitting it
// into parts.
func (e *Exact) Underlying() (io.ReaderAt, int64) {
	ra, off, _ := e.Outer()
	return ra, off
}

// CtxReader fails reads once ctx is done, so a cancelled Put stops
// consuming its reader.
type CtxReader struct {
	Ctx context.Context
	R   io.Reader
}

func (c CtxReader) Read(p []byte) (int, error) {
	if err := c.Ctx.Err(); err != nil {
		return 0, err
	}
	return c.R.Read(p)
}

// ExactReader reads exactly n bytes of r: io.EOF after n bytes, and
// io.ErrUnexpectedEOF if r ends sooner.
func ExactReader(r io.Reader, n int64) io.Reader { return &exactReader{r: r, left: n} }

type exactReader struct {
	r    io.Reader
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err == io.EOF && e.left == 0 {
		err = nil // the next call reports io.EOF
	}
	return n, err
}
