//go:build unix

package remoting

import (
	"os"
	"syscall"
)

// nbWriter writes to a plain TCP socket without ever waiting for room in
// it (ReleaseWritesNoWait). Go's sockets are non-blocking; the runtime's
// own writes wait for writability, this one returns what the socket took.
// Its write state is the write token holder's; write is bound once, so a
// write allocates nothing.
type nbWriter struct {
	raw   syscall.RawConn
	write func(fd uintptr) bool // w.writeFD
	b     []byte
	n     int
	err   error
}

// newNBWriter is the non-blocking writer of sc's socket, or nil.
func newNBWriter(sc syscall.Conn) *nbWriter {
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &nbWriter{raw: raw}
	w.write = w.writeFD
	return w
}

// writeSome writes what the socket takes of b at once, with one write
// syscall: n < len(b) with a nil error when the socket is full (EAGAIN:
// n is 0) or took part of b.
func (w *nbWriter) writeSome(b []byte) (int, error) {
	w.b, w.n, w.err = b, 0, nil
	err := w.raw.Write(w.write) // the fd's write lock; a passed deadline fails it
	n := w.n
	if err == nil {
		err = w.err
	}
	w.b, w.err = nil, nil
	return n, err
}

// writeFD runs under the fd's write lock; returning true, it never waits
// for the socket to become writable.
func (w *nbWriter) writeFD(fd uintptr) bool {
	for {
		n, err := syscall.Write(int(fd), w.b)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			// Full: nothing taken.
		case err != nil:
			w.err = os.NewSyscallError("write", err)
		case n > 0:
			w.n = n
		}
		return true
	}
}
