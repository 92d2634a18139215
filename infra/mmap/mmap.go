package mmap

import (
	"fmt"
	"runtime/debug"
	"syscall"
	"unsafe"
)

// File is an open file that can be mapped (an *os.File).
type File interface {
	SyscallConn() (syscall.RawConn, error)
}

// Guard runs fn, which reads data (a mapping), with memory faults of the
// calling goroutine turned into panics (debug.SetPanicOnFault, restored
// after), and returns a fault inside data as an error wrapping marker.
// Any other panic goes on.
func Guard(data []byte, marker error, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			f, ok := r.(interface{ Addr() uintptr })
			if !ok || len(data) == 0 {
				panic(r)
			}
			lo := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
			a := f.Addr()
			if a < lo || a-lo >= uintptr(len(data)) {
				panic(r)
			}
			err = fmt.Errorf("%w: byte %d of %d could not be read (the file was cut shorter under its mapping, or the page failed to read)", marker, a-lo, len(data))
		}
	}()
	return fn()
}
