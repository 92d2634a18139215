//go:build !unix

package remoting

import (
	"errors"
	"syscall"
)

// nbWriter is not available here: ReleaseWritesNoWait wakes the writer,
// like ReleaseWrites.
type nbWriter struct{}

// newNBWriter is nil here: no non-blocking socket writes.
func newNBWriter(syscall.Conn) *nbWriter { return nil }

func (*nbWriter) writeSome([]byte) (int, error) { return 0, errors.ErrUnsupported }
