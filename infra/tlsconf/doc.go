// Package tlsconf builds the crypto/tls configurations of StrataMQ's ports
// and outgoing connections from PEM files: a server's certificate and key
// (reloaded when either file changes), an optional client CA for mutual
// TLS, and a client's CA and certificate. TLS 1.2 is the minimum.
//
// It knows nothing of brokers or settings: cmd/stratamq reads the
// STRATAMQ_TLS_* variables, calls Server and Client, and hands the configs
// to the remoting servers and clients, the HA port and the HTTP server.
// Errors name the file at fault and never print key material.
package tlsconf
