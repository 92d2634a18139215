package loopback

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// The range ports are handed out from: below Linux's default ephemeral
// range (32768–60999), so no outgoing connection takes one, and above the
// well-known services a developer machine may run.
const (
	firstPort = 20000
	lastPort  = 32000
)

// Ports hands out ports; the zero value is ready. Each process should use
// one (the package-level Port does).
type Ports struct {
	mu   sync.Mutex
	next int
	used map[int]bool
}

var process Ports

// Port returns a loopback port from this process's Ports.
func Port() (int, error) { return process.Port() }

// Port returns a port of 127.0.0.1 that was free a moment ago and that p
// has not returned before. The search starts at a random place in the
// range, so that test processes running side by side rarely try the same
// ports.
func (p *Ports) Port() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used == nil {
		p.used = map[int]bool{}
		p.next = firstPort + rand.IntN(lastPort-firstPort)
	}
	for range lastPort - firstPort {
		port := p.next
		p.next++
		if p.next >= lastPort {
			p.next = firstPort
		}
		if p.used[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken by someone else
		}
		if err := ln.Close(); err != nil {
			return 0, err
		}
		p.used[port] = true
		return port, nil
	}
	return 0, errors.New("loopback: no free port left in 20000-32000")
}
