package main

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// cutProxy forwards loopback TCP connections to upstream until cut: then
// it drops every open connection and every new one at once (a network
// partition between its clients and upstream), until healed.
type cutProxy struct {
	ln    net.Listener
	down  atomic.Bool
	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startCutProxy(t *testing.T, upstream string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.down.Load() {
				c.Close()
				continue
			}
			p.wg.Go(func() { p.serve(c, upstream) })
		}
	})
	t.Cleanup(func() { ln.Close(); p.cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down.Load() {
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *cutProxy) serve(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	if !p.track(c, u) {
		return
	}
	done := make(chan struct{})
	go func() { io.Copy(c, u); c.Close(); close(done) }()
	io.Copy(u, c)
	u.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// cut partitions: every connection through the proxy is closed, and new
// ones are closed at accept, until heal.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down.Store(true)
	for c := range p.conns {
		c.Close()
	}
}

func (p *cutProxy) heal() { p.down.Store(false) }
