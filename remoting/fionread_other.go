//go:build !linux

package remoting

// fionread is unknown here: -1 (the TLS read batch then spans only the
// records crypto/tls already holds).
func fionread(uintptr) int { return -1 }
