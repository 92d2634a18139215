// Package tlsconf builds the crypto/tls configurations of StrataMQ's ports
// and outgoing connections from PEM files: a server's certificate and key
// (reloaded when either file changes), an optional client CA for mutual
// TLS, and a client's CA and certificate. TLS 1.2 is the minimum.
//
// It knows nothing of brokers or settings: cmd/stratamq reads the
// STRATAMQ_TLS_* variables, calls Server and Client, and hands the configs
// to the remoting servers and clients, the HA port and the HTTP server.
// Errors name the file at fault and never print key material.
//
// Conn is the TLS connection the remoting ports and clients use (and the
// HA port and a slave's dial): a tls.Conn that sends the records of one
// Write in one socket write and reads many records per socket read,
// instead of a syscall per 16 KiB record.
package tlsconf
