package tlsconf

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/tlsconf/tlstest"
)

// countingConn counts the socket writes and reads under a TLS conn.
type countingConn struct {
	net.Conn
	writes, reads atomic.Int64
	maxRead       atomic.Int64 // the most bytes one read returned
}

func (c *countingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	n, err := c.Conn.Read(p)
	for m := c.maxRead.Load(); int64(n) > m && !c.maxRead.CompareAndSwap(m, int64(n)); m = c.maxRead.Load() {
	}
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// tlsPair connects a gathering client Conn and a gathering server Conn
// over loopback TCP, each over a countingConn; the client has not done
// its handshake yet.
func tlsPair(t *testing.T) (client, server *Conn, cc, sc *countingConn) {
	t.Helper()
	f := tlstest.Write(t, t.TempDir())
	scfg, err := Server(ServerOptions{CertFile: f.Cert, KeyFile: f.Key})
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := Client(ClientOptions{CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	ccfg.ServerName = "127.0.0.1"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sraw, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	cc, sc = &countingConn{Conn: raw}, &countingConn{Conn: sraw}
	client, server = NewClientConn(cc, ccfg), NewServerConn(sc, scfg)
	t.Cleanup(func() { client.Close(); server.Close() })
	deadline := time.Now().Add(20 * time.Second)
	_ = client.SetDeadline(deadline)
	_ = server.SetDeadline(deadline)
	return client, server, cc, sc
}

// handshake completes both sides' handshakes.
func handshake(t *testing.T, client, server *Conn) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestConnGathersRecords: a Write of many records goes out in one socket
// write per GatherMax bytes (crypto/tls alone writes one per 16 KiB
// record), the peer reads exactly what was written, in socket reads of
// up to ReadChunk (crypto/tls alone: about two records a read), and the
// first Write
// on a fresh client does its handshake without gathering it (which would
// wait forever for the peer's answer to records never sent).
func TestConnGathersRecords(t *testing.T) {
	client, server, cc, sc := tlsPair(t)
	payload := make([]byte, 356<<10) // 23 records; chunks of GatherMax
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(payload))
		_, err := io.ReadFull(server, b)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	// The handshake happens inside this first Write.
	if n, err := client.Write(payload); err != nil || n != len(payload) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, payload) {
		t.Fatal("the server read other bytes than the client wrote")
	}
	hs := client.ConnectionState().HandshakeComplete
	if !hs {
		t.Fatal("no handshake")
	}
	before, readsBefore := cc.writes.Load(), sc.reads.Load()
	sc.maxRead.Store(0)
	if _, err := client.Write(payload); err != nil {
		t.Fatal(err)
	}
	if b := make([]byte, len(payload)); true {
		if _, err := io.ReadFull(server, b); err != nil || !bytes.Equal(b, payload) {
			t.Fatalf("second payload: %v", err)
		}
	}
	// 356 KiB is 23 records: crypto/tls alone makes 23 socket writes.
	if w, want := cc.writes.Load()-before, int64((len(payload)+GatherMax-1)/GatherMax); w != want {
		t.Fatalf("%d socket writes for %d bytes, want %d (one per %d)", w, len(payload), want, GatherMax)
	}
	// Reads of up to ReadChunk: 6 for 356 KiB. crypto/tls alone asks
	// for what its record buffer has room for (about two records): 11.
	if r, m := sc.reads.Load()-readsBefore, sc.maxRead.Load(); r > 8 || m <= 48<<10 {
		t.Fatalf("%d socket reads for 356 KiB, the largest %d bytes: want up to %d a read", r, m, ReadChunk)
	}
	// One record: written as crypto/tls writes it.
	before = cc.writes.Load()
	small := payload[:1000]
	if _, err := client.Write(small); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, len(small))
	if _, err := io.ReadFull(server, b); err != nil || !bytes.Equal(b, small) {
		t.Fatalf("small write: %v", err)
	}
	if w := cc.writes.Load() - before; w != 1 {
		t.Fatalf("%d socket writes for one record, want 1", w)
	}
}

// TestConnConcurrentWriters: Writes from several goroutines, each of
// many records, arrive whole and unmixed (each writer's records stay
// together and in order), while the server writes back on the same
// conn.
func TestConnConcurrentWriters(t *testing.T) {
	client, server, _, _ := tlsPair(t)
	handshake(t, client, server)
	const writers, rounds, size = 4, 8, 40 << 10
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := bytes.Repeat([]byte{byte('a' + w)}, size)
			for range rounds {
				if _, err := client.Write(msg); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	echoDone := make(chan error, 1)
	go func() { // the server talks back meanwhile: its writes are gathered too
		_, err := server.Write(bytes.Repeat([]byte("z"), 3*maxRecord))
		echoDone <- err
	}()
	back := make(chan error, 1)
	go func() {
		b := make([]byte, 3*maxRecord)
		_, err := io.ReadFull(client, b)
		if err == nil && !bytes.Equal(b, bytes.Repeat([]byte("z"), 3*maxRecord)) {
			err = errors.New("the client read other bytes than the server wrote")
		}
		back <- err
	}()
	buf := make([]byte, size)
	for range writers * rounds {
		if _, err := io.ReadFull(server, buf); err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(buf, buf[:1]); n != size {
			t.Fatalf("a %d-byte write arrived mixed with another: %d of %q", size, n, buf[:1])
		}
	}
	wg.Wait()
	if err := <-echoDone; err != nil {
		t.Fatal(err)
	}
	if err := <-back; err != nil {
		t.Fatal(err)
	}
}

// TestConnFailedWriteSticks: once a gathered socket write fails, that
// Write reports it and so does every later one (records sealed after a
// lost one cannot be sent in order).
func TestConnFailedWriteSticks(t *testing.T) {
	client, server, cc, _ := tlsPair(t)
	handshake(t, client, server)
	cc.Conn.Close() // the socket fails under the TLS conn
	if _, err := client.Write(make([]byte, 3*maxRecord)); err == nil {
		t.Fatal("a write on a closed socket succeeded")
	}
	if _, err := client.Write(make([]byte, 10)); err == nil {
		t.Fatal("a write after a failed one succeeded")
	}
}

// TestConnHandshakeThroughDial: Handshake (what Dial and the remoting
// client use) returns a gathering Conn with its handshake done.
func TestConnHandshakeThroughDial(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	scfg, err := Server(ServerOptions{CertFile: f.Cert, KeyFile: f.Key})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b := make([]byte, 5*maxRecord)
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadFull(c, b); err != nil {
			got <- nil
			return
		}
		got <- b
	}()
	ccfg, err := Client(ClientOptions{CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := Dial(context.Background(), ln.Addr().String(), ccfg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, ok := nc.(*Conn)
	if !ok || !c.ConnectionState().HandshakeComplete {
		t.Fatalf("Dial returned %T (handshake done: %v), want a gathering *Conn", nc, ok && c.ConnectionState().HandshakeComplete)
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), 5*maxRecord/16)
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, payload) {
		t.Fatal("a plain crypto/tls server read other bytes than the gathering client wrote")
	}
}
