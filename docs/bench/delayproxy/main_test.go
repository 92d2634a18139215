package main

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseDist(t *testing.T) {
	d, err := parseDist("30ms-60ms:94,60ms-150ms:5,150ms-400ms:1")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.bands) != 3 || d.total != 100 || d.bands[2].hi != 400*time.Millisecond {
		t.Fatalf("parsed %+v", d)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		if x := d.draw(rnd); x < 30*time.Millisecond || x > 400*time.Millisecond {
			t.Fatalf("drew %v outside [30ms, 400ms]", x)
		}
	}
	for _, bad := range []string{"", "x", "60ms-30ms:1", "30ms-60ms:0", "30ms-60ms:-1"} {
		if _, err := parseDist(bad); err == nil {
			t.Errorf("parseDist(%q) accepted", bad)
		}
	}
}

// Every answer through the proxy is delayed once: keep-alive requests one
// after another each draw a delay, and a PUT with Expect: 100-continue gets
// its interim answer undelayed and one delay on its final answer.
func TestProxyDelaysEachAnswerOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, strings.Repeat("x", int(n%1000)+10))
	}))
	defer srv.Close()
	d, err := parseDist("1ms-2ms")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{target: srv.Listener.Addr().String(), dist: d, rnd: rand.New(rand.NewPCG(1, 2))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}
	url := "http://" + ln.Addr().String() + "/k"
	for i := range 3 {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(b) != 10 {
			t.Fatalf("GET %d: %d bytes back, want 10", i, len(b))
		}
	}
	body := bytes.Repeat([]byte("y"), 3<<20)
	req, _ := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	req.Header.Set("Expect", "100-continue")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := len(body)%1000 + 10; len(b) != want {
		t.Fatalf("PUT: %d bytes back, want %d", len(b), want)
	}
	st := p.stats()
	if st["delayed"] != 4 || st["interim_passed"] != int64(1) || st["conns"] != int64(1) {
		t.Fatalf("stats %v: want 4 answers delayed, 1 interim answer passed, 1 connection", st)
	}
}
