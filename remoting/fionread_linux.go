package remoting

import "golang.org/x/sys/unix"

// fionread is the number of bytes readable on fd without blocking, or -1.
func fionread(fd uintptr) int {
	n, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD: bytes in the receive queue
	if err != nil {
		return -1
	}
	return n
}
