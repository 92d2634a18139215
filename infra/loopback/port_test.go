package loopback

import (
	"fmt"
	"net"
	"testing"
)

func TestPortsDistinctAndBindable(t *testing.T) {
	var p Ports
	seen := map[int]bool{}
	for range 200 {
		port, err := p.Port()
		if err != nil {
			t.Fatal(err)
		}
		if port < firstPort || port >= lastPort {
			t.Fatalf("port %d outside [%d, %d)", port, firstPort, lastPort)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
	port, err := p.Port()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("handed-out port %d is not bindable: %v", port, err)
	}
	ln.Close()
}

func TestPortsSkipTakenPorts(t *testing.T) {
	var p Ports
	held, err := p.Port()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", held))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Restart the search at the held port, as if it had never been handed out.
	p.mu.Lock()
	p.next, p.used[held] = held, false
	p.mu.Unlock()
	got, err := p.Port()
	if err != nil {
		t.Fatal(err)
	}
	if got == held {
		t.Fatalf("handed out port %d while it was listened on", got)
	}
}
