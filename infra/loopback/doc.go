// Package loopback hands tests and benchmarks loopback TCP ports to give
// to servers they start by address (a name server and a broker that must
// know each other's address before either listens, a versitygw process, a
// broker restarted on the same port).
//
// A port from 127.0.0.1:0 is a poor choice for that: once its probe
// listener closes, the kernel may hand the same ephemeral port to the next
// probe or to any outgoing connection before the server binds it. Ports
// from this package lie below the kernel's ephemeral range, are bindable
// when handed out, and are never handed out twice by one process.
package loopback
